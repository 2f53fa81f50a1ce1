"""lmviz's performance figures, on the bundled model, measured in one run.

    python -m benchmarks.perf [--quick] [--threads N] [--json benchmarks/results/perf.json]

1. analysis overhead: the full per-token analysis against a bare forward pass of the same tokens
   (issue 15's target: a ratio of at most 1.10 at 256 and 1024 tokens), and its two parts beyond
   the forward pass: score_positions (-log p, rank, top-k) and loss_three_ways (the article's check).
   On PARAGRAPH, repeated, and on varied text, where more labels fall outside the model's top 5.
2. memory: peak resident memory of a long analysis, in logits-tensor units above the loaded model
3. start: process start to the first analysis, with lmviz's weights cache warm and cold
4. a class at once: 30 different sentences arriving together, served one by one vs by the Batcher
5. GPU (when CUDA is present): the same analysis on the GPU, float32 and bfloat16, against the CPU
6. a page run's garbage collection: the full collection app.py makes after every lesson's run, in a server's
   process (the app's modules and the lessons' libraries imported, the model loaded), before and after
   lmviz.app.garbage freezes what lives as long as the process

Timings are medians of interleaved runs (bare, analysis, its parts, bare, ...), so that
all see the same machine. --quick (for CI) uses short inputs and one repetition: it proves
the script works; its figures mean little.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from benchmarks import in_fresh_process
from lmviz.core.corpus import generate_story
from lmviz.lessons.causal_lm import Request, analyse_clm, loss_three_ways, score_positions
from lmviz.models.loading import load_causal_lm
from lmviz.serving.batcher import Batcher
from lmviz.serving.scoring import analyse_batch

PARAGRAPH = ("The teacher opens the app in class and projects it on the wall. Students type their own sentences "
             "and watch each token's loss appear, one number at a time, from a real language model. ")
CLASS_SENTENCES = [f"Student {i} thinks that the {w} is the most interesting part of training a model."
                   for i, w in enumerate(("loss", "label shift", "softmax", "logarithm", "mean", "perplexity",
                                          "tokenizer", "vocabulary", "gradient", "batch") * 3)]


def ids_of_length(loaded, length: int) -> list[int]:
    ids = loaded.tokenizer(PARAGRAPH * (length // 20 + 2), add_special_tokens=False)["input_ids"]
    return ids[:length]


def varied_ids(loaded, length: int) -> list[int]:
    """Stories from lmviz.core.corpus, never repeated: the model cannot copy the labels from earlier
    in the text, as it does from the second PARAGRAPH on, so more of them fall outside its top 5
    (and score_positions counts their rank over the whole vocabulary)."""
    rng, text = random.Random(0), ""
    while len(text) < length * 8:  # a token is 4 to 5 characters of this text
        text += " ".join(sentence.capitalize() for sentence in generate_story(rng).sentences) + " "
    return loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:length]


TEXTS = {"paragraph": ids_of_length, "varied": varied_ids}
TARGET_RATIO = 1.10  # issue 15: the analysis may add at most a tenth to the forward pass


def overhead(loaded, lengths: list[int], repeats: int, texts: list[str]) -> list[dict]:
    """Bare forward pass, full analysis, and the analysis's two parts on that forward pass's logits,
    run in turn ``repeats`` times (so that all see the same machine); medians."""
    rows = []
    for text in texts:
        for length in lengths:
            ids = TEXTS[text](loaded, length)
            request = Request(text="", ids=ids, truncated_from=None, add_bos=False)
            input_ids = torch.tensor([ids], device=loaded.device)
            labels = input_ids[0, 1:]  # (T-1,)
            with torch.inference_mode():
                shifted = loaded.model(input_ids=input_ids).logits[0, :-1]  # (T-1, V)
                nll = score_positions(shifted, labels, request.top_k)["nll"]  # (T-1,)

            def bare():
                with torch.inference_mode():
                    loaded.model(input_ids=input_ids)

            def full():
                inner_forwards.append(analyse_batch(loaded, [request])[0].forward_seconds)

            def scores():
                with torch.inference_mode():
                    score_positions(shifted, labels, request.top_k)

            def check():
                with torch.inference_mode():
                    loss_three_ways(loaded.model, shifted, labels, nll)

            steps, inner_forwards = {"bare": bare, "full": full, "scores": scores, "check": check}, []
            result = analyse_batch(loaded, [request])[0]  # a warm-up, and the labels' ranks
            times = {name: [] for name in steps}
            for _ in range(repeats):
                for name, run in steps.items():
                    start = time.perf_counter()
                    run()
                    if loaded.device.startswith("cuda"):
                        torch.cuda.synchronize()  # a GPU runs its kernels after the call returns
                    times[name].append(time.perf_counter() - start)
            # Each analysis's time beyond its own forward pass: free of the few percent by which one
            # forward pass differs from the next, which the plain ratio compares.
            times["beyond"] = [total - forward for total, forward in zip(times["full"], inner_forwards)]
            ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
            rows.append({"text": text, "tokens": length, "forward_ms": ms["bare"], "analysis_ms": ms["full"],
                         "ratio": ms["full"] / ms["bare"], "beyond_forward_ms": ms["beyond"],
                         "steady_ratio": 1 + ms["beyond"] / ms["bare"], "scores_ms": ms["scores"],
                         "check_ms": ms["check"],
                         "outside_top_5": sum(row.rank > 5 for row in result.rows) / len(result.rows)})
    return rows


MEMORY_PROBE = """
import gc, json, torch
from benchmarks.perf import ids_of_length
from lmviz.lessons.causal_lm import Request
from lmviz.serving.scoring import analyse_batch
from lmviz.models.loading import load_causal_lm

