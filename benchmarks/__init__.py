"""Benchmarks: scripts that print tables (see each module's docstring for its command)."""

import json
import os
import subprocess
import sys


def in_fresh_process(code: str, env: dict | None = None, timeout: float = 1800) -> dict:
    """Run a measurement in a fresh Python process (its own memory, nothing loaded before it); the code prints
    one JSON line, returned as a dict."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])
