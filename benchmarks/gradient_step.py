"""Time and memory of one step of learning (lmviz.lessons.gradient_step), against one forward pass, in one run.

    python -m benchmarks.gradient_step [--quick]

1. For texts of 16, 64 and 256 tokens (PARAGRAPH, repeated and cut, counted with each model's own tokenizer),
   on the bundled SmolLM2-135M and lmviz's tiny GPT, in float32 on the CPU: the time of analyse_clm (one
   forward pass and the scores a page shows), logit_gradient, one SGD step (sgd_steps, steps=1) and
   adamw_first_step, each also as a ratio to analyse_clm's time on the same text; and each call's peak
   resident memory above the loaded model. A model that takes fewer positions (the tiny GPT: 128) is
   measured at its limit instead.
2. The same rows on a CUDA device when there is one, its peaks from torch.cuda.max_memory_allocated.
3. glibc keeps memory that was freed, so a process's resident size stays high after a step even though
   every tensor is gone: the resident memory after the longest step with glibc's defaults, after
   malloc_trim(0), and with MALLOC_MMAP_THRESHOLD_=65536 (each in a fresh process).

Timings are medians of interleaved runs (forward, gradient, SGD, AdamW, forward, ...), so that all see the
same machine; the load average is printed at the start and the end. The CPU peaks are read in a fresh
process per text and model (Linux: VmHWM in /proc/self/status): before each call, malloc_trim(0) hands back
what glibc kept from the one before and writing 5 to /proc/self/clear_refs resets VmHWM to the resident
size, so each peak is that call's alone. --quick (for CI) measures 16 tokens once: it proves the script
works; its figures mean little.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import time

import torch

from benchmarks import in_fresh_process
from lmviz.lessons.causal_lm import analyse_clm, length_limit, make_request
from lmviz.lessons.gradient_step import adamw_first_step, logit_gradient, sgd_steps
from lmviz.models.loading import DEFAULT_MODEL, TINY_GPT, load_causal_lm

PARAGRAPH = ("The teacher opens the app in class and projects it on the wall. Students type their own sentences "
             "and watch the loss of each token appear, one number at a time, from a real language model. ")
MODELS = (DEFAULT_MODEL, TINY_GPT)
DTYPE = "float32"
LR = 1e-3
CALLS = {  # what the table times, in its order; each takes the loaded model and one text
    "forward": lambda loaded, text: analyse_clm(loaded, text),
    "gradient": lambda loaded, text: logit_gradient(loaded, text),
    "sgd": lambda loaded, text: sgd_steps(loaded, text, LR, steps=1),
    "adamw": lambda loaded, text: adamw_first_step(loaded, text, LR),
}
HEADINGS = {"forward": "forward pass", "gradient": "logit_gradient", "sgd": "one SGD step",
            "adamw": "AdamW's first step"}


def text_of_length(loaded, length: int) -> str:
    """PARAGRAPH, repeated and cut to ``length`` of the model's tokens, or to as many as the model takes when
    that is fewer (length_limit): a text that make_request turns into exactly that many tokens."""
    ids = loaded.tokenizer(PARAGRAPH * (length // 10 + 2), add_special_tokens=False, verbose=False)["input_ids"]
    count = min(length, length_limit(loaded.model)[0])
    text = loaded.tokenizer.decode(ids[:count])
    if len(make_request(loaded, text).ids) != count:  # a cut inside a word can read back as other tokens
        raise RuntimeError(f"{loaded.name}: the paragraph cut to {count} tokens does not read back as {count}")
    return text


# --- memory -------------------------------------------------------------------------------------------------

def status_mib(field: str) -> float:
    """VmRSS (resident memory now) or VmHWM (its peak since the last reset) of this process, in MiB."""
    line = next(line for line in open("/proc/self/status") if line.startswith(field))
    return int(line.split()[1]) / 1024


def malloc_trim() -> None:
    """glibc's malloc_trim(0): give the operating system back the free memory glibc keeps for later."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:  # Linux: 5 resets VmHWM to the resident size now
        clear.write("5")


