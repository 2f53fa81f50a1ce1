"""A class taking steps at once: One step of learning's SGD step for 1, 10 and 30 students, through the server's
StepGate (lmviz.serving.steps), each student with a text of their own, and 30 students on the teacher's text.

    python -m benchmarks.class_steps [--quick] [--students N ...] [--at-once K ...]

On the bundled SmolLM2-135M, in float32 on the CPU, in one process as a Streamlit server runs its sessions: each
student is a thread that asks for one SGD step (sgd_steps, steps=1, lr 0.001) on a 16-token text of their own
(benchmarks.gradient_step.text_of_length's paragraph, with the student's number in front), all at the same moment.
The gate admits at most K steps at once (--at-once; the server's default is MOST_AT_ONCE) and as many as memory
allows. Per row: the students' time from asking to their result (p50, p95), the machine's busy cores over the run
÷ the cores it has (from psutil.cpu_times: 1 − idle time ÷ all time), and the process's peak resident memory
(VmHWM) above the loaded model's; after each step the freed memory is handed back (return_freed_memory, as the
page does: glibc otherwise keeps each thread's freed memory, one arena per thread). "shared": 30 students asking
for the teacher's text at once, through a function cached with st.cache_data as the page's get_steps is:
Streamlit computes one key once while the others wait, so the row also counts the steps taken.

Then RL fine-tuning for 1, 10 and 30 students at once, each with a seed of their own: the lesson's group sampled
(sampling is not gated: it holds no copy of the weights) and its step through a gate of the server's default size.

--quick (for CI) runs 2 students at K = 1 and 2 sharing, and no RL rows: it proves the script works; its figures
mean little.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import streamlit as st
import torch

from benchmarks.gradient_step import LR, load_average, malloc_trim, reset_peak, status_mib, text_of_length, warm
from benchmarks.grpo import PROMPT, TEMPERATURE
from lmviz.lessons.gradient_step import return_freed_memory, sgd_steps
from lmviz.lessons.grpo import DEFAULT_UPDATES, default_advantages, grpo_step, sample_group
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm
from lmviz.serving.steps import MOST_AT_ONCE, StepGate, step_memory

STUDENTS = (1, 10, 30)
AT_ONCE = (1, 2, MOST_AT_ONCE)
TOKENS = 16
taken = []  # one entry per step the shared function really took


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def busy_share(before, after) -> float:
    """Busy cores ÷ cores between two psutil.cpu_times() readings: 1 − idle (and I/O wait) ÷ all."""
    total = sum(after) - sum(before)
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0) - getattr(before, "iowait", 0))
    return 1 - idle / total if total > 0 else 0.0


def run_class(students: int, ask) -> dict:
    """``students`` threads calling ``ask(student)`` at the same moment: their times, the busy share, the peak."""
    malloc_trim()
    base, start_gate = status_mib("VmRSS"), threading.Barrier(students)
    reset_peak()

    def student(number: int) -> float:
        start_gate.wait()
        started = time.perf_counter()
        ask(number)
        return time.perf_counter() - started

    cpu = psutil.cpu_times()
    with ThreadPoolExecutor(students) as pool:
        seconds = list(pool.map(student, range(students)))
    return {"p50": statistics.median(seconds), "p95": percentile(seconds, 0.95),
            "busy": busy_share(cpu, psutil.cpu_times()), "peak": status_mib("VmHWM") - base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 students at K = 1, and 2 sharing (for CI)")
    parser.add_argument("--students", type=int, nargs="+", default=list(STUDENTS))
    parser.add_argument("--at-once", type=int, nargs="+", default=list(AT_ONCE))
    args = parser.parse_args()
    sizes, limits, shared = ([2], [1], 2) if args.quick else (args.students, args.at_once, max(args.students))
    loaded = load_causal_lm(DEFAULT_MODEL, device="cpu", dtype="float32")
    warm(loaded)
    teachers = text_of_length(loaded, TOKENS)
    sgd_steps(loaded, teachers, LR, steps=1)  # the first step's one-time costs
    needs = step_memory(loaded.model)
    print(f"One SGD step on a {TOKENS}-token text per student, {loaded.name}, CPU, {psutil.cpu_count()} cores, "
          f"{torch.get_num_threads()} torch threads; load average {load_average()}.")
    print("| students | at once (K) | p50 (s) | p95 (s) | busy ÷ cores | peak above the model (MiB) | steps taken |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for limit in limits:
        for size in sizes:
            gate = StepGate(most_at_once=limit)

            def ask(number: int, gate=gate):
                text = f"Student {number}: {teachers}"  # a text of their own
                with gate.step("sgd", needs):
                    sgd_steps(loaded, text, LR, steps=1)
                return_freed_memory()  # as the page's get_steps does after each step
            row = run_class(size, ask)
            print(f"| {size} | {limit} | {row['p50']:.2f} | {row['p95']:.2f} | {row['busy']:.2f} | "
                  f"{row['peak']:.0f} | {size} |")

    gate = StepGate()

    @st.cache_data(show_spinner=False)
    def teachers_step(text: str):  # as the page's get_steps: one key, computed once
        taken.append(1)
        try:
            with gate.step("sgd", needs):
                return sgd_steps(loaded, text, LR, steps=1)
        finally:
            return_freed_memory()
    row = run_class(shared, lambda number: teachers_step(teachers))
    print(f"| {shared}, shared | {gate.most_at_once} | {row['p50']:.2f} | {row['p95']:.2f} | {row['busy']:.2f} | "
          f"{row['peak']:.0f} | {len(taken)} |")
    if not args.quick:
        grpo_class(loaded, needs, args.students)
    print(f"load average at the end: {load_average()}")


def grpo_class(loaded, needs: int, sizes: list[int]) -> None:
    """RL fine-tuning: each student a seed of their own, so a group of their own (sampling is not gated), then the
    page's step on it (DEFAULT_UPDATES updates) through a gate of the server's default size."""
    print(f"\nRL fine-tuning: the lesson's group (G = 8, 12 tokens, benchmarks.grpo's prompt) with the student's own "
          f"seed, then its {DEFAULT_UPDATES} updates; at most {MOST_AT_ONCE} steps at once.")
    print("| students | p50 (s) | p95 (s) | busy ÷ cores | peak above the model (MiB) |")
    print("|---:|---:|---:|---:|---:|")
    for size in sizes:
        gate = StepGate()

        def ask(number: int, gate=gate):
            group = sample_group(loaded, PROMPT, 8, 100 + number, TEMPERATURE, 12)
            with gate.step("grpo", needs):
                grpo_step(loaded, group, default_advantages(group), LR, updates=DEFAULT_UPDATES)
            return_freed_memory()
        row = run_class(size, ask)
        print(f"| {size} | {row['p50']:.2f} | {row['p95']:.2f} | {row['busy']:.2f} | {row['peak']:.0f} |")


if __name__ == "__main__":
    main()
