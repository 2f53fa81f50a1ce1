"""One visitor against the class: 29 students and one session that sends long texts as fast as it can.

    python -m benchmarks.noisy_neighbour [--quick] [--seconds S]

29 students each send a sentence of their own (10 to 18 words), wait for its result, read it for
2 to 8 s and send the next. Their latency is measured through the path of the Your sentence page on
a shared server: the session's admission by lmviz.serving.fair_share.FairShare, then the shared
lmviz.serving.batcher.Batcher. Runs of the same length, one after another in one process, on the bundled
model (--quick: 1 and 4 only, 10 s each):

1. quiet: the 29 students alone, with lmviz's limits;
2. noisy, no limits: a 30th session sends texts of the page's most characters (2 000, digits and
   letters, so over 1 024 tokens: the most a text is scored on) as soon as the last is answered,
   into a Batcher that reads no text in pieces (its long texts are padded into the students'
   batches), with no FairShare limit;
3. noisy, pieces only: the same session, with the Batcher's long texts read in pieces and a batch
   of the students' sentences scored between two pieces, but no FairShare limit;
4. noisy, lmviz's limits: pieces, and FairShare's defaults (per session: one request at a time
   and LMVIZ_CHARS_PER_MINUTE characters a minute);
5. and 6. the same session on the Next token page instead, whose forward pass runs in the
   session's own thread beside the Batcher's (as Chat loss's does), without and with the limits;
7. quiet again: how much the quiet figure itself moves between runs.

A run of the class before the first, not measured, warms the model up.

A refused text is sent again after REFUSED_RETRY_SECONDS (a page's rerun). The table gives the
students' p50, p95 and largest latency, and each run's p95 divided by the quiet run's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

from lmviz.lessons.causal_lm import MAX_TOKENS, analyse_clm
from lmviz.lessons.next_token import next_token_logits
from lmviz.models.loading import load_causal_lm
from lmviz.models.settings import chars_per_minute
from lmviz.serving.batcher import Batcher
from lmviz.serving.fair_share import PROCESS_CHARS_IN_FLIGHT, FairShare, TooMuchText

STUDENTS = 29
TEXT_BOX_CHARS = 2000  # Your sentence's text box takes at most this many characters (tests/test_readme.py)
REFUSED_RETRY_SECONDS = 0.1
WORDS = ("the a student teacher model loss learns reads writes predicts every next token word sentence "
         "class river morning quiet garden window").split()


def student_sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 18))).capitalize() + "."


def long_text(rng: random.Random) -> str:
    """TEXT_BOX_CHARS characters that the tokenizer splits finely: every one is scored at the page's limit."""
    return "".join(rng.choice("0123456789 abcdefghijklmnopqrstuvwxyz") for _ in range(TEXT_BOX_CHARS))


def run(loaded, seconds: float, neighbour: str | None, pieces: bool, limited: bool) -> dict:
    """The students' latencies; ``neighbour``: None (quiet), "Your sentence" (through the Batcher) or
    "Next token" (its own forward pass, in its own thread, as that page and Chat loss score)."""
    batcher = Batcher(loaded) if pieces else Batcher(loaded, piece_tokens=MAX_TOKENS)  # no text is long
    share = FairShare(chars_per_minute(), PROCESS_CHARS_IN_FLIGHT) if limited else FairShare(
        float("inf"), float("inf"))
    latencies: list[float] = []
    noisy_counts = {"scored": 0, "refused": 0}
    end = time.monotonic() + seconds

    def student(i: int) -> None:
        rng = random.Random(i)
        time.sleep(rng.uniform(0, 8))  # the class does not press Enter in step
        while time.monotonic() < end:
            start = time.perf_counter()
            text = student_sentence(rng)
            with share.admit(f"student-{i}", [text]):
                batcher.analyse(text)
            latencies.append(time.perf_counter() - start)
            time.sleep(rng.uniform(2, 8))

    def noisy() -> None:
        rng = random.Random(-1)
        while time.monotonic() < end:
            text = long_text(rng)
            try:
                with share.admit("neighbour", [text]):
                    batcher.analyse(text) if neighbour == "Your sentence" else next_token_logits(loaded, text)
                noisy_counts["scored"] += 1
            except TooMuchText:
                noisy_counts["refused"] += 1
                time.sleep(REFUSED_RETRY_SECONDS)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(STUDENTS)]
    if neighbour:
        threads.append(threading.Thread(target=noisy))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    q = statistics.quantiles(latencies, n=100)
    return {"requests": len(latencies), "p50": q[49], "p95": q[94], "max": max(latencies), **noisy_counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 s runs of 1 and 4 only (for CI): proves the script works")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each run")
    args = parser.parse_args()
    seconds = 10.0 if args.quick else args.seconds
    loaded = load_causal_lm(device="cpu")
    # A model's first forward passes of each shape are slower than the next: a run of the class, not measured.
    run(loaded, 5.0 if args.quick else 20.0, "Your sentence", pieces=True, limited=True)
    tokens = len(analyse_clm(loaded, long_text(random.Random(0))).input_ids)
    print(f"{STUDENTS} students, {seconds:.0f} s per run; the neighbour's texts: {TEXT_BOX_CHARS:,} characters, "
          f"{tokens:,} tokens scored; limit {chars_per_minute():,.0f} characters a minute per session")
    quiet = run(loaded, seconds, None, pieces=True, limited=True)
    runs = [("1. quiet", quiet)]
    if not args.quick:  # run 2 outlasts its seconds: its students wait a minute for answers
        runs += [("2. noisy, no limits", run(loaded, seconds, "Your sentence", pieces=False, limited=False)),
                 ("3. noisy, pieces only", run(loaded, seconds, "Your sentence", pieces=True, limited=False))]
    runs.append(("4. noisy, lmviz's limits", run(loaded, seconds, "Your sentence", pieces=True, limited=True)))
    if not args.quick:
        runs += [("5. noisy on Next token, no limits", run(loaded, seconds, "Next token", pieces=True, limited=False)),
                 ("6. noisy on Next token, lmviz's limits", run(loaded, seconds, "Next token", pieces=True,
                                                                limited=True)),
                 ("7. quiet again (how much the quiet figure moves)", run(loaded, seconds, None, pieces=True,
                                                                         limited=True))]
    print("| run | students' requests | p50 ms | p95 ms | largest ms | p95 ÷ quiet p95 | neighbour's texts scored "
          "| refused |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in runs:
        print(f"| {name} | {r['requests']} | {r['p50'] * 1000:,.0f} | {r['p95'] * 1000:,.0f} | {r['max'] * 1000:,.0f} "
              f"| {r['p95'] / quiet['p95']:.2f} | {r['scored']} | {r['refused']} |")


if __name__ == "__main__":
    main()
