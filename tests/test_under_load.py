"""scripts/under_load.py: a command run several times in a row beside processes that keep the cores busy."""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# How many of the spinners of the process that started this one are alive: ps's lines that end with their tag
# (scripts.under_load.spinner_tag), so that a run elsewhere on the machine is not counted
COUNT_SPINNERS = ("import os, subprocess, sys; from scripts.under_load import spinner_tag; "
                  "pid = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid(); "
                  "out = subprocess.run(['ps', '-ww', '-eo', 'args'], capture_output=True, text=True).stdout; "
                  "print('spinning', sum(line.endswith(spinner_tag(pid)) for line in out.splitlines()), pid)")


def under_load(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.under_load", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_each_run_sees_the_busy_processes_and_they_end_with_the_runs():
    done = under_load("--busy", "2", "--runs", "2", "--", sys.executable, "-c", COUNT_SPINNERS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("spinning 2 ") == 2  # both runs, beside both spinners
    assert "2 runs, 2 busy processes" in done.stdout and "| 2 |" in done.stdout
    pid = done.stdout.split("spinning 2 ")[1].split()[0]  # the under_load process, gone now
    after = subprocess.run([sys.executable, "-c", COUNT_SPINNERS, pid], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert f"spinning 0 {pid}" in after.stdout, after.stderr


def test_a_failing_run_fails_the_whole():
    done = under_load("--busy", "1", "--runs", "2", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert done.returncode == 3
    assert done.stdout.count("| 3 |") == 2  # each run's exit code in the table


def test_killed_the_spinners_do_not_outlive_it():
    """A CI timeout kills the script outright (no finally runs): its spinners, left alone, end by themselves."""
    started = subprocess.Popen([sys.executable, "-m", "scripts.under_load", "--busy", "1", "--runs", "1", "--",
                                sys.executable, "-c", "import time; time.sleep(20)"], cwd=ROOT)
    count = [sys.executable, "-c", COUNT_SPINNERS, str(started.pid)]

    def seen(spinning: int) -> bool:
        """Whether ``spinning`` spinners of it are alive, asked until they are, for at most about a minute."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = subprocess.run(count, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
            if f"spinning {spinning} " in shown:
                return True
        return False

    assert seen(1)  # its spinner started
    started.kill()
    started.wait()
    assert seen(0)
