"""benchmarks/memory.py: its reading of a process tree's memory against psutil, and its quick run end to end."""

import os
import re
import shutil
import subprocess
import sys

import psutil
import pytest

from benchmarks.memory import MemoryLimit, resident_mb
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
    # each row of the table: the stage, the model the page names, then VmRSS and VmHWM (the peak while it ran) in MB
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in run.stdout.splitlines()
             if line.startswith("| ") and not line.startswith("| after opening")]
    megabytes = {stage: [int(value.strip("*").removesuffix(" MB").replace(" ", "")) if value else None
                         for value in values] for stage, _model, *values in table}
    assert list(megabytes) == ["server started", "Home", "Your sentence", "Masked LM", "**peak (VmHWM)**",
                               "of the last row, not file-backed (RssAnon)"]
    pages = [megabytes[stage] for stage in ("server started", "Home", "Your sentence", "Masked LM")]
    rss, hwm = [page[0] for page in pages], [page[1] for page in pages]
    peak = megabytes["**peak (VmHWM)**"]
    assert peak[0] is None and peak[1] == max(hwm)
    assert 0 < rss[0] < rss[-1] <= peak[1]
    # a row's VmHWM is the peak while its page ran: never below the VmRSS read with it
    assert all(now <= high for now, high in zip(rss, hwm))
    anonymous = megabytes["of the last row, not file-backed (RssAnon)"]
    assert 0 < anonymous[0] <= rss[-1] and anonymous[1] is None
    # each page was opened with its default model, as the page itself names it
    assert re.search(r"^\| Your sentence \| SmolLM2-135M-Instruct \|", run.stdout, re.M)
    assert re.search(r"^\| Masked LM \| lmviz-tiny-bert \|", run.stdout, re.M)
    assert "LMVIZ_LOW_MEMORY=1 peak" in run.stdout and "float32 peak" not in run.stdout


@pytest.mark.skipif(not os.access(MemoryLimit.ROOT, os.W_OK), reason="needs a writable cgroup v1 memory controller")
@pytest.mark.parametrize("held_mb, killed", [(100, 0), (400, 1)])
def test_a_memory_limit_holds_a_process_and_reports_what_the_kernel_did(held_mb, killed):
    """--limit-mb's cgroup: a process in it within the limit is left alone; over it, the kernel kills it."""
    limit = MemoryLimit(250)
    try:
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); "
                                  f"block = bytearray(b'x') * {held_mb * 10**6}; print('ready', flush=True)"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        limit.hold(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert (child.stdout.readline().strip() == "ready") == (killed == 0)
        child.wait(timeout=30)
        report = limit.report()
        assert f"processes killed for memory: {killed}" in report and "of the 250 MB limit" in report
    finally:
        limit.close()
