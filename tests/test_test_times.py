"""scripts/test_times.py: a JUnit file's test seconds summed per folder, shares and the slowest tests."""

import subprocess
import sys
from pathlib import Path

from scripts.test_times import folder_of, function_of, seconds_per_test

ROOT = Path(__file__).resolve().parent.parent
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_browser" name="test_a" time="30.5"/>
<testcase classname="tests.e2e.test_browser.TestTabs" name="test_b" time="9.5"/>
<testcase classname="tests.test_docs" name="test_c[x]" time="10.0"/>
</testsuite></testsuites>"""


def test_each_case_is_read_with_its_folder(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    times = seconds_per_test(junit)
    assert times == [("tests.e2e.test_browser::test_a", 30.5), ("tests.e2e.test_browser.TestTabs::test_b", 9.5),
                     ("tests.test_docs::test_c[x]", 10.0)]
    assert [folder_of(test_id) for test_id, _ in times] == ["tests/e2e", "tests/e2e", "tests"]
    assert function_of("tests.test_docs::test_c[x-1]") == "tests.test_docs::test_c"


def test_the_table_sums_each_folder_and_names_the_slowest(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    shown = subprocess.run([sys.executable, "-m", "scripts.test_times", str(junit), "--slowest", "1", "--functions",
                            "1"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout
    assert "3 tests, 50 s summed over the workers" in shown
    assert "| tests/e2e | 2 | 40 | 80.0% |" in shown and "| tests | 1 | 10 | 20.0% |" in shown
    assert "| tests.e2e.test_browser::test_a | 1 | 30 |" in shown  # the costliest function, alone at --functions 1
    assert shown.rstrip().endswith("30.5 s  tests.e2e.test_browser::test_a")
