"""Investigation for issue 17: a small English masked LM of lmviz's own, trained on
WordNet 3.0's definitions and example sentences (Debian's wordnet-base, WordNet 3.0
licence), then measured on held-out WordNet text and on ten fill-in sentences,
beside lmviz's tiny BERT.

    apt-get download wordnet-base && dpkg-deb -x wordnet-base_*.deb /tmp/wn
    nice -n 19 python -m scripts.train_english_mlm --wordnet /tmp/wn/usr/share/wordnet --steps 1000

Writes the model, its tokenizer and report.json to --out (default /tmp/english_mlm).
One CPU thread: the machine is shared.

What it found (2026-11-30, --preset small, 1 000 steps, 28 min on one thread): 2.4 M parameters, 9.9 MB;
held-out loss 5.24 (ln V = 9.39), top-1 12.8 %, top-5 29.0 %, barely above always guessing the most
frequent tokens (5.4 % / 21.2 %); every one of the ten sentences got filler ("the, of, ., is, a"). So lmviz
does not ship it: `python -m lmviz prepare` (bert-base-uncased) is the way to English on the BERT pages.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path

import torch

from lmviz.core.losses import mlm_loss
from lmviz.core.masking import create_mlm_mask
from lmviz.core.numbers import fmt, fmt_prob
from lmviz.lessons.training import MAX_POSITIONS, build_model, train_tokenizer
from lmviz.models.loading import TINY_BERT, load_bert

SEED = 0
HELD_OUT_EVERY = 20  # every 20th synset is held out: 5 % of the text, never seen in training
POS_FILES = ("noun", "verb", "adj", "adv")
SENTENCES = [
    "The capital of France is [MASK].", "She drank a cup of [MASK].", "Rome is the capital of [MASK].",
    "The [MASK] barked at the cat.", "He wrote the letter with a [MASK].", "The sun rises in the [MASK].",
    "A [MASK] is a large animal with a trunk.", "Water freezes at zero [MASK].", "Birds can [MASK].",
    "The doctor works in a [MASK].",
]


def synset_text(line: str) -> str | None:
    """One synset of a WordNet data file as English: its definition as a sentence, then its
    examples. ``offset lexfile pos count lemma lexid ... | gloss; "example"; "example"``."""
    if line.startswith("  ") or " | " not in line:
        return None  # the licence header
    fields, gloss = line.split(" | ", 1)
    parts = fields.split()
    lemmas = [re.sub(r"\(.*\)$", "", parts[4 + 2 * i]).replace("_", " ") for i in range(int(parts[3], 16))]
    examples = re.findall(r'"([^"]+)"', gloss)
    definition = re.sub(r'"[^"]*"', "", gloss).strip(" ;\n")
    first = lemmas[0]
    template = {"n": "{} is {}.", "v": "to {} is to {}."}.get(parts[2], "{} means {}.")
    sentences = [template.format(first, definition)] if definition else []
    if len(lemmas) > 1:
        sentences.append(f"{first} is also called {', '.join(lemmas[1:])}.")
    sentences += [e.strip() + ("" if e.strip()[-1:] in ".?!" else ".") for e in examples if e.strip()]
    return " ".join(sentences)


def read_wordnet(folder: Path) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): one text per synset, in file order."""
    texts = [t for pos in POS_FILES for line in (folder / f"data.{pos}").open(encoding="utf-8", errors="replace")
             if (t := synset_text(line))]
    held_out = [t for i, t in enumerate(texts) if i % HELD_OUT_EVERY == 0]
    train = [t for i, t in enumerate(texts) if i % HELD_OUT_EVERY != 0]
    return train, held_out


def pack(texts: list[str], tokenizer, length: int = MAX_POSITIONS) -> torch.Tensor:
    """Consecutive synsets (neighbours in a WordNet file share a topic) packed into rows of
    ``[CLS] ... [SEP]`` of exactly ``length`` tokens; the tail that fits no row is dropped."""
    ids = [i for t in texts for i in tokenizer(t, add_special_tokens=False)["input_ids"]]
    body = length - 2
    rows = torch.tensor(ids[: len(ids) // body * body]).view(-1, body)  # (N, length - 2)
    n = rows.shape[0]
    return torch.cat([torch.full((n, 1), tokenizer.cls_token_id), rows,
                      torch.full((n, 1), tokenizer.sep_token_id)], dim=1)  # (N, length)


def masked_logits(model, ids: torch.Tensor, tokenizer, seed: int):
    """BERT masking of ``ids``; the logits at the selected positions only (the vocabulary
    projection of the other 85 % is never needed). Returns (logits (1, M, V), targets (1, M))."""
    mask = create_mlm_mask(ids, tokenizer.mask_token_id, len(tokenizer), special_token_ids=tokenizer.all_special_ids,
                           seed=seed, min_selected=1)
    hidden = model.bert(input_ids=mask.masked_input_ids).last_hidden_state  # (B, T, H)
    selected = mask.masked_positions
    logits = model.cls.predictions(hidden[selected])  # (M, V)
    return logits.unsqueeze(0), ids[selected].unsqueeze(0)


def train(model, rows: torch.Tensor, tokenizer, steps: int, batch_size: int, lr: float) -> list[dict]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)  # then a linear decay to zero: the usual BERT schedule
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / warmup, (steps - s) / steps))
    generator, log, start = torch.Generator().manual_seed(SEED), [], time.perf_counter()
    model.train()
    for step in range(steps):
        batch = rows[torch.randint(len(rows), (batch_size,), generator=generator)]
        logits, targets = masked_logits(model, batch, tokenizer, seed=step)
        loss, _ = mlm_loss(logits, targets, torch.ones_like(targets, dtype=torch.bool))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            log.append({"step": step, "loss": loss.item(), "seconds": time.perf_counter() - start})
            print(f"step {step:5d}  loss {fmt(loss.item())}  {log[-1]['seconds']:6.0f} s", flush=True)
    model.eval()
    return log


