"""benchmarks/live.py: the latency it reports is read from the projector's reads, and --quick prints its table."""

import subprocess
import sys
from pathlib import Path

from benchmarks.live import run_class
from lmviz.live.store import Store

ROOT = Path(__file__).resolve().parent.parent


def test_every_answer_is_counted_and_no_sooner_than_it_was_sent(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'live.sqlite3'}") as store:
        row = run_class(store, participants=12, window_s=0.5)
    assert row["answers"] == row["counted"] == 12
    assert 0 <= row["to count p50"] <= row["to count p95"] <= 2.0 + 1.0  # one refresh, and the read itself
    assert 0 <= row["wait p50"] <= row["wait p95"]


def test_quick_prints_a_row_per_back_end():
    done = subprocess.run([sys.executable, "-m", "benchmarks.live", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "| 30 |" in line]
    assert rows and all("| 30 of 30 |" in row for row in rows), done.stdout
    assert rows[0].startswith("| SQLite (WAL) |")


def test_with_the_page_as_projector_every_answer_is_counted_where_the_page_writes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LMVIZ_LIVE_DB", "unset")  # PageRead sets both for the page it runs; restored after
    monkeypatch.setenv("LMVIZ_WARM_START", "1")
    with Store(f"sqlite:///{tmp_path / 'live.sqlite3'}") as store:
        row = run_class(store, participants=6, window_s=0.5, page=True)
    assert row["answers"] == row["counted"] == 6
    assert row["cpu ms/read"] > 0
