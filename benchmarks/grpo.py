"""Time and memory of the GRPO lesson's two costly calls (lmviz.lessons.grpo), for groups of 2 to 16 answers.

    python -m benchmarks.grpo [--quick] [--groups G ...] [--limits N ...] [--threads N]

On the bundled SmolLM2-135M, in float32 on the CPU, with the lesson's prompt, seed, temperature and reward rule:
for each group size G (2, 4, 8, 16) and token limit (12, 32), the seconds of sample_group (G answers drawn
together, one forward pass of the group per new token) and of grpo_step (a private copy of the weights, the
group's forward and backward passes, one SGD step, the group scored again), and each call's peak resident
memory above the loaded model (benchmarks.gradient_step.peak_above). The answers' tokens are counted too:
answers that stop early make a step cheaper.

Each row is measured once, in a fresh process that loads the model, warms it with a 1-token group and a step on
it, and then makes the two calls; the load average is printed at the start and the end, so that a reader knows
how busy the cores were. --threads N runs each row's process with N torch threads (default: torch's own, one
per core): sampling is many small operations, and on busy cores a thread that waits for another to be scheduled
costs more than the second thread saves. --quick (for CI) measures G = 2 with 12 tokens: it proves the script
works; its figures mean little.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from benchmarks import in_fresh_process
from benchmarks.gradient_step import load_average, malloc_trim, peak_above, status_mib
from lmviz.core.trl import TRL
from lmviz.lessons.grpo import (
    DEFAULT_NUMBER,
    DEFAULT_PROMPT,
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    DEFAULT_UPDATES,
    SAMPLE_STD,
    advantages,
    contains_number,
    grpo_step,
    rewards,
    sample_group,
)
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm

PROMPT, SEED, TEMPERATURE = DEFAULT_PROMPT, DEFAULT_SEED, DEFAULT_TEMPERATURE  # the lesson's defaults
RIGHT_NUMBER = int(DEFAULT_NUMBER)
DTYPE = "float32"
GROUPS, LIMITS = (2, 4, 8, 16), (12, 32)


def measured(call) -> tuple:
    """(what ``call()`` returns, its seconds, its peak MiB above the resident memory before it: peak_above's)."""
    out = {}

    def timed():
        start = time.perf_counter()
        out["result"] = call()
        out["seconds"] = time.perf_counter() - start
    peak = peak_above(timed)
    return out["result"], out["seconds"], peak


def measure_row(size: int, limit: int, threads: int | None = None) -> dict:
    """One row of the table, in this process: the model loaded and warmed, then sample_group and grpo_step."""
    if threads:
        torch.set_num_threads(threads)
    loaded = load_causal_lm(DEFAULT_MODEL, device="cpu", dtype=DTYPE)
    warm = sample_group(loaded, PROMPT, 2, SEED, TEMPERATURE, 1)  # threads and first-call set-up, unmeasured
    grpo_step(loaded, warm, [1.0, -1.0])
    malloc_trim()
    row = dict(size=size, limit=limit, loaded_mib=status_mib("VmRSS"),
               weights_mib=sum(p.numel() * p.element_size() for p in loaded.model.parameters()) / 2**20)
    group, row["sample_s"], row["sample_mib"] = measured(
        lambda: sample_group(loaded, PROMPT, size, SEED, TEMPERATURE, limit))
    scores = rewards(group, contains_number(RIGHT_NUMBER))
    _, row["step_s"], row["step_mib"] = measured(
        lambda: grpo_step(loaded, group, advantages(scores, SAMPLE_STD).advantages, loss_type=TRL.loss_type,
                          updates=DEFAULT_UPDATES, kl_bias_correction=TRL.use_bias_correction_kl))
    row["answer_tokens"], row["right"] = sum(len(a.ids) for a in group.answers), int(sum(scores))
    return row


ROW_PROBE = """
import json
from benchmarks.grpo import measure_row
print(json.dumps(measure_row({size}, {limit}, {threads})))
"""


def print_table(rows: list[dict]) -> None:
    print(f"{'':>3} {'token':>5} {'answer':>7} {'':>6} | {'sample_group':^15} | {'grpo_step':^15} |")
    print(f"{'G':>3} {'limit':>5} {'tokens':>7} {'right':>6} | {'s':>7} {'MiB':>7} | {'s':>7} {'MiB':>7} |")
    for r in rows:
        print(f"{r['size']:>3} {r['limit']:>5} {r['answer_tokens']:>7} {r['right']:>6} | {r['sample_s']:>7.1f} "
              f"{r['sample_mib']:>7.0f} | {r['step_s']:>7.1f} {r['step_mib']:>7.0f} |")
    print(f"   answer tokens: all G answers' tokens, stopping tokens included (what the step's loss counts). right: "
          f"answers containing {RIGHT_NUMBER}.\n   s: wall time of the call, measured once. MiB: its peak resident "
          "memory (VmHWM) above the loaded model's, in a fresh process per row.\n   grpo_step: the lesson's "
          f"defaults ({DEFAULT_UPDATES} updates on the group, sample std advantages, {TRL.loss_type} loss, KL × ratio "
          f"{'on' if TRL.use_bias_correction_kl else 'off'}, lr 0.001, ε 0.2, β 0.04).")
    first = rows[0]
    print(f"   {DEFAULT_MODEL}: {first['loaded_mib']:.0f} MiB resident once loaded and warm, its weights "
          f"{first['weights_mib']:.0f} MiB.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="G = 2 with 12 tokens only (for CI)")
    parser.add_argument("--groups", type=int, nargs="+", default=list(GROUPS), metavar="G",
                        help=f"the group sizes (default: {' '.join(map(str, GROUPS))})")
    parser.add_argument("--limits", type=int, nargs="+", default=list(LIMITS), metavar="N",
                        help=f"the token limits (default: {' '.join(map(str, LIMITS))})")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch threads in each row's process (default: torch's own)")
    args = parser.parse_args()
    groups, limits = ([GROUPS[0]], [LIMITS[0]]) if args.quick else (args.groups, args.limits)
    start, started = time.perf_counter(), load_average()
    threads = args.threads or torch.get_num_threads()
    print(f"GRPO's group and step, CPU ({os.cpu_count()} cores, torch {torch.__version__}, {threads} "
          f"thread{'s' * (threads != 1)}, {DTYPE}; load average {started} at the start)")
    print(f"prompt {PROMPT!r}, seed {SEED}, temperature {TEMPERATURE:g}, reward contains_number({RIGHT_NUMBER})",
          flush=True)
    cases = [(size, limit) for size in groups for limit in limits]
    rows = []
    for number, (size, limit) in enumerate(cases, start=1):
        rows.append(in_fresh_process(ROW_PROBE.format(size=size, limit=limit, threads=args.threads)))
        print(f"[{number}/{len(cases)}] G = {size}, {limit} tokens measured; "
              f"{time.perf_counter() - start:.0f} s so far", file=sys.stderr, flush=True)
    print_table(rows)
    print(f"\nLoad average {started} at the start, {load_average()} at the end; {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
