"""benchmarks/memory.py: its reading of a process tree's memory against psutil, and its quick run end to end."""

import os
import re
import shutil
import subprocess
import sys

import psutil
import pytest

from benchmarks.memory import resident_mb
from scripts.live_server import ROOT

CHILD_MB = 200
# a child that holds CHILD_MB of written (so resident) memory until its stdin closes
HOLDER = f"import sys; block = bytearray(b'x') * {CHILD_MB * 10**6}; print('ready', flush=True); sys.stdin.read()"


def test_resident_memory_matches_psutil_and_counts_children():
    before = resident_mb(os.getpid())[0]
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        rss, peak, anonymous = resident_mb(child.pid)
        reference = psutil.Process(child.pid).memory_info().rss / 1e6
        assert rss == pytest.approx(reference, abs=2)  # the two reads are a moment apart
        assert anonymous >= CHILD_MB and peak >= rss
        # the child's memory is counted in its parent's tree (a server's worker processes would be)
        assert resident_mb(os.getpid())[0] - before == pytest.approx(rss, abs=30)
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_quick_run_measures_each_page_in_a_real_browser():
    if shutil.which("chromium") is None:
        if os.environ.get("LMVIZ_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (apt-get install chromium); CI requires the browser tests.")
        pytest.skip("chromium is not installed: apt-get install chromium to run this benchmark's test")
    run = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--quick"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = dict(re.findall(r"^\| (.+?) \| .*?\| \**([\d ]+) MB\** \|$", run.stdout, re.M))
    megabytes = {stage: int(value.replace(" ", "")) for stage, value in rows.items()}
    assert list(megabytes) == ["server started", "Home", "Your sentence", "Masked LM", "**peak (VmHWM)**",
                               "of the last row, not file-backed (RssAnon)"]
    pages = [megabytes[stage] for stage in ("server started", "Home", "Your sentence", "Masked LM")]
    assert 0 < pages[0] < pages[-1] <= megabytes["**peak (VmHWM)**"]
    assert max(pages) <= megabytes["**peak (VmHWM)**"]
    assert 0 < megabytes["of the last row, not file-backed (RssAnon)"] <= pages[-1]
    # each page was opened with its default model, as the page itself names it
    assert re.search(r"^\| Your sentence \| SmolLM2-135M-Instruct \|", run.stdout, re.M)
    assert re.search(r"^\| Masked LM \| lmviz-tiny-bert \|", run.stdout, re.M)
