"""The same per-token analysis on the GPU and on the CPU: do they agree, and how fast is each?

    python -m benchmarks.gpu_check [--quick]

Prints one table row per (device, dtype): the median forward time, the
loss, and the largest per-token difference in -log p from the CPU float32
reference. Without a CUDA GPU it prints the CPU rows and says so.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lmviz.analysis import analyse_clm
from lmviz.models import load_causal_lm

SENTENCE = "The capital of France is Paris. Students type their own sentences and see each token's loss."


def timed_analysis(loaded, text: str, repeats: int):
    analyse_clm(loaded, text)  # warm-up: kernels, caches, lazy initialisation
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = analyse_clm(loaded, text)
        seconds.append(time.perf_counter() - start)
    return result, statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, short text (for CI)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 10
    text = SENTENCE if args.quick else " ".join([SENTENCE] * 12)  # about 250 tokens

    settings = [("cpu", "float32")]
    if torch.cuda.is_available():
        settings += [("cuda", "float32"), ("cuda", "bfloat16")]
    rows, reference = [], None
    for device, dtype in settings:
        loaded = load_causal_lm(device=device, dtype=dtype)
        result, seconds = timed_analysis(loaded, text, repeats)
        nll = torch.tensor([r.nll for r in result.rows])
        if reference is None:
            reference = nll
        rows.append((device, dtype, len(result.tokens), result.forward_seconds * 1000, seconds * 1000, result.loss,
                     float((nll - reference).abs().max()), result.max_difference))
        del loaded
        if device == "cuda":
            torch.cuda.empty_cache()

    print(f"{'device':<7} {'dtype':<9} {'tokens':>6} {'forward ms':>11} {'analysis ms':>12} {'loss':>9} "
          f"{'max |Δ nll| vs cpu fp32':>24} {'3-way max diff':>15}")
    for device, dtype, tokens, forward_ms, ms, loss, diff, three_way in rows:
        print(f"{device:<7} {dtype:<9} {tokens:>6} {forward_ms:>11.1f} {ms:>12.1f} {loss:>9.5f} {diff:>24.2e} "
              f"{three_way:>15.1e}")
    if not torch.cuda.is_available():
        print("No CUDA GPU on this machine: only the CPU row was measured.")
    else:
        print(f"GPU: {torch.cuda.get_device_name()}; CPU/GPU forward-time ratio: {rows[0][3] / rows[1][3]:.1f}x, "
              f"whole analysis: {rows[0][4] / rows[1][4]:.1f}x")


if __name__ == "__main__":
    main()
