"""What the Distillation page costs, on the bundled model, in one run.

    python -m benchmarks.distillation [--quick]

1. scoring an answer (the teacher's and the student's forward passes, every position's KLs, JSD, top tokens and
   largest terms, the β sweep and three gradients with respect to the student's logits) against the two bare
   forward passes it needs;
2. hard against soft (the teacher's greedy answer, then both models on it);
3. the on-policy step (sampling, the teacher's scores, one SGD step on a private copy, the reverse KL before and
   after) against RL fine-tuning's step on the same number of answers, and the peak memory each adds.

Timings are medians of interleaved runs. --quick (for CI) uses one repetition and groups of two answers: it proves
the script works; its figures mean little.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lmviz.lessons import distillation as d
from lmviz.lessons.grpo import DEFAULT_PROMPT, default_advantages, grpo_step, sample_group
from lmviz.models.loading import load_causal_lm


def status_mb(field: str) -> float:
    """Linux: resident memory now (VmRSS) or its peak since the last reset (VmHWM), in MiB."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith(field)).split()[1]) / 1024


def reset_peak() -> None:
    """Linux: VmHWM back to the resident size now."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def peak_above(run) -> tuple[float, float]:
    """(seconds, the peak resident memory it reached above what was resident before, in MiB)."""
    reset_peak()
    before = status_mb("VmRSS")
    seconds = timed(run)
    return seconds, status_mb("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one repetition (for CI)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 5
    loaded = load_causal_lm()
    tokenizer = loaded.tokenizer
    teacher = d.chat_prompt(tokenizer, d.DEFAULT_QUESTION, d.DEFAULT_CONTEXT)
    student = d.chat_prompt(tokenizer, d.DEFAULT_QUESTION)
    answer = d.answer_ids(loaded, d.DEFAULT_ANSWER)

    def bare():
        with torch.inference_mode():
            for prompt in (teacher, student):
                loaded.model(input_ids=torch.tensor([prompt + answer]))

    runs = {"two bare forward passes": bare,
            "score_answer": lambda: d.score_answer(loaded, d.DEFAULT_QUESTION, d.DEFAULT_CONTEXT, d.DEFAULT_ANSWER),
            "hard_and_soft": lambda: d.hard_and_soft(loaded, d.DEFAULT_QUESTION, d.DEFAULT_CONTEXT)}
    seconds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            seconds[name].append(timed(run))
    print(f"model: {loaded.name} on {loaded.device}, {torch.get_num_threads()} threads, medians of {repeats}; "
          f"the default answer ({len(answer)} tokens)\n")
    base = statistics.median(seconds["two bare forward passes"])
    print(f"{'part':<26} {'ms':>7} {'÷ two forwards':>15}")
    for name, values in seconds.items():
        print(f"{name:<26} {statistics.median(values) * 1000:>7.0f} {statistics.median(values) / base:>15.2f}")

    size = 2 if args.quick else d.DEFAULT_GROUP
    group = sample_group(loaded, DEFAULT_PROMPT, size, 0)
    steps = {"on-policy step (all of it)": lambda: d.on_policy_step(loaded, d.DEFAULT_QUESTION, d.DEFAULT_CONTEXT,
                                                                    size),
             "GRPO step, one update": lambda: grpo_step(loaded, group, default_advantages(group))}
    print(f"\n{size} answers of at most {d.DEFAULT_NEW_TOKENS} tokens")
    print(f"{'step':<28} {'s':>6} {'peak above resident (MiB)':>26}")
    for name, run in steps.items():
        measured = [peak_above(run) for _ in range(1 if args.quick else 3)]
        print(f"{name:<28} {statistics.median(m[0] for m in measured):>6.1f} "
              f"{statistics.median(m[1] for m in measured):>26.0f}")


if __name__ == "__main__":
    main()
