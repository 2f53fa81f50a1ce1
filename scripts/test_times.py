"""Where a test run's time goes, from the JUnit XML that pytest writes (`--junitxml`, as .ci/run asks for):
the seconds of the tests of each folder, summed, their share; the test functions that cost most, each with all of
its parametrized cases; and the slowest single tests.

    python -m scripts.test_times artifacts/pytest-junit.xml [--functions 15] [--slowest 15]

With `-n 2` (pytest.ini) two workers run at once: the summed seconds are about twice the run's wall time.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def seconds_per_test(junit: Path) -> list[tuple[str, float]]:
    """(the test's id, its seconds) for every test case of the file: setup, call and teardown."""
    cases = ET.parse(junit).getroot().iter("testcase")
    return [(f"{case.get('classname', '')}::{case.get('name', '')}", float(case.get("time", 0))) for case in cases]


def folder_of(test_id: str) -> str:
    """tests/e2e for tests.e2e.test_x.Class::name; the top-level test files are tests/."""
    parts = test_id.split("::")[0].split(".")
    modules = [p for p in parts if not p[:1].isupper()]  # a class name is not a folder
    return "/".join(modules[:-1]) or "tests"


def function_of(test_id: str) -> str:
    """The test function, its parametrized cases together: tests.docs::test_c for tests.docs::test_c[x]."""
    return test_id.split("[")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--functions", type=int, default=15)
    parser.add_argument("--slowest", type=int, default=15)
    args = parser.parse_args()
    times = seconds_per_test(args.junit)
    total = sum(seconds for _, seconds in times)
    by_folder: dict[str, list[float]] = defaultdict(list)
    for test_id, seconds in times:
        by_folder[folder_of(test_id)].append(seconds)
    print(f"{len(times)} tests, {total:.0f} s summed over the workers\n")
    print("| folder | tests | seconds | share |\n|---|---:|---:|---:|")
    for folder, seconds in sorted(by_folder.items(), key=lambda item: -sum(item[1])):
        print(f"| {folder} | {len(seconds)} | {sum(seconds):.0f} | {sum(seconds) / total:.1%} |")
    by_function: dict[str, list[float]] = defaultdict(list)
    for test_id, seconds in times:
        by_function[function_of(test_id)].append(seconds)
    print(f"\nThe {args.functions} costliest test functions (their cases summed):\n")
    print("| function | cases | seconds |\n|---|---:|---:|")
    for function, seconds in sorted(by_function.items(), key=lambda item: -sum(item[1]))[:args.functions]:
        print(f"| {function} | {len(seconds)} | {sum(seconds):.0f} |")
    print(f"\nThe {args.slowest} slowest tests:\n")
    for test_id, seconds in sorted(times, key=lambda item: -item[1])[:args.slowest]:
        print(f"{seconds:7.1f} s  {test_id}")


if __name__ == "__main__":
    main()
