"""How often lmviz's tiny BERT tells a true next sentence from a sentence of another story, on the pairs
the Next-sentence page's buttons draw (lmviz.lessons.bert.draw_nsp_pair, cut as the model's training pairs
were: A a span of a story's first sentences) and on pairs drawn as the page drew them before issue 29
(A one sentence, any of the story's).

    python -m benchmarks.nsp_accuracy [--quick] [--pairs N] [--first-draw D] [--record]

Each way draws N pairs per label (draws D, D + 1, ...) from the same held-out stories. The model is right
when its p(B follows A) is above one half exactly when B follows A. --record writes the figures of the full run
to assets/tiny-models.json, where the Next-sentence page reads them.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from lmviz.core.labels import IS_NEXT_HF
from lmviz.lessons.bert import MAX_PAIR_TOKENS, draw_nsp_pair, held_out_stories, percent
from lmviz.models.loading import ASSETS, TINY_BERT, load_bert

PAIRS, QUICK_PAIRS = 1000, 200  # per label; QUICK_PAIRS are the first of the full run's draws
COMMAND = "python -m benchmarks.nsp_accuracy --record"


def one_sentence_pair(follows: bool, draw: int) -> tuple[str, str]:
    """The page's draw before issue 29: A any one sentence of a story, B the next one, or the second
    sentence of another story."""
    rng = random.Random(draw)
    stories = [s.sentences for s in held_out_stories()]
    story = rng.choice(stories)
    i = rng.randrange(len(story) - 1)
    b = story[i + 1] if follows else rng.choice([s for s in stories if s is not story])[1]
    return story[i], b


# how the page's figures name each way in assets/tiny-models.json -> (the way in the table, its draw)
WAYS = {"as_in_training": ("as in training: A a span (the buttons now)", draw_nsp_pair),
        "one_sentence_a": ("A one sentence (the buttons before)", one_sentence_pair)}


@torch.inference_mode()
def p_is_next(loaded, pairs: list[tuple[str, str]], batch_size: int = 100) -> list[float]:
    """p(B follows A) of the next-sentence head for each pair, as analyse_nsp computes it on the page
    ([CLS] A [SEP] B [SEP], the head's softmax), a batch of pairs at a time."""
    probs = []
    for start in range(0, len(pairs), batch_size):
        a, b = zip(*pairs[start:start + batch_size])
        enc = loaded.tokenizer(list(a), list(b), truncation=True, max_length=MAX_PAIR_TOKENS, padding=True,
                               return_token_type_ids=True, return_tensors="pt").to(loaded.device)
        logits = loaded.model(**enc).seq_relationship_logits  # (B, 2)
        probs += torch.softmax(logits.float(), dim=-1)[:, IS_NEXT_HF].tolist()
    return probs


def accuracy(loaded, draw, follows: bool, pairs: int, first_draw: int) -> float:
    """The share of ``pairs`` draws whose p(B follows A) is on the right side of one half."""
    drawn = [draw(follows, d) for d in range(first_draw, first_draw + pairs)]
    return sum((p > 0.5) == follows for p in p_is_next(loaded, drawn)) / pairs


def measure(loaded, pairs: int, first_draw: int = 0) -> dict[str, dict[str, float]]:
    """{way: {"is_next": accuracy on pairs where B follows A, "not_next": where it does not}}."""
    return {way: {"is_next": accuracy(loaded, draw, True, pairs, first_draw),
                  "not_next": accuracy(loaded, draw, False, pairs, first_draw)} for way, (_, draw) in WAYS.items()}


def record(results: dict[str, dict[str, float]], pairs: int, first_draw: int) -> None:
    """The figures, in the tiny BERT's record of assets/tiny-models.json, with the command that measured them."""
    path = ASSETS / "tiny-models.json"
    report = json.loads(path.read_text())
    bert = next(m for m in report["models"] if m["objective"] == "mlm+nsp")
    bert["page_pairs"] = {**results, "pairs_per_label": pairs, "first_draw": first_draw, "command": COMMAND}
    path.write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_PAIRS} pairs per label (for CI)")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="pairs per label and way")
    parser.add_argument("--first-draw", type=int, default=0, help="the first draw (the seed of the first pair)")
    parser.add_argument("--record", action="store_true", help="write the figures to assets/tiny-models.json")
    args = parser.parse_args()
    pairs = QUICK_PAIRS if args.quick else args.pairs
    if args.record and (args.quick or pairs != PAIRS or args.first_draw != 0):
        parser.error(f"--record writes the page's figures: the full run only ({PAIRS} pairs from draw 0)")
    loaded = load_bert(TINY_BERT, device="cpu", dtype="float32")
    start = time.perf_counter()
    results = measure(loaded, pairs, args.first_draw)
    seconds = time.perf_counter() - start
    print(f"{TINY_BERT}, next-sentence head, {len(held_out_stories())} held-out stories; n = {pairs} pairs per label, "
          f"draws {args.first_draw} to {args.first_draw + pairs - 1} (each draw its own seed)\n")
    print("| pairs drawn | B follows A: right | B from another story: right | n per label | first draw |")
    print("|---|---|---|---|---|")
    for way, figures in results.items():
        right = f"{percent(figures['is_next'])} | {percent(figures['not_next'])}"
        print(f"| {WAYS[way][0]} | {right} | {pairs} | {args.first_draw} |")
    print(f"\n{seconds:.1f} s")
    if args.record:
        record(results, pairs, args.first_draw)
        print("recorded in assets/tiny-models.json")


if __name__ == "__main__":
    main()
