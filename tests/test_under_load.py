"""scripts/under_load.py: a command run several times in a row beside processes that keep the cores busy."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the busy processes' count, as the command sees it: the processes spinning at the time (ps's lines that end so)
COUNT_SPINNERS = ("import subprocess; out = subprocess.run(['ps', '-eo', 'args'], capture_output=True, text=True)"
                  ".stdout; print('spinning', sum(line.endswith('-c while True: pass') for line in out.splitlines()))")


def under_load(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.under_load", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_each_run_sees_the_busy_processes_and_they_end_with_the_runs():
    done = under_load("--busy", "2", "--runs", "2", "--", sys.executable, "-c", COUNT_SPINNERS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("spinning 2") == 2  # both runs, beside both spinners
    assert "2 runs, 2 busy processes" in done.stdout and "| 2 |" in done.stdout
    after = subprocess.run([sys.executable, "-c", COUNT_SPINNERS], capture_output=True, text=True, timeout=60)
    assert "spinning 0" in after.stdout


def test_a_failing_run_fails_the_whole():
    done = under_load("--busy", "1", "--runs", "2", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert done.returncode == 3
    assert done.stdout.count("| 3 |") == 2  # each run's exit code in the table
