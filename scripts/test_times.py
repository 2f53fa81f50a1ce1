"""Where a test run's time goes, from the JUnit XML that pytest writes (`--junitxml`, as .ci/run asks for):
the seconds of the tests of each folder, summed, their share; the same per kind of work (the property "work" that
tests/conftest.py records for each test: a browser, a process started, a page run headless, a backward pass, the
bundled model); what each lesson costs (the tests whose parameters name it, which every lesson gets from the
registry, and the tests in the modules named after it); the test functions that cost most, each with all of its
parametrized cases; and the slowest single tests.

    python -m scripts.test_times artifacts/pytest-junit.xml [--functions 15] [--slowest 15]

With several workers (pytest.ini's -n auto) at once, each test's seconds include its waits for a core: the summed
seconds are about the workers' count times the run's wall time.
"""

from __future__ import annotations

import argparse
import re
import statistics
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Timed:
    test_id: str  # tests.e2e.test_x::test_y[params]
    seconds: float  # setup, call and teardown
    work: str  # the kind of work it did, as tests/conftest.py saw it ("" in a file written without it)


def timed_tests(junit: Path) -> list[Timed]:
    """Every test case of the file, with its seconds and the kind of work it did."""
    timed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        work = next((p.get("value", "") for p in case.iter("property") if p.get("name") == "work"), "")
        timed.append(Timed(f"{case.get('classname', '')}::{case.get('name', '')}", float(case.get("time", 0)), work))
    return timed


def folder_of(test_id: str) -> str:
    """tests/e2e for tests.e2e.test_x.Class::name; the top-level test files are tests/."""
    parts = test_id.split("::")[0].split(".")
    modules = [p for p in parts if not p[:1].isupper()]  # a class name is not a folder
    return "/".join(modules[:-1]) or "tests"


def function_of(test_id: str) -> str:
    """The test function, its parametrized cases together: tests.docs::test_c for tests.docs::test_c[x]."""
    return test_id.split("[")[0]


def names_a(test_id: str, names: set[str]) -> bool:
    """Whether the test's parameters hold one of ``names`` whole: "next-token" in test_x[next-token-empty] and in
    test_x[app_pages/next_token.py], never "step" in test_x[one-stepper]. Parameters are joined by "-" and a
    surface may hold a space ("chat-loss question")."""
    found = re.search(r"\[(.*)\]$", test_id)
    return bool(found) and any(re.search(rf"(?:^|[-\s]){re.escape(name)}(?:$|[-\s])", found.group(1))
                               for name in names)


def module_of(test_id: str) -> str:
    """The test's module without its "test_" (and a questions module's "questions_"): grpo_trl for
    tests.lessons.test_grpo_trl::test_x, toy for tests.course.test_questions_toy::test_y."""
    modules = [p for p in test_id.split("::")[0].split(".") if not p[:1].isupper()]
    return modules[-1].removeprefix("test_").removeprefix("questions_")


def lesson_costs(times: list[Timed], lessons: dict[str, tuple[set[str], set[str]]]
                 ) -> dict[str, tuple[list[float], list[float]]]:
    """For each lesson, (the names its tests' parameters may give it, the names its own modules start with): the
    seconds of the tests whose parameters name it (what the registry gives every lesson), and of the other tests in
    a module named after it (its own tests)."""
    costs: dict[str, tuple[list[float], list[float]]] = {stem: ([], []) for stem in lessons}
    for t in times:
        module = module_of(t.test_id)
        for stem, (names, modules) in lessons.items():
            if names_a(t.test_id, names):
                costs[stem][0].append(t.seconds)
            elif any(module == m or module.startswith(f"{m}_") for m in modules):
                costs[stem][1].append(t.seconds)
    return costs


def registry_lessons() -> dict[str, tuple[set[str], set[str]]]:
    """Each lesson's names in parameters (stem, url path, page file) and its modules' (stem, url path, the name of
    the module that computes its numbers: training for Train)."""
    from lmviz.course.registry import PATH

    return {lesson.stem: ({lesson.stem, lesson.url_path, lesson.page},
                          {lesson.stem, lesson.url_path.replace("-", "_"), lesson.computation.rsplit(".", 1)[-1]})
            for lesson in PATH}


def table(title: str, rows: dict[str, list[float]], total: float) -> None:
    print(f"\n{title}\n\n| {title.split(':')[0].lower()} | tests | seconds | share |\n|---|---:|---:|---:|")
    for name, seconds in sorted(rows.items(), key=lambda item: -sum(item[1])):
        print(f"| {name} | {len(seconds)} | {sum(seconds):.0f} | {sum(seconds) / total:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--functions", type=int, default=15)
    parser.add_argument("--slowest", type=int, default=15)
    args = parser.parse_args()
    times = timed_tests(args.junit)
    total = sum(t.seconds for t in times)
    print(f"{len(times)} tests, {total:.0f} s summed over the workers")
    by_folder: dict[str, list[float]] = defaultdict(list)
    by_work: dict[str, list[float]] = defaultdict(list)
    by_function: dict[str, list[float]] = defaultdict(list)
    for t in times:
        by_folder[folder_of(t.test_id)].append(t.seconds)
        by_work[t.work or "not recorded"].append(t.seconds)
        by_function[function_of(t.test_id)].append(t.seconds)
    table("Folder: the seconds of each folder's tests", by_folder, total)
    table("Work: the seconds of each kind of work (the costliest a test did, as tests/conftest.py saw it)", by_work,
          total)
    costs = lesson_costs(times, registry_lessons())
    print("\nLesson: what each lesson costs, the tests whose parameters name it (the registry's) and its own\n\n"
          "| lesson | registry's tests | seconds | its own tests | seconds |\n|---|---:|---:|---:|---:|")
    for stem, (registry, own) in sorted(costs.items(), key=lambda item: -sum(item[1][0]) - sum(item[1][1])):
        print(f"| {stem} | {len(registry)} | {sum(registry):.0f} | {len(own)} | {sum(own):.0f} |")
    registry_seconds = [sum(registry) for registry, _ in costs.values()]
    print(f"\nThe registry's tests of one lesson: median {statistics.median(registry_seconds):.0f} s summed "
          f"(from {min(registry_seconds):.0f} to {max(registry_seconds):.0f} s)")
    print(f"\nThe {args.functions} costliest test functions (their cases summed):\n")
    print("| function | cases | seconds |\n|---|---:|---:|")
    for function, seconds in sorted(by_function.items(), key=lambda item: -sum(item[1]))[:args.functions]:
        print(f"| {function} | {len(seconds)} | {sum(seconds):.0f} |")
    print(f"\nThe {args.slowest} slowest tests:\n")
    for t in sorted(times, key=lambda t: -t.seconds)[:args.slowest]:
        print(f"{t.seconds:7.1f} s  {t.test_id}")


if __name__ == "__main__":
    main()