@torch.no_grad()
def held_out_accuracy(model, rows: torch.Tensor, tokenizer, batch_size: int = 32) -> dict:
    """Top-1 and top-5 accuracy and loss on 15 % BERT-masked held-out tokens (fixed seed);
    the loss is checked against torch's own cross_entropy."""
    hits1 = hits5 = words = word_hits1 = 0
    losses, references, count = [], [], 0
    for k in range(0, len(rows), batch_size):
        logits, targets = masked_logits(model, rows[k: k + batch_size], tokenizer, seed=10**6 + k)
        loss, _ = mlm_loss(logits, targets, torch.ones_like(targets, dtype=torch.bool))
        references.append(torch.nn.functional.cross_entropy(logits[0].float(), targets[0], reduction="sum").item())
        losses.append(loss.item() * targets.numel())
        top5 = logits[0].topk(5).indices  # (M, 5)
        hit1, hit5 = top5[:, 0] == targets[0], (top5 == targets[0, :, None]).any(dim=1)
        whole = torch.tensor([not t.startswith("##") for t in tokenizer.convert_ids_to_tokens(targets[0].tolist())])
        hits1, hits5, count = hits1 + int(hit1.sum()), hits5 + int(hit5.sum()), count + targets.numel()
        words, word_hits1 = words + int(whole.sum()), word_hits1 + int((hit1 & whole).sum())
    return {"masked_tokens": count, "top1": hits1 / count, "top5": hits5 / count, "loss": sum(losses) / count,
            "loss_torch_reference": sum(references) / count, "whole_word_tokens": words,
            "whole_word_top1": word_hits1 / words}


@torch.no_grad()
def guesses(model, tokenizer, sentence: str, k: int = 5) -> list[tuple[str, float]]:
    """The k likeliest tokens at the first [MASK] of ``sentence``."""
    enc = tokenizer(sentence, return_tensors="pt")
    where = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0]
    logits = model(**{k_: v for k_, v in enc.items() if k_ != "token_type_ids"}).prediction_logits[0, where]
    probs, ids = torch.softmax(logits.float(), dim=-1).topk(k)
    return list(zip(tokenizer.convert_ids_to_tokens(ids.tolist()), probs.tolist()))


def show_guesses(name: str, model, tokenizer) -> dict:
    print(f"\n{name}: top-5 guesses")
    out = {}
    for sentence in SENTENCES:
        out[sentence] = guesses(model, tokenizer, sentence)
        print(f"  {sentence:45s} " + ", ".join(f"{t} {fmt_prob(p)}" for t, p in out[sentence]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/english_mlm"))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--vocab-size", type=int, default=12000)
    parser.add_argument("--preset", default="medium")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_texts, held_out_texts = read_wordnet(args.wordnet)
    tokenizer = train_tokenizer(train_texts, vocab_size=args.vocab_size)
    rows, held_out = pack(train_texts, tokenizer), pack(held_out_texts, tokenizer)
    print(f"{len(train_texts)} training synsets, {rows.numel()} tokens in {len(rows)} rows; "
          f"{held_out.numel()} held-out tokens; vocabulary {len(tokenizer)}", flush=True)
    model = build_model("mlm", args.preset, tokenizer)
    start = time.perf_counter()
    log = train(model, rows, tokenizer, args.steps, args.batch_size, args.lr)
    seconds = time.perf_counter() - start
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    report = {"data": {"train_synsets": len(train_texts), "train_tokens": rows.numel(),
                       "held_out_synsets": len(held_out_texts), "held_out_tokens": held_out.numel()},
              "vocab_size": len(tokenizer), "ln_V": math.log(len(tokenizer)),
              "parameters": sum(p.numel() for p in model.parameters()),
              "bytes_on_disk": sum(f.stat().st_size for f in args.out.iterdir() if f.name != "report.json"),
              "train_seconds": seconds, "steps": args.steps,
              "tokens_seen": args.steps * args.batch_size * MAX_POSITIONS,
              "log": log, "held_out": held_out_accuracy(model, held_out, tokenizer),
              "guesses": show_guesses("WordNet MLM", model, tokenizer)}
    tiny = load_bert(TINY_BERT, device="cpu", dtype="float32")
    report["tiny_bert_guesses"] = show_guesses("lmviz tiny BERT", tiny.model, tiny.tokenizer)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("log", "guesses", "tiny_bert_guesses")}, indent=2))


if __name__ == "__main__":
    main()