def status_mb(field):  # resident memory now (VmRSS) or its peak since the last reset (VmHWM)
    line = next(l for l in open("/proc/self/status") if l.startswith(field))
    return int(line.split()[1]) / 1024

def reset_peak():  # Linux: writing 5 to clear_refs resets VmHWM to the current resident size
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

loaded = load_causal_lm()
analyse_batch(loaded, [Request("", ids_of_length(loaded, 8), None, False)])  # warm the runtime on a tiny input
ids = ids_of_length(loaded, {length})
gc.collect()
base = status_mb("VmRSS")
reset_peak()
with torch.inference_mode():
    loaded.model(input_ids=torch.tensor([ids]))
forward_peak = status_mb("VmHWM")
gc.collect()
reset_peak()
analyse_batch(loaded, [Request("", ids, None, False)])
analysis_peak = status_mb("VmHWM")
weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters()) / 2**20
logits = {length} * loaded.model.config.vocab_size * 4 / 2**20
print(json.dumps(dict(tokens={length}, base_mb=base, forward_peak_mb=forward_peak, analysis_peak_mb=analysis_peak,
                      weights_mb=weights, logits_mb=logits)))
"""

START_PROBE = """
import json, time
t0 = {t0}
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.loading import load_causal_lm
analyse_clm(load_causal_lm(), "The capital of France is Paris.")
print(json.dumps(dict(seconds=time.time() - t0)))
"""

GC_PROBE = """
import gc, json, statistics, time
import lmviz.app.caches, lmviz.app.choosers, lmviz.app.chrome, lmviz.app.widgets, lmviz.figures.plots
import lmviz.lessons.causal_lm, lmviz.lessons.grpo, lmviz.lessons.gradient_step, lmviz.lessons.next_token
from lmviz.app.garbage import collect_after_run
from lmviz.models.loading import load_causal_lm

loaded = load_causal_lm()

def collection_ms():
    times = []
    for _ in range({repeats}):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)

tracked_before, before = len(gc.get_objects()), collection_ms()
collect_after_run()
print(json.dumps(dict(tracked_before=tracked_before, before_ms=before, tracked_after=len(gc.get_objects()),
                      after_ms=collection_ms(), frozen=gc.get_freeze_count())))
