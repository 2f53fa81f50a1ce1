"""benchmarks/grpo.py: --quick runs and prints its table, and the group it measures is the lesson's."""

import subprocess
import sys
from pathlib import Path

from benchmarks.grpo import PROMPT, RIGHT_NUMBER, SEED, TEMPERATURE, measured
from lmviz.lessons.grpo import contains_number, rewards, sample_group

ROOT = Path(__file__).resolve().parent.parent


def test_measured_returns_the_calls_result_its_time_and_its_peak():
    result, seconds, peak = measured(lambda: bytearray(b"x") * (100 * 2**20))  # written, so resident
    assert len(result) == 100 * 2**20 and seconds > 0 and 95 <= peak <= 150


def test_quick_prints_the_smallest_row_of_the_lessons_group(bundled):
    done = subprocess.run([sys.executable, "-m", "benchmarks.grpo", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("GRPO's group and step, CPU (") and "load average" in lines[0]
    assert lines[-1].startswith("Load average ") and " at the start, " in lines[-1]
    rows = [line.split() for line in lines if line.split()[:2] == ["2", "12"]]
    assert len(rows) == 1  # --quick: G = 2, 12 tokens, once
    group = sample_group(bundled, PROMPT, 2, SEED, TEMPERATURE, 12)
    right = sum(rewards(group, contains_number(RIGHT_NUMBER)))
    assert rows[0][2:4] == [str(sum(len(a.ids) for a in group.answers)), f"{right:.0f}"]
    seconds_and_peaks = [rows[0][i] for i in (5, 6, 8, 9)]
    assert all(float(x) >= 0 for x in seconds_and_peaks), rows[0]