def peak_above(call) -> float:
    """MiB: the peak resident memory while ``call()`` runs, above the resident memory just before it, with
    what earlier calls left freed but kept by glibc handed back first (so that none of it is reused unseen)."""
    gc.collect()
    malloc_trim()
    base = status_mib("VmRSS")
    reset_peak()
    call()
    return status_mib("VmHWM") - base


def warm(loaded) -> None:
    """Warm the runtime (threads, first-call set-up) on a tiny text before anything is measured."""
    analyse_clm(loaded, "A warm-up.")


ROW_PROBE = """
import json
from benchmarks.gradient_step import CALLS, DTYPE, malloc_trim, peak_above, status_mib, text_of_length, warm
from lmviz.models.loading import load_causal_lm

loaded = load_causal_lm({name!r}, device="cpu", dtype=DTYPE)
warm(loaded)
text = text_of_length(loaded, {length})
malloc_trim()
row = dict(loaded_mib=status_mib("VmRSS"),
           weights_mib=sum(p.numel() * p.element_size() for p in loaded.model.parameters()) / 2**20)
row.update({{name: peak_above(lambda: call(loaded, text)) for name, call in CALLS.items()}})
print(json.dumps(row))
"""

TRIM_PROBE = """
import gc, json, time
from benchmarks.gradient_step import CALLS, DTYPE, malloc_trim, reset_peak, status_mib, text_of_length, warm
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm

loaded = load_causal_lm(DEFAULT_MODEL, device="cpu", dtype=DTYPE)
warm(loaded)
text = text_of_length(loaded, {length})
gc.collect()
loaded_mib, start = status_mib("VmRSS"), time.perf_counter()
reset_peak()
CALLS["sgd"](loaded, text)
seconds = time.perf_counter() - start
gc.collect()
after = status_mib("VmRSS")
malloc_trim()
print(json.dumps(dict(loaded_mib=loaded_mib, peak_mib=status_mib("VmHWM"), after_mib=after,
                      trimmed_mib=status_mib("VmRSS"), step_ms=seconds * 1000)))
"""


