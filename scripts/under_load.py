"""A command run several times in a row while other processes keep the machine's cores busy: how a test group is
shown to pass on a loaded machine, not only on a quiet one (issue 50: the browser group, three runs in a row).

    python -m scripts.under_load [--busy N] [--runs 3] -- .venv/bin/python -m pytest tests/e2e

``--busy`` processes (one per core unless told) each spin a core at normal priority for as long as the runs last,
as another job on a shared CI runner would. Prints each run's wall time and exit code, and exits with the first
failing run's code (0 when every run passed).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

# Spins until the process that started it, whose pid ends its one argument (spinner_tag), is gone: killed, this
# script's spinners do not outlive it, even when it dies before a spinner has begun.
SPIN = "import os, sys\nparent = int(sys.argv[1].rsplit('-', 1)[1])\nwhile os.getppid() == parent: pass"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def spinner_tag(pid: int) -> str:
    """The last word of the command line of the spinners process ``pid`` starts: how a test tells them apart."""
    return f"lmviz-under-load-{pid}"


def run_under_load(command: list[str], runs: int, busy: int) -> list[tuple[float, int]]:
    """Each run's (wall seconds, exit code), with ``busy`` spinning processes alive throughout."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a CI timeout's TERM still ends the spinners below
    spinners, results = [], []
    try:
        spinners += [subprocess.Popen([sys.executable, "-c", SPIN, spinner_tag(os.getpid())]) for _ in range(busy)]
        for _ in range(runs):
            started = time.monotonic()
            code = subprocess.run(command).returncode
            results.append((time.monotonic() - started, code))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=cores(), help="spinning processes (default: one per core)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    results = run_under_load(command, args.runs, args.busy)
    print(f"\n{' '.join(command)}: {args.runs} runs, {args.busy} busy processes on {cores()} cores\n")
    print("| run | wall (s) | exit code |\n|---:|---:|---:|")
    for number, (seconds, code) in enumerate(results, 1):
        print(f"| {number} | {seconds:.0f} | {code} |")
    sys.exit(next((code for _, code in results if code), 0))


if __name__ == "__main__":
    main()
