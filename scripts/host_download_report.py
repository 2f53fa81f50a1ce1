"""What a generic Linux host downloads for each install route, asked of pip's own resolver.

    python -m scripts.host_download_report [--stand-in WHEEL]

For requirements.txt and requirements-cpu.txt, pip resolves (``--dry-run --report``, nothing is
installed) as a manylinux x86-64 CPython 3.11 host with no pip configuration would: this machine's
find-links, extra indexes and constraint file are switched off, and every package comes from PyPI
(plus, for the CPU route, the index its file names). Each file's size is read with an HTTP HEAD
request. Where download.pytorch.org cannot be reached, ``--stand-in`` offers a local copy of the
CPU wheel in its place, and the table says which rows were measured on such a copy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

from lmviz.core.numbers import fmt

ROOT = Path(__file__).resolve().parent.parent
ROUTES = {"requirements.txt": "PyPI's torch, as pinned", "requirements-cpu.txt": "CPU-only torch"}
PYTHON_VERSION = "3.11"
GLIBC_MINOR = 28  # torch's own wheels are manylinux_2_28: a host that can run them accepts 2_5 … 2_28
LEGACY_TAGS = ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
MB = 1e6


def host_platforms() -> list[str]:
    """pip matches --platform literally: a manylinux_2_28 host also takes manylinux_2_17 wheels (tokenizers)."""
    return [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)] + LEGACY_TAGS


def generic_env() -> dict[str, str]:
    """This process's environment without pip's settings, and no pip configuration file at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # also skips the global file (/etc/xdg/pip) that --isolated still reads
    return env


def pip_report(requirements: Path, find_links: Path | None) -> dict:
    """pip's installation report for `requirements` on the generic host, nothing installed."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        platforms = [arg for tag in host_platforms() for arg in ("--platform", tag)]
        # --target only because pip refuses --platform without it; --dry-run writes nothing there.
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--report", str(report), "--target", str(Path(tmp) / "never"),
               "--only-binary=:all:", *platforms, "--python-version", PYTHON_VERSION, "--implementation", "cp",
               "--retries", "1", "--timeout", "15", "--index-url", "https://pypi.org/simple", "-r", str(requirements)]
        if find_links:
            cmd += ["--find-links", str(find_links)]
        done = subprocess.run(cmd, env=generic_env(), cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
            sys.exit(f"pip could not resolve {requirements.name}: {(errors or [done.stderr.strip()])[-1]}")
        return json.loads(report.read_text())


def file_size(url: str) -> tuple[int, str]:
    """(bytes, where they come from): a HEAD request for an index's file, the file itself for a local stand-in."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).stat().st_size, "local copy (stand-in)"
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as answer:
        return int(answer.headers["Content-Length"]), parsed.hostname


def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10)
        return True
    except OSError:
        return False


def rows(report: dict) -> list[tuple[str, str, int, str]]:
    """(package, version, bytes, from) for every file the host would download, largest first."""
    found = []
    for item in report["install"]:
        size, source = file_size(item["download_info"]["url"])
        found.append((item["metadata"]["name"], item["metadata"]["version"], size, source))
    return sorted(found, key=lambda row: -row[2])


def print_table(title: str, found: list[tuple[str, str, int, str]]) -> None:
    print(f"\n{title}\n")
    print("| package | version | MB | from |\n|---|---|---:|---|")
    for name, version, size, source in found:
        print(f"| {name} | {version} | {fmt(size / MB, 1)} | {source} |")
    print(f"| **total ({len(found)} files)** | | **{fmt(sum(r[2] for r in found) / MB, 1)}** | |")


def stand_in_folder(wheel: Path | None, tmp: str) -> Path | None:
    """A find-links folder holding only the stand-in wheel (a link, not a copy: it is ~190 MB)."""
    if wheel is None:
        return None
    (Path(tmp) / wheel.name).symlink_to(wheel.resolve())
    return Path(tmp)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stand-in", type=Path, help="a local torch …+cpu wheel, offered when its index is down")
    args = parser.parse_args(argv)
    if args.stand_in and not args.stand_in.is_file():
        sys.exit(f"--stand-in {args.stand_in}: no such file.")
    pytorch_up = reachable("https://download.pytorch.org/whl/cpu/torch/")
    print(f"download.pytorch.org reachable from here: {'yes' if pytorch_up else 'no'}")
    if not pytorch_up and not args.stand_in:
        sys.exit("PyTorch's CPU index cannot be reached: --stand-in WHEEL measures a local torch …+cpu wheel.")
    totals = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, label in ROUTES.items():
            links = stand_in_folder(args.stand_in, tmp) if name != "requirements.txt" and not pytorch_up else None
            found = rows(pip_report(ROOT / name, links))
            print_table(f"{name}, {label}: manylinux x86-64 CPython {PYTHON_VERSION}:", found)
            totals[name] = sum(row[2] for row in found)
    print("\n| route | download |\n|---|---:|")
    for name, total in totals.items():
        print(f"| {name} ({ROUTES[name]}) | {fmt(total / MB, 1)} MB |")


if __name__ == "__main__":
    main()