def cuda_peaks(loaded, text: str) -> dict:
    """MiB: each call's peak GPU memory (torch's allocations) above what was allocated before it."""
    peaks = {}
    for name, call in CALLS.items():
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        call(loaded, text)
        torch.cuda.synchronize()
        peaks[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
    return peaks


# --- time -----------------------------------------------------------------------------------------------------

def times_ms(loaded, text: str, repeats: int) -> dict:
    """Median milliseconds of each call on ``text``, after one warm-up of each, the calls run in turn."""
    times = {name: [] for name in CALLS}
    for run in range(repeats + 1):
        for name, call in CALLS.items():
            start = time.perf_counter()
            call(loaded, text)
            if loaded.device.startswith("cuda"):
                torch.cuda.synchronize()  # a GPU runs its kernels after the call returns
            if run:  # the first round is the warm-up
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def table_rows(device: str, lengths: list[int], repeats: int) -> list[dict]:
    rows = []
    for model in MODELS:
        loaded = load_causal_lm(model, device=device, dtype=DTYPE)
        warm(loaded)
        texts = {}  # token count -> text: a model with a lower limit than a length measures its limit once
        for length in lengths:
            text = text_of_length(loaded, length)
            texts.setdefault(len(make_request(loaded, text).ids), text)
        for tokens, text in texts.items():
            row = {"model": loaded.name, "tokens": tokens, "ms": times_ms(loaded, text, repeats)}
            if device == "cpu":
                row["memory"] = in_fresh_process(ROW_PROBE.format(name=model, length=tokens))
                row["loaded_mib"] = row["memory"].pop("loaded_mib")
                row["weights_mib"] = row["memory"].pop("weights_mib")
            else:
                row["memory"] = cuda_peaks(loaded, text)
            rows.append(row)
        del loaded
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


# --- the report ---------------------------------------------------------------------------------------------

def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def print_table(rows: list[dict], memory: str) -> None:
    print(f"{'':>22} {'':>7} | {HEADINGS['forward']:^14} |"
          + "".join(f" {HEADINGS[name]:^22} |" for name in list(CALLS)[1:]))
    print(f"{'model':>22} {'tokens':>7} | {'ms':>7} {'MiB':>6} |" + f" {'ms':>7} {'ratio':>6} {'MiB':>7} |" * 3)
    for row in rows:
        ms, peaks = row["ms"], row["memory"]
        cells = "".join(f" {ms[name]:>7.0f} {ms[name] / ms['forward']:>6.1f} {peaks[name]:>7.0f} |"
                        for name in list(CALLS)[1:])
        print(f"{row['model']:>22} {row['tokens']:>7} | {ms['forward']:>7.1f} {peaks['forward']:>6.0f} |{cells}")
    print(f"   ms: median wall time of the call. ratio: its time ÷ the forward pass's (analyse_clm) on the same "
          f"text, in this run.\n   MiB: {memory}\n   SGD: sgd_steps(steps=1) on every weight, lr {LR:g}; AdamW: "
          f"adamw_first_step on the output matrix alone, lr {LR:g}.")


def print_trim(length: int, rows: dict) -> None:
    print(f"\n3. Resident memory around one {length}-token SGD step on {DEFAULT_MODEL} (MiB; a fresh process each)")
    print(f"{'glibc setting':>30} {'loaded':>7} {'peak':>7} {'after the step':>15} {'after malloc_trim(0)':>21} "
          f"{'step ms':>8}")
    for setting, r in rows.items():
        print(f"{setting:>30} {r['loaded_mib']:>7.0f} {r['peak_mib']:>7.0f} {r['after_mib']:>15.0f} "
              f"{r['trimmed_mib']:>21.0f} {r['step_ms']:>8.0f}")
    print("   loaded: resident once the model is loaded and warm; after the step: every tensor of the step freed "
          "(gc.collect()).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 tokens, one repetition (for CI)")
    args = parser.parse_args()
    lengths, repeats = ([16], 1) if args.quick else ([16, 64, 256], 3)
    start, started = time.perf_counter(), load_average()
    print(f"1. One step of learning, CPU ({os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {DTYPE}; load average {started} at the start)")
    cpu = table_rows("cpu", lengths, repeats)
    print_table(cpu, "the call's peak resident memory (VmHWM) above the loaded model's, read in a fresh process "
                "per row.")
    for model in dict.fromkeys(row["model"] for row in cpu):
        rows = [row for row in cpu if row["model"] == model]
        cut = f"; it takes {rows[-1]['tokens']} tokens at most" if rows[-1]["tokens"] < lengths[-1] else ""
        print(f"   {model}: {rows[0]['loaded_mib']:.0f} MiB resident once loaded and warm, its weights "
              f"{rows[0]['weights_mib']:.0f} MiB{cut}.")
    if torch.cuda.is_available():
        print(f"\n2. The same on the GPU ({torch.cuda.get_device_name()})")
        print_table(table_rows("cuda", lengths, repeats), "the call's peak GPU memory above what was allocated "
                    "before it (torch.cuda.max_memory_allocated).")
    else:
        print("\n2. GPU: no CUDA device on this machine; not measured.")
    length = lengths[-1]
    probe = TRIM_PROBE.format(length=length)
    print_trim(length, {"defaults": in_fresh_process(probe), "MALLOC_MMAP_THRESHOLD_=65536": in_fresh_process(
        probe, env={"MALLOC_MMAP_THRESHOLD_": "65536"})})
    print(f"\nLoad average {started} at the start, {load_average()} at the end; {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
