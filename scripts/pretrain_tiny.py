"""Train lmviz's own tiny GPT (causal LM) and tiny BERT (masked LM + next sentence)
on the generated stories, with a fixed seed, and write them to assets/.

    python -m scripts.pretrain_tiny [--steps-gpt N] [--steps-bert N] [--only gpt|bert] [--out assets]

These are the offline models of the masked-LM and next-sentence pages. The
script prints and saves (assets/tiny-models.json) what they reach on held-out
stories, against ln V and the data's own entropy.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from lmviz.core.corpus import entropy_per_token, generate_corpus
from lmviz.lessons.training import Trainer, evaluate, train_tokenizer

SEED = 0


def train_and_save(objective: str, steps: int, corpus, tokenizer, folder: Path) -> dict:
    start = time.perf_counter()
    trainer = Trainer(objective, "small", corpus=corpus, tokenizer=tokenizer, seed=SEED, batch_size=32,
                      learning_rate=1e-3)
    for record in trainer.run(steps, eval_every=100, predict_every=steps):
        if record.validation is not None:
            train = "  (untrained)" if record.train is None else f"train {record.train_loss:.3f}"
            print(f"  {objective} step {record.step:5d}  {train}  validation {record.validation}  "
                  f"{record.seconds:5.0f} s", flush=True)
    seconds = time.perf_counter() - start
    metrics = evaluate(trainer.model, objective, tokenizer, corpus.validation, seed=12345)
    trainer.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"objective": objective, "steps": steps, "seconds": round(seconds, 1), **metrics,
            "last_predictions": trainer.history[-1].predictions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-gpt", type=int, default=1500)
    parser.add_argument("--steps-bert", type=int, default=3000)
    parser.add_argument("--only", choices=["gpt", "bert"],
                        help="retrain one model; the other's folder and its record in tiny-models.json stay")
    parser.add_argument("--out", type=Path, default=Path("assets"))
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    corpus = generate_corpus(num_train=4000, num_validation=400, seed=SEED)
    tokenizer = train_tokenizer([s.text for s in corpus.train])
    record_file = args.out / "tiny-models.json"
    kept = json.loads(record_file.read_text())["models"] if args.only and record_file.exists() else []
    models = {m["objective"]: m for m in kept}
    if args.only != "bert":
        models["clm"] = train_and_save("clm", args.steps_gpt, corpus, tokenizer, args.out / "tiny-gpt")
        models["clm"]["command"] = f"python -m scripts.pretrain_tiny --steps-gpt {args.steps_gpt}"
    if args.only != "gpt":
        models["mlm+nsp"] = train_and_save("mlm+nsp", args.steps_bert, corpus, tokenizer, args.out / "tiny-bert")
        models["mlm+nsp"]["command"] = f"python -m scripts.pretrain_tiny --steps-bert {args.steps_bert}"
    report = {
        "vocab_size": len(tokenizer), "ln_V": math.log(len(tokenizer)),
        "data_entropy_per_token": entropy_per_token(corpus.validation),
        "models": [models[objective] for objective in ("clm", "mlm+nsp") if objective in models],
    }
    record_file.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