"""


def garbage_collection(repeats: int) -> dict:
    return in_fresh_process(GC_PROBE.format(repeats=repeats))


def memory(length: int) -> dict:
    row = in_fresh_process(MEMORY_PROBE.format(length=length))
    row["analysis_extra_in_logits"] = (row["analysis_peak_mb"] - row["base_mb"]) / row["logits_mb"]
    row["forward_extra_in_logits"] = (row["forward_peak_mb"] - row["base_mb"]) / row["logits_mb"]
    return row


def start_times() -> dict:
    # the first run fills the cache
    warm = [in_fresh_process(START_PROBE.format(t0=time.time()))["seconds"] for _ in range(2)]
    with tempfile.TemporaryDirectory() as empty:
        cold = in_fresh_process(START_PROBE.format(t0=time.time()), env={"LMVIZ_CACHE": empty})["seconds"]
    return {"warm_s": min(warm), "cold_s": cold}


def serve_class(loaded, sentences: list[str]) -> dict:
    """30 sentences arriving together: one after another, then through the Batcher from 30 threads."""
    analyse_clm(loaded, sentences[0])  # warm-up
    serial, start = [], time.perf_counter()
    for text in sentences:
        analyse_clm(loaded, text)
        serial.append(time.perf_counter() - start)  # a request waits for all those before it
    serial_total = time.perf_counter() - start

    batcher = Batcher(loaded)
    latencies, results = [0.0] * len(sentences), [None] * len(sentences)
    gate = threading.Barrier(len(sentences))

    def student(i):
        gate.wait()
        t = time.perf_counter()
        results[i] = batcher.analyse(sentences[i])
        latencies[i] = time.perf_counter() - t

    threads = [threading.Thread(target=student, args=(i,)) for i in range(len(sentences))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batched_total = time.perf_counter() - start
    worst = max(max(abs(a.nll - b.nll) for a, b in zip(r.rows, analyse_clm(loaded, s).rows))
                for r, s in zip(results, sentences))

    def pct(values, q):
        return statistics.quantiles(values, n=100)[q - 1] * 1000

    return {"requests": len(sentences), "serial_p50_ms": pct(serial, 50), "serial_p95_ms": pct(serial, 95),
            "serial_per_s": len(sentences) / serial_total, "batched_p50_ms": pct(latencies, 50),
            "batched_p95_ms": pct(latencies, 95), "batched_per_s": len(sentences) / batched_total,
            "speedup": serial_total / batched_total, "batch_sizes": list(batcher.batch_sizes),
            "max_nll_difference": worst}


def gpu_table(lengths: list[int], repeats: int) -> list[dict]:
    cpu = load_causal_lm(device="cpu")
    rows = []
    for dtype in ("float32", "bfloat16"):
        gpu = load_causal_lm(device="cuda", dtype=dtype)
        for row in overhead(gpu, lengths, repeats, ["paragraph"]):
            ids = ids_of_length(gpu, row["tokens"])
            on_gpu = analyse_batch(gpu, [Request("", ids, None, False)])[0]
            on_cpu = analyse_batch(cpu, [Request("", ids, None, False)])[0]
            row.update(dtype=dtype, max_nll_difference_vs_cpu=max(abs(a.nll - b.nll)
                                                                   for a, b in zip(on_gpu.rows, on_cpu.rows)))
            rows.append(row)
        del gpu
        torch.cuda.empty_cache()
    return rows


def print_report(report: dict) -> None:
    print(f"1. Analysis overhead (bundled model, CPU; {report['machine']}): full analysis ÷ bare forward pass, "
          f"target ≤ {TARGET_RATIO:.2f}")
    print(f"{'text':>10} {'tokens':>7} {'forward ms':>11} {'analysis ms':>12} {'ratio':>7} {'beyond ms':>10} "
          f"{'steady':>7} {'scores ms':>10} {'check ms':>9} {'outside top 5':>14}")
    for r in report["overhead"]:
        print(f"{r['text']:>10} {r['tokens']:>7} {r['forward_ms']:>11.1f} {r['analysis_ms']:>12.1f} {r['ratio']:>7.3f} "
              f"{r['beyond_forward_ms']:>10.1f} {r['steady_ratio']:>7.3f} {r['scores_ms']:>10.1f} "
              f"{r['check_ms']:>9.1f} {r['outside_top_5']:>14.0%}")
    print("   ratio: analysis ms ÷ forward ms. beyond: what an analysis takes beyond its own forward pass; steady: "
          "1 + beyond ÷ forward ms,\n   the same ratio without the few percent by which one forward pass differs "
          "from the next. scores: score_positions (-log p,\n   rank, top 5); check: loss_three_ways (the model's "
          "loss function and nn.CrossEntropyLoss); outside top 5: the labels whose rank\n   takes a pass over the "
          "whole vocabulary.")
    m = report["memory"]
    print(f"\n2. Peak memory, {m['tokens']}-token analysis")
    print(f"   model loaded and warm: {m['base_mb']:.0f} MB (fp32 weights {m['weights_mb']:.0f} MB); "
          f"one logits tensor: {m['logits_mb']:.0f} MB")
    print(f"   bare forward peak: {m['forward_peak_mb']:.0f} MB (+{m['forward_extra_in_logits']:.2f} logits); "
          f"analysis peak: {m['analysis_peak_mb']:.0f} MB (+{m['analysis_extra_in_logits']:.2f} logits)")
    if "start" in report:
        s = report["start"]
        print(f"\n3. Start to first analysis: warm cache {s['warm_s']:.1f} s, cold cache {s['cold_s']:.1f} s")
    c = report["class"]
    print(f"\n4. A class at once: {c['requests']} sentences")
    print(f"{'':>10} {'p50 ms':>8} {'p95 ms':>8} {'per s':>7}")
    print(f"{'serial':>10} {c['serial_p50_ms']:>8.0f} {c['serial_p95_ms']:>8.0f} {c['serial_per_s']:>7.1f}")
    print(f"{'batched':>10} {c['batched_p50_ms']:>8.0f} {c['batched_p95_ms']:>8.0f} {c['batched_per_s']:>7.1f}")
    print(f"   throughput {c['speedup']:.2f}x; batch sizes {c['batch_sizes']}; largest per-token difference "
          f"from one-at-a-time {c['max_nll_difference']:.1e}")
    if report.get("gpu"):
        print(f"\n5. GPU ({report['gpu_name']})")
        print(f"{'dtype':>9} {'tokens':>7} {'forward ms':>11} {'analysis ms':>12} {'ratio':>7} "
              f"{'max |Δnll| vs CPU':>18}")
        for r in report["gpu"]:
            print(f"{r['dtype']:>9} {r['tokens']:>7} {r['forward_ms']:>11.2f} {r['analysis_ms']:>12.2f} "
                  f"{r['ratio']:>7.3f} {r['max_nll_difference_vs_cpu']:>18.1e}")
    else:
        print("\n5. GPU: no CUDA device on this machine")
    g = report["garbage"]
    print("\n6. A page run's garbage collection (a server's process, the model loaded): one full collection")
    print(f"{'':>14} {'objects walked':>15} {'ms':>8}")
    print(f"{'as it was':>14} {g['tracked_before']:>15,} {g['before_ms']:>8.2f}")
    print(f"{'after a freeze':>14} {g['tracked_after']:>15,} {g['after_ms']:>8.2f}")
    print(f"   {g['frozen']:,} objects frozen by lmviz.app.garbage.collect_after_run: no collection walks them "
          "until the next freeze (a minute at most)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition (for CI)")
    parser.add_argument("--threads", type=int, help="torch's threads (default: one per core). On a machine shared "
                        "with other work, 1 steadies the figures: a forward pass split over threads waits for "
                        "the slowest, and another process's load stalls them all")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/perf.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths, repeats = ([16, 64], 1) if args.quick else ([16, 256, 1024], 7)
    loaded = load_causal_lm(device="cpu")
    report = {"machine": f"{os.cpu_count()} CPU cores, torch {torch.__version__}, "
                         f"{torch.get_num_threads()} threads",
              "overhead": overhead(loaded, lengths, repeats, ["paragraph"] if args.quick else list(TEXTS)),
              "memory": memory(lengths[-1]),
              "class": serve_class(loaded, CLASS_SENTENCES[:8] if args.quick else CLASS_SENTENCES),
              "garbage": garbage_collection(1 if args.quick else repeats)}
    if not args.quick:
        report["start"] = start_times()
    if torch.cuda.is_available():
        report["gpu_name"] = torch.cuda.get_device_name()
        report["gpu"] = gpu_table(lengths + ([] if args.quick else [2048]), repeats)
    print_report(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n(written to {args.json})")


if __name__ == "__main__":
    main()
