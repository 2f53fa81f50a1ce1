"""What the Bits per byte page costs, on the bundled model, as ratios to one bare forward pass of the same tokens.

    python -m benchmarks.bits_per_byte [--quick]

1. bits_per_byte: the text's rows (each token's bytes two ways, its -ln p and context) against a bare forward
   pass over the prefix and the text, at several lengths;
2. windows: the text scored in lm-evaluation-harness's windows and in the perplexity guide's (window 32,
   stride 16, the page's defaults), each against one pass, with how many tokens each way makes the model read.

Timings are medians of interleaved runs. --quick (for CI) uses one short length and one repetition: it proves
the script works; its figures mean little.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lmviz.lessons.bits_per_byte import (
    DEFAULT_STRIDE,
    DEFAULT_WINDOW,
    bits_per_byte,
    encode_for_bpb,
    harness_windows,
    score_windows,
    strided_windows,
    whole,
)
from lmviz.models.loading import load_causal_lm

SENTENCE = ("The library opens at nine in the morning and closes at six in the evening; its sister library in Tokyo "
            "(東京) lends manga too 📚. ")


def text_of(loaded, tokens: int) -> str:
    """SENTENCE repeated until it is at least ``tokens`` tokens long, cut to that many."""
    ids = loaded.tokenizer(SENTENCE * (tokens // 20 + 2), add_special_tokens=False)["input_ids"][:tokens]
    return loaded.tokenizer.decode(ids)


def bare(loaded, ids: list[int]) -> None:
    with torch.inference_mode():
        loaded.model(input_ids=torch.tensor([ids]))


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def medians(runs: dict, repeats: int) -> dict:
    seconds = {name: [] for name in runs}
    for _ in range(repeats):  # interleaved: every way sees the same machine
        for name, run in runs.items():
            seconds[name].append(timed(run))
    return {name: statistics.median(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one short length, one repetition (for CI)")
    args = parser.parse_args()
    lengths, repeats = ([64], 1) if args.quick else ([64, 256, 1000], 5)
    torch.set_num_threads(torch.get_num_threads())
    loaded = load_causal_lm()
    print(f"model: {loaded.name} on {loaded.device}, {torch.get_num_threads()} threads, medians of {repeats}\n")

    print("1. bits_per_byte against a bare forward pass of the same tokens")
    print(f"{'tokens':>7} {'bare forward (ms)':>18} {'bits_per_byte (ms)':>19} {'ratio':>6}")
    for length in lengths:
        text = text_of(loaded, length)
        ids = encode_for_bpb(loaded, text)
        got = medians({"bare": lambda: bare(loaded, ids), "bpb": lambda: bits_per_byte(loaded, text)}, repeats)
        print(f"{len(ids) - 1:>7} {got['bare'] * 1000:>18.0f} {got['bpb'] * 1000:>19.0f} "
              f"{got['bpb'] / got['bare']:>6.2f}")

    print(f"\n2. windows of {DEFAULT_WINDOW}, stride {DEFAULT_STRIDE}, against one pass")
    print(f"{'tokens':>7} {'way':<22} {'windows':>7} {'tokens read':>11} {'ms':>7} {'÷ one pass':>10}")
    for length in lengths:
        ids = encode_for_bpb(loaded, text_of(loaded, length))
        ways = {"one pass": whole(len(ids)), "lm-evaluation-harness": harness_windows(len(ids), DEFAULT_WINDOW),
                "perplexity guide": strided_windows(len(ids), DEFAULT_WINDOW, DEFAULT_STRIDE)}
        got = medians({name: (lambda w=w, name=name: score_windows(loaded.model, ids, w, name))
                       for name, w in ways.items()}, repeats)
        for name, windows in ways.items():
            print(f"{len(ids) - 1:>7} {name:<22} {len(windows):>7} {sum(w.reads for w in windows):>11} "
                  f"{got[name] * 1000:>7.0f} {got[name] / got['one pass']:>10.2f}")


if __name__ == "__main__":
    main()
