"""scripts/test_times.py: a JUnit file's test seconds summed per folder, per kind of work and per lesson, and the
slowest tests; and the kind of work tests/conftest.py records for each test, seen as it happens."""

import subprocess
import sys
from pathlib import Path

from scripts.test_times import folder_of, function_of, lesson_costs, module_of, names_a, timed_tests
from tests.conftest import WORK, work_of

ROOT = Path(__file__).resolve().parent.parent
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_browser" name="test_a" time="30.5">
<properties><property name="work" value="browser"/></properties></testcase>
<testcase classname="tests.e2e.test_browser.TestTabs" name="test_b[app_pages/grpo.py]" time="9.5">
<properties><property name="work" value="browser"/></properties></testcase>
<testcase classname="tests.test_docs" name="test_c[grpo-1]" time="10.0"/>
</testsuite></testsuites>"""


def test_each_case_is_read_with_its_folder_and_its_work(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    times = timed_tests(junit)
    assert [(t.test_id, t.seconds, t.work) for t in times] == [
        ("tests.e2e.test_browser::test_a", 30.5, "browser"),
        ("tests.e2e.test_browser.TestTabs::test_b[app_pages/grpo.py]", 9.5, "browser"),
        ("tests.test_docs::test_c[grpo-1]", 10.0, "")]
    assert [folder_of(t.test_id) for t in times] == ["tests/e2e", "tests/e2e", "tests"]
    assert function_of("tests.test_docs::test_c[x-1]") == "tests.test_docs::test_c"
    assert names_a("tests.x::test_c[app_pages/grpo.py-1]", {"app_pages/grpo.py"})
    assert names_a("tests.x::test_c[next-token-empty]", {"next-token"})  # a name with a hyphen, whole
    assert names_a("tests.x::test_c[chat-loss question-long]", {"chat-loss question"})
    assert not names_a("tests.x::test_c[one-stepper]", {"step"}) and not names_a("tests.x::test_step", {"step"})
    assert module_of("tests.course.test_questions_toy::test_y") == "toy"
    assert module_of("tests.e2e.test_browser.TestTabs::test_b") == "browser"
    costs = lesson_costs(times, {"grpo": ({"grpo", "app_pages/grpo.py"}, {"grpo"}), "browser": (set(), {"browser"})})
    assert costs["grpo"] == ([9.5, 10.0], [])  # both name it in their parameters
    assert costs["browser"] == ([], [30.5, 9.5])  # in a module named after it


def test_the_tables_sum_each_folder_and_kind_and_name_the_slowest(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    shown = subprocess.run([sys.executable, "-m", "scripts.test_times", str(junit), "--slowest", "1", "--functions",
                            "1"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout
    assert "3 tests, 50 s summed over the workers" in shown
    assert "| tests/e2e | 2 | 40 | 80.0% |" in shown and "| tests | 1 | 10 | 20.0% |" in shown
    assert "| browser | 2 | 40 | 80.0% |" in shown and "| not recorded | 1 | 10 | 20.0% |" in shown
    assert "| grpo | 2 | 20 | 0 | 0 |" in shown  # RL fine-tuning, named by both parametrized cases
    assert "| browser | 2 | 40 |" in shown
    assert "| tests.e2e.test_browser::test_a | 1 | 30 |" in shown  # the costliest function, alone at --functions 1
    assert shown.rstrip().endswith("30.5 s  tests.e2e.test_browser::test_a")


def test_a_tests_work_is_the_costliest_kind_it_did():
    assert work_of(["browser", "bundled"], {"process", "page"}) == "browser"
    assert work_of(["bundled"], {"page", "backward", "process"}) == "process"
    assert work_of(["bundled"], {"page", "backward"}) == "page and backward"
    assert work_of(["bundled"], {"page"}) == "page"
    assert work_of([], {"backward"}) == "backward"
    assert work_of(["bundled"], set()) == "SmolLM2"
    assert work_of([], set()) == "other"
    # WORK lists the kinds in the order work_of ranks them: each kind wins over every one after it
    everything = ["browser", "bundled"], {"process", "page", "backward"}
    ranked = [work_of(*everything), work_of(["bundled"], {"page", "backward", "process"}),
              work_of(["bundled"], {"page", "backward"}), work_of(["bundled"], {"page"}),
              work_of(["bundled"], {"backward"}), work_of(["bundled"], set()), work_of([], set())]
    assert ranked == list(WORK)


def test_the_work_a_test_does_is_seen_as_it_happens(tmp_path):
    """A run of three tests that each do one thing (start a process, take a backward pass, run a page headless)
    records each one's kind in its JUnit file: the watchers see the work itself, whatever the test is called."""
    (tmp_path / "test_three.py").write_text('''
import subprocess, sys
import torch
from streamlit.testing.v1 import AppTest

def test_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_two():
    w = torch.ones(2, requires_grad=True)
    torch.autograd.grad((w * w).sum(), w)

def test_three():
    AppTest.from_string("import streamlit as st\\nst.write(1)", default_timeout=60).run()

def test_four():
    assert 1 + 1 == 2
''')
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                          "from tests.conftest import *  # noqa\n")
    junit = tmp_path / "junit.xml"
    # two workers: each test's property travels from the worker that ran it to the JUnit file the controller writes
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), "-c", "/dev/null", f"--junitxml={junit}", str(tmp_path / "test_three.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    work = {t.test_id.split("::")[1]: t.work for t in timed_tests(junit)}
    assert work == {"test_one": "process", "test_two": "backward", "test_three": "page", "test_four": "other"}
