"""lmviz under a whole class: concurrent sessions, and a long run's memory.

    python -m benchmarks.reliability [--quick]

1. 30 sessions at once, each a thread with its own sentence, through the code path
   the page uses (lmviz.serving.batcher.Batcher): every session must get its own result
   (equal to one-at-a-time), and the latencies are reported.
2. 1 000 analyses in one process: resident memory after warm-up, and its growth.
3. A few real browsers (chromium) opening "Your sentence" on a real server at the same
   moment, each with its own sentence: what each page shows is checked against
   one-at-a-time, and the time from opening the link to the finished page is reported.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import threading
import time

import psutil

from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.loading import load_causal_lm
from lmviz.serving.batcher import Batcher
from scripts.live_server import ROOT, running_server, sentence_page_at_once

WORDS = "the a student teacher model loss learns reads writes predicts every next token word sentence".split()


def sentence(i: int) -> str:
    """A different sentence for every i (no two sessions share a cached result)."""
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(8 + i % 9)) + f" number {i}."


def sessions(loaded, count: int) -> dict:
    batcher = Batcher(loaded)
    results, latencies, gate = [None] * count, [0.0] * count, threading.Barrier(count)

    def session(i):
        gate.wait()
        start = time.perf_counter()
        results[i] = batcher.analyse(sentence(i))
        latencies[i] = time.perf_counter() - start

    threads = [threading.Thread(target=session, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alone = [analyse_clm(loaded, sentence(i)) for i in range(count)]
    crossed = sum(1 for i, r in enumerate(results) if r.text != sentence(i) or r.input_ids != alone[i].input_ids)
    difference = max(abs(a.nll - b.nll) for r, s in zip(results, alone) for a, b in zip(r.rows, s.rows))
    q = statistics.quantiles(latencies, n=100)
    return {"sessions": count, "cross_talk": crossed, "max_nll_difference": difference, "p50_ms": q[49] * 1000,
            "p95_ms": q[94] * 1000, "batches": list(batcher.batch_sizes)}


def soak(loaded, count: int) -> dict:
    process = psutil.Process()
    for i in range(20):  # warm-up: caches, allocator pools
        analyse_clm(loaded, sentence(i))
    after_warm_up = process.memory_info().rss
    for i in range(count):
        analyse_clm(loaded, sentence(i))
    end = process.memory_info().rss
    return {"analyses": count, "rss_after_warm_up_mb": after_warm_up / 2**20, "rss_end_mb": end / 2**20,
            "growth_percent": (end - after_warm_up) / after_warm_up * 100,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def browsers(loaded, count: int) -> dict | None:
    chromium = shutil.which("chromium")
    if chromium is None:
        return None
    texts = [sentence(100 + i) for i in range(count)]
    with running_server(ROOT / "artifacts" / "reliability-streamlit.log") as url:
        sentence_page_at_once(url, chromium, ["The server loads its model on the first visit."])
        shown = sentence_page_at_once(url, chromium, texts)
    alone = [analyse_clm(loaded, text).loss for text in texts]
    crossed = sum(1 for s in shown if s.text_shown != s.text)
    return {"browsers": count, "cross_talk": crossed, "loss_seconds": sorted(s.loss_seconds for s in shown),
            "seconds": sorted(s.seconds for s in shown),
            "max_loss_difference": max(abs(float(s.loss_shown) - a) for s, a in zip(shown, alone))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sessions and analyses (for CI)")
    parser.add_argument("--browsers", type=int, default=5, help="real browsers at once (part 3)")
    args = parser.parse_args()
    loaded = load_causal_lm(device="cpu")
    s = sessions(loaded, 8 if args.quick else 30)
    print(f"1. {s['sessions']} sessions at once: {s['cross_talk']} got another session's text; largest -log p "
          f"difference from one-at-a-time {s['max_nll_difference']:.1e}; p50 {s['p50_ms']:.0f} ms, "
          f"p95 {s['p95_ms']:.0f} ms; batches {s['batches']}")
    m = soak(loaded, 50 if args.quick else 1000)
    print(f"2. {m['analyses']} analyses: resident memory {m['rss_after_warm_up_mb']:.0f} MB after warm-up, "
          f"{m['rss_end_mb']:.0f} MB at the end ({m['growth_percent']:+.1f} %); peak {m['peak_mb']:.0f} MB")
    b = browsers(loaded, 3 if args.quick else args.browsers)
    if b is None:
        print("3. skipped: chromium is not installed (apt-get install chromium)")
        return
    print(f"3. {b['browsers']} browsers at once on a real server: {b['cross_talk']} showed another session's text; "
          f"largest difference between a page's loss and one-at-a-time {b['max_loss_difference']:.1e} "
          f"(the page shows 5 decimals); from opening the link to the loss on screen "
          f"{', '.join(f'{t:.1f}' for t in b['loss_seconds'])} s, to the whole page drawn "
          f"{', '.join(f'{t:.1f}' for t in b['seconds'])} s")


if __name__ == "__main__":
    main()
