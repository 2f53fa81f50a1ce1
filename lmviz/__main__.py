"""Command line:

    python -m lmviz clm "TEXT" [--model ID] [--bos] [--json]
    python -m lmviz mlm "TEXT" [--seed N] [--json]
    python -m lmviz nsp "SENTENCE A" "SENTENCE B" [--not-next] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from lmviz.analysis import NotEnoughMemory, analyse_clm
from lmviz.bert_analysis import analyse_mlm, analyse_nsp
from lmviz.models import DEFAULT_MODEL, DTYPES, TINY_BERT, ModelLoadError, load_bert, load_causal_lm
from lmviz.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.text import NothingToScore


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def _number(value: float) -> float | str:
    """JSON has no inf or NaN: write them as strings rather than invalid JSON."""
    return value if math.isfinite(value) else str(value)


def _finite(value):
    """JSON has no inf or NaN: such floats are written as strings, anywhere in the data."""
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _as_json(result) -> str:
    return json.dumps(_finite(result.to_dict()), ensure_ascii=False, indent=2)


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
        f"  log-softmax, gather     {fmt(result.loss, CHECK_DIGITS)}",
        f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}",
        f"  nn.CrossEntropyLoss     {fmt(result.loss_cross_entropy, CHECK_DIGITS)}",
        f"  largest difference      {fmt_gap(result.max_difference)}",
        f"perplexity exp(loss)      {fmt(result.perplexity, PERPLEXITY_DIGITS)}",
    ]
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def _mlm_table(result) -> str:
    lines = [f"model: {result.model}   selected {result.num_selected} of {result.num_eligible} tokens",
             f"{'pos':>4}  {'token':<14} {'branch':<13} {'model reads':<14} {'label':>6}  {'p(orig)':>10}  {'-log p':>9}"]
    for r in result.rows:
        p = fmt_prob(r.prob) if r.prob is not None else ""
        nll = fmt(r.nll) if r.nll is not None else ""
        lines.append(f"{r.position:>4}  {r.token[:14]:<14} {r.branch.words:<13} {r.shown[:14]:<14} {r.label:>6}  {p:>10}  {nll:>9}")
    lines += [f"masked-LM loss            {fmt(result.loss)}",
              f"  lmviz mlm_loss          {fmt(result.loss, CHECK_DIGITS)}",
              f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}"]
    return "\n".join(lines)


def _nsp_table(result) -> str:
    return "\n".join([
        f"model: {result.model}",
        "tokens:   " + " ".join(result.tokens),
        "segments: " + " ".join(str(s) for s in result.segment_ids),
        f"logits [B follows A, B from elsewhere]: {fmt(result.logits[0])} {fmt(result.logits[1])}",
        f"softmax:                                {fmt(result.probs[0])} {fmt(result.probs[1])}",
        f"label {result.label} (Hugging Face: 0 = B follows A)",
        f"NSP loss                  {fmt(result.loss_two_logits)}",
        f"  2-logit cross-entropy   {fmt(result.loss_two_logits, CHECK_DIGITS)}",
        f"  1-logit binary CE       {fmt(result.loss_one_logit, CHECK_DIGITS)}",
        f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}",
    ])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lmviz", description="How a language model's loss is computed.")
    commands = parser.add_subparsers(dest="command", required=True)
    clm = commands.add_parser("clm", help="per-token causal-LM loss of a text")
    clm.add_argument("text")
    clm.add_argument("--model", default=DEFAULT_MODEL, help=f"hub id or local folder (default: the bundled {DEFAULT_MODEL})")
    clm.add_argument("--bos", action="store_true", help="prepend the start-of-text token so the first word is scored")
    clm.add_argument("--top-k", type=_positive_int, default=5, help="how many guesses to keep per position")
    clm.add_argument("--dtype", default=None, choices=list(DTYPES), help="default float32 ($LMVIZ_LOW_MEMORY: bfloat16)")
    mlm = commands.add_parser("mlm", help="BERT-style masking of a text and the masked-LM loss")
    mlm.add_argument("text")
    mlm.add_argument("--seed", type=int, default=0)
    mlm.add_argument("--mask-prob", type=float, default=0.15)
    mlm.add_argument("--mask-one", action="store_true", help="mask one position if none is selected")
    nsp = commands.add_parser("nsp", help="next-sentence prediction for a pair of sentences")
    nsp.add_argument("sentence_a")
    nsp.add_argument("sentence_b")
    nsp.add_argument("--not-next", action="store_true", help="label the pair as B not following A")
    for command, default in ((mlm, TINY_BERT), (nsp, TINY_BERT)):
        command.add_argument("--model", default=default, help=f"BERT hub id or folder (default: lmviz's own {default})")
    for command in (clm, mlm, nsp):
        command.add_argument("--json", action="store_true", help="print JSON instead of a table")
        command.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, mps")
    return parser


def _run(args):
    if args.command == "clm":
        loaded = load_causal_lm(args.model, device=args.device, dtype=args.dtype, progress=_progress)
        result = analyse_clm(loaded, args.text, add_bos=args.bos, top_k=args.top_k)
        return _as_json(result) if args.json else _as_table(result)
    loaded = load_bert(args.model, device=args.device)
    if args.command == "mlm":
        result = analyse_mlm(loaded, args.text, seed=args.seed, mask_prob=args.mask_prob,
                             min_selected=1 if args.mask_one else 0)
        return _as_json(result) if args.json else _mlm_table(result)
    result = analyse_nsp(loaded, args.sentence_a, args.sentence_b, b_follows_a=not args.not_next)
    return _as_json(result) if args.json else _nsp_table(result)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        print(_run(args))
    except (ModelLoadError, NothingToScore) as problem:
        print(f"lmviz: {problem}", file=sys.stderr)
        return 2
    except NotEnoughMemory as problem:
        on_gpu = problem.device.startswith("cuda")
        print(f"lmviz: {problem} Try a shorter text{', or --device cpu' if on_gpu else ''}.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
