"""Command line: python -m lmviz clm "TEXT" [--model ID] [--bos] [--json]"""

from __future__ import annotations

import argparse
import json
import math
import sys

from lmviz.analysis import NothingToScore, analyse_clm
from lmviz.models import DEFAULT_MODEL, DTYPES, ModelLoadError, load_causal_lm
from lmviz.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_prob


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def _number(value: float) -> float | str:
    """JSON has no inf or NaN: write them as strings rather than invalid JSON."""
    return value if math.isfinite(value) else str(value)


def _as_json(result) -> str:
    data = result.to_dict()
    data["rows"] = [{**row, "prob": _number(row["prob"]), "nll": _number(row["nll"])} for row in data["rows"]]
    for key in ("loss", "loss_model", "loss_softmax_gather", "loss_cross_entropy", "max_difference", "perplexity"):
        data[key] = _number(data[key])
    return json.dumps(data, ensure_ascii=False, indent=2)


def _as_table(result) -> str:
    lines = [f"model: {result.model}   device: {result.device}   tokens: {len(result.tokens)}"]
    if result.truncated_from:
        lines.append(f"(text cut to the first {len(result.tokens)} of {result.truncated_from} tokens)")
    lines.append(f"{'pos':>4}  {'input':<16} {'target':<16} {'id':>7}  {'p(target)':>10}  {'-log p':>9}  {'rank':>6}")
    for row in result.rows:
        lines.append(f"{row.position:>4}  {row.input_token[:16]:<16} {row.target_token[:16]:<16} {row.target_id:>7}  "
                     f"{fmt_prob(row.prob):>10}  {fmt(row.nll):>9}  {row.rank:>6}")
    lines += [
        f"loss (mean -log p)        {fmt(result.loss)}",
        f"  model's own out.loss    {fmt(result.loss_model, CHECK_DIGITS)}",
        f"  softmax, gather, -log   {fmt(result.loss_softmax_gather, CHECK_DIGITS)}",
        f"  nn.CrossEntropyLoss     {fmt(result.loss_cross_entropy, CHECK_DIGITS)}",
        f"  lmviz clm_loss          {fmt(result.loss, CHECK_DIGITS)}",
        f"  largest difference      {result.max_difference:.1e}",
        f"perplexity exp(loss)      {fmt(result.perplexity, PERPLEXITY_DIGITS)}",
    ]
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lmviz", description="How a language model's loss is computed.")
    commands = parser.add_subparsers(dest="command", required=True)
    clm = commands.add_parser("clm", help="per-token causal-LM loss of a text")
    clm.add_argument("text")
    clm.add_argument("--model", default=DEFAULT_MODEL, help=f"hub id or local folder (default: the bundled {DEFAULT_MODEL})")
    clm.add_argument("--bos", action="store_true", help="prepend the BOS token so the first word is scored too")
    clm.add_argument("--json", action="store_true", help="print JSON instead of a table")
    clm.add_argument("--top-k", type=_positive_int, default=5, help="how many guesses to keep per position")
    clm.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, mps")
    clm.add_argument("--dtype", default="float32", choices=list(DTYPES))
    args = parser.parse_args(argv)
    try:
        loaded = load_causal_lm(args.model, device=args.device, dtype=args.dtype, progress=_progress)
        result = analyse_clm(loaded, args.text, add_bos=args.bos, top_k=args.top_k)
    except (ModelLoadError, NothingToScore) as problem:
        print(f"lmviz: {problem}", file=sys.stderr)
        return 2
    print(_as_json(result) if args.json else _as_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
