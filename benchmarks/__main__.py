"""Every benchmark's quick mode, one after another in this one process: the check CI makes that each still runs and
prints its table (its figures are not checked there).

    python -m benchmarks --quick            # all of QUICK
    python -m benchmarks --quick perf clicks

One process imports torch and loads the model once for all of them, where a process per benchmark did it once each.
A benchmark's figures are its own only when it runs alone (`python -m benchmarks.NAME`): here the memory each one
reports includes what the ones before it left loaded. The run ends with a table of each benchmark's seconds, and
fails as soon as one fails.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

# The benchmarks whose quick mode runs elsewhere: inside the test suite, by the file named, or (page_heights, which
# measures a server someone has started) by a person
ELSEWHERE = {"grpo": "tests/test_grpo_benchmark.py", "live": "tests/test_live_benchmark.py",
             "live_phones": "tests/e2e/test_live_phones_benchmark.py", "memory": "tests/test_memory_benchmark.py",
             "page_heights": "docs/development/measurements.md"}
QUICK = ("perf", "reliability", "first_visit", "noisy_neighbour", "clicks", "nsp_accuracy", "gradient_step",
         "replicas", "class_steps", "step_parts", "bits_per_byte", "distillation")


def run_quick(name: str) -> float:
    """``benchmarks.NAME --quick``, as its own command line would run it; its seconds."""
    module = importlib.import_module(f"benchmarks.{name}")
    started = time.perf_counter()
    saved, sys.argv = sys.argv, [f"benchmarks.{name}", "--quick"]
    try:
        module.main()
    finally:
        sys.argv = saved
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", required=True,
                        help="each benchmark's quick mode (the only mode this runner has)")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"which benchmarks (default: all of {', '.join(QUICK)})")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in QUICK]
    if unknown:
        parser.error(f"no quick benchmark named {', '.join(unknown)}; choose from {', '.join(QUICK)}")
    seconds: list[tuple[str, float]] = []
    try:
        for name in args.names or QUICK:
            print(f"\n=== benchmarks.{name} --quick", flush=True)
            seconds.append((name, run_quick(name)))
    finally:
        print("\nbenchmark        seconds")
        for name, took in seconds:
            print(f"{name:<16} {took:7.1f}")
        print(f"{'all':<16} {sum(took for _, took in seconds):7.1f}", flush=True)


if __name__ == "__main__":
    main()
