"""Pre-training tiny models from scratch on lmviz's own corpus.

The loop computes every loss with lmviz.core.losses (``clm_loss``, ``mlm_loss``,
``bert_loss``) from the models' logits: the functions the pages explain are
the ones that train the models. The tests check that they equal the models'
own ``loss`` on the same batches.
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import torch

from lmviz.core.corpus import Corpus, Story, entropy_per_token, generate_corpus, next_sentence_spans, unigram_entropy
from lmviz.core.losses import bert_loss, clm_loss, mlm_loss
from lmviz.core.masking import create_mlm_mask, create_nsp_pairs
from lmviz.core.numbers import fmt_prob
from lmviz.models.loading import LoadedModel, pick_device
from lmviz.models.pretrained import model_build_lock

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
OBJECTIVES = {"clm": "Causal LM (GPT)", "mlm": "Masked LM (BERT)", "mlm+nsp": "Masked LM + next sentence (BERT)"}
# name -> (hidden size, layers, attention heads)
PRESETS = {"tiny": (64, 2, 2), "small": (128, 4, 4), "medium": (256, 4, 4)}
MAX_POSITIONS = 128
VALIDATION_ENTROPY = "validation stories' own entropy"
UNIGRAM_ENTROPY = "unigram entropy of the corpus"  # a reference line's name: the Train page explains it
TOKENIZER_VOCAB_SIZE = 512  # lmviz's stories need ~200: every word whole, plus the letters


def _wordpiece_vocabulary(texts: list[str], vocab_size: int, normalizer, pre_tokenizer) -> dict[str, int]:
    """Special tokens, every character (alone and as a ##continuation), then the
    most frequent words, ties broken alphabetically: the same texts always give
    the same ids (the tokenizers library's trainer breaks ties in hash order)."""
    counts = Counter(word for text in texts
                     for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({ch for word in counts for ch in word})
    words = [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if len(w) > 1]
    tokens = SPECIAL_TOKENS + chars + ["##" + ch for ch in chars]
    tokens += words[: max(0, vocab_size - len(tokens))]
    return {token: i for i, token in enumerate(tokens)}


def train_tokenizer(texts: list[str], vocab_size: int = TOKENIZER_VOCAB_SIZE):
    """A lower-casing WordPiece tokenizer, BERT-style, whose vocabulary is learnt
    from ``texts``: whole words by frequency, and characters for any other word.
    Returned as a transformers tokenizer (save_pretrained writes the standard files)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    vocab = _wordpiece_vocabulary(texts, vocab_size, normalizer, pre_tokenizer)
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer, backend.pre_tokenizer, backend.decoder = normalizer, pre_tokenizer, decoders.WordPiece()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", bos_token="[CLS]", eos_token="[SEP]", model_max_length=MAX_POSITIONS,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # segment ids for sentence pairs
    )


def corpus_tokenizer(corpus: Corpus | None = None, seed: int = 0):
    """The tokenizer a Trainer learns from ``corpus`` (lmviz's generated stories when None)."""
    return train_tokenizer([s.text for s in (corpus or generate_corpus(seed=seed)).train])


def build_model(objective: str, preset: str, tokenizer):
    """A freshly initialised tiny GPT-2 (clm) or BertForPreTraining (mlm, mlm+nsp)."""
    with model_build_lock:  # a model built while another thread loads one would get its meta-device weights
        return _new_model(objective, preset, tokenizer)


def _new_model(objective: str, preset: str, tokenizer):
    from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel

    hidden, layers, heads = PRESETS[preset]
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
           "eos_token_id": tokenizer.sep_token_id}
    vocab_size = len(tokenizer)
    if objective == "clm":
        config = GPT2Config(vocab_size=vocab_size, n_positions=MAX_POSITIONS, n_embd=hidden, n_layer=layers,
                            n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids)
        return GPT2LMHeadModel(config)
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=MAX_POSITIONS,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **ids)
    return BertForPreTraining(config)


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) what the model reads (masked for MLM)
    attention_mask: torch.Tensor  # (B, T)
    original_ids: torch.Tensor  # (B, T) the unmasked tokens (the MLM targets)
    token_type_ids: torch.Tensor | None = None  # (B, T) segment ids for NSP pairs
    masked_positions: torch.Tensor | None = None  # (B, T) bool, MLM
    nsp_labels: torch.Tensor | None = None  # (B,) 0 = B follows A (Hugging Face)

    def to(self, device: str) -> "Batch":
        return Batch(**{k: (v.to(device) if torch.is_tensor(v) else v) for k, v in self.__dict__.items()})


def make_batch(objective: str, stories: list[Story], tokenizer, seed: int) -> Batch:
    """A training batch for ``objective`` from ``stories``.

    clm: one story per row, "[CLS] story [SEP]" (so the first word and the end are predicted too).
    mlm: the same rows, masked by create_mlm_mask.
    mlm+nsp: two rows per story, made by create_nsp_pairs. As in BERT, segment A
    is a span of text (the story's first sentences) and B one sentence: the one
    that comes next (label 0, B follows A), or a sentence of another story of
    the batch (label 1); then masked.
    """
    if objective == "mlm+nsp":
        sentences, doc_ids = [], []
        for k, (a, b) in enumerate(next_sentence_spans(stories, random.Random(seed))):
            sentences += [a, b]
            doc_ids += [k, k]
        longest = (MAX_POSITIONS - 3) // 2  # [CLS] A [SEP] B [SEP] must fit the model
        encoded = [tokenizer(s, add_special_tokens=False)["input_ids"][:longest] for s in sentences]
        pairs = create_nsp_pairs(encoded, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
                                 doc_ids=doc_ids, seed=seed)
        ids, attention_mask, token_type_ids, nsp_labels = (pairs.input_ids, pairs.attention_mask,
                                                           pairs.segment_ids, pairs.labels)
    else:
        encoded = tokenizer([s.text for s in stories], padding=True, truncation=True, max_length=MAX_POSITIONS,
                            return_tensors="pt")
        ids, attention_mask, token_type_ids, nsp_labels = encoded["input_ids"], encoded["attention_mask"], None, None
    if objective == "clm":
        return Batch(ids, attention_mask, ids)
    for attempt in range(100):  # a short batch can end up with nothing selected: draw again
        mask = create_mlm_mask(ids, tokenizer.mask_token_id, len(tokenizer),
                               special_token_ids=tokenizer.all_special_ids,
                               attention_mask=attention_mask, seed=seed + attempt)
        if mask.masked_positions.any():
            break
    return Batch(mask.masked_input_ids, attention_mask, ids, token_type_ids, mask.masked_positions, nsp_labels)


def compute_loss(model, objective: str, batch: Batch):
    """Forward pass, then the loss by lmviz.core.losses. Returns (loss, info)."""
    if objective == "clm":
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, T, V)
        return clm_loss(logits, batch.input_ids, attention_mask=batch.attention_mask)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, token_type_ids=batch.token_type_ids)
    if objective == "mlm":
        return mlm_loss(out.prediction_logits, batch.original_ids, batch.masked_positions)
    return bert_loss(out.prediction_logits, out.seq_relationship_logits, batch.original_ids,
                     batch.masked_positions, batch.nsp_labels)


# The loss each objective adds up, and what each part is measured per.
PART_UNITS = {"next token": "nats per predicted token", "masked LM": "nats per selected token",
              "next sentence": "nats per sentence pair"}


def loss_parts(objective: str, info: dict) -> dict[str, float]:
    """The loss split into what it sums: one part for clm and mlm, masked LM + next
    sentence for mlm+nsp (two different units, each with its own uniform guess)."""
    if objective == "clm":
        return {"next token": info["loss"]}
    if objective == "mlm":
        return {"masked LM": info["loss"]}
    return {"masked LM": info["mlm_info"]["loss"], "next sentence": info["nsp_info"]["loss"]}


@dataclass
class StepRecord:
    step: int
    train: dict[str, float] | None  # loss_parts of this step's batch; None at step 0 (before any training)
    validation: dict[str, float] | None  # loss_parts on the validation stories, measured every few steps
    seconds: float  # since training started
    predictions: list[str] | None = None  # what the model guesses now, every few steps

    @property
    def train_loss(self) -> float | None:
        """The number the optimizer lowers: the sum of the parts."""
        return sum(self.train.values()) if self.train is not None else None

    @property
    def validation_loss(self) -> float | None:
        return sum(self.validation.values()) if self.validation is not None else None


def _top_guesses(tokenizer, logits: torch.Tensor, k: int = 3) -> str:
    probs, ids = torch.softmax(logits.float(), dim=-1).topk(k)
    return ", ".join(f"{tokenizer.decode([i])} {fmt_prob(p)}" for i, p in zip(ids.tolist(), probs.tolist()))


class Trainer:
    """One model, its optimizer and its loss history. A page keeps it in the
    session, so the model belongs to that session alone."""

    def __init__(self, objective: str, preset: str = "tiny", corpus: Corpus | None = None, tokenizer=None,
                 seed: int = 0, batch_size: int = 16, learning_rate: float = 2e-3, device: str = "cpu",
                 num_validation: int = 64):
        if objective not in OBJECTIVES:
            raise ValueError(f"Unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}.")
        if preset not in PRESETS:
            raise ValueError(f"Unknown model size {preset!r}; choose one of {', '.join(PRESETS)}.")
        self.objective, self.preset, self.seed, self.batch_size = objective, preset, seed, batch_size
        self.device = pick_device(device)  # "auto": the GPU when there is one
        self.corpus = corpus or generate_corpus(seed=seed)
        self.tokenizer = tokenizer or corpus_tokenizer(self.corpus)
        torch.manual_seed(seed)
        self.model = build_model(objective, preset, self.tokenizer).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learning_rate, weight_decay=0.01)
        self.step = 0
        self.identity = uuid.uuid4().hex  # with the step, names this model's weights for caches (see LoadedModel)
        self.history: list[StepRecord] = []
        # A step and its record happen under _lock; a run trains only while it is the latest (see stop), which
        # _numbering, never held during a step, counts
        self._lock, self._numbering = threading.Lock(), threading.Lock()
        self._runs = 0
        self.validation = self.corpus.validation[:num_validation]
        # a fixed batch (fixed mask, fixed pairs), so that validation losses are comparable across steps
        self._validation_batch = make_batch(objective, self.validation, self.tokenizer, seed=10**6).to(self.device)

    @functools.cached_property
    def reference_lines(self) -> dict[str, dict[str, float]]:
        """Per loss part, the losses to compare it with (in that part's unit)."""
        vocab_size = len(self.tokenizer)
        end = [self.tokenizer.sep_token] if self.objective == "clm" else []
        tokens = [self.tokenizer.tokenize(s.text) + end for s in self.corpus.train]
        token_lines = {f"uniform guess: ln V = ln {vocab_size}": math.log(vocab_size),
                       UNIGRAM_ENTROPY: unigram_entropy(tokens)}
        if self.objective == "clm":
            # The generator's -log p of these very stories: where the validation curve of a model that
            # has learnt the generator exactly levels off. Only for next-token prediction: a masked LM
            # sees both sides of each gap, and scores below it.
            entropy = entropy_per_token(self.validation)
            if entropy is not None:
                token_lines[VALIDATION_ENTROPY] = entropy
            return {"next token": token_lines}
        lines = {"masked LM": token_lines}
        if self.objective == "mlm+nsp":
            lines["next sentence"] = {"uniform guess: ln 2": math.log(2)}
        return lines

    @property
    def latest_validation(self) -> dict[str, float]:
        """The loss parts of the most recent validation (step 0's before any training)."""
        return next(r.validation for r in reversed(self.history) if r.validation is not None)

    @property
    def latest_predictions(self) -> StepRecord | None:
        """The latest record with the model's guesses on the fixed validation story."""
        return next((r for r in reversed(self.history) if r.predictions), None)

    def train_step(self) -> dict[str, float]:
        self.model.train()
        rng = random.Random(self.seed * 1_000_003 + self.step)
        stories = rng.sample(self.corpus.train, min(self.batch_size, len(self.corpus.train)))
        batch = make_batch(self.objective, stories, self.tokenizer,
                           seed=self.seed * 7919 + self.step).to(self.device)
        loss, info = compute_loss(self.model, self.objective, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.step += 1
        return loss_parts(self.objective, info)

    @torch.no_grad()
    def validation_losses(self) -> dict[str, float]:
        self.model.eval()
        return loss_parts(self.objective, compute_loss(self.model, self.objective, self._validation_batch)[1])

    def _probe(self) -> tuple[str, list[str], int]:
        """A fixed validation story to watch: (CLM prompt, its words, the word index to mask).
        On lmviz's stories: the place, which later sentences give away."""
        story = self.validation[0]
        words = story.text.split()
        first = story.sentences[0].split()
        if story.log_prob is not None:  # generated: "a and b went to the PLACE ."
            return f"{story.sentences[0]} {first[0]} went to the", words, first.index("the") + 1
        return " ".join(words[: len(first) + 3]), words, len(first) // 2

    def as_loaded_model(self) -> LoadedModel:
        """The model as the other pages take one, named for the learner. Its identity changes with
        every step, so that no cache serves the results of its earlier weights."""
        if self.objective == "clm":
            name, source = f"your model from the Train page ({self.step} steps)", "trained in this session"
        else:
            untrained_head = "; its next-sentence head was not trained" if self.objective == "mlm" else ""
            name = "your BERT from the Train page"
            source = f"trained in this session for {self.step} steps{untrained_head}"
        return LoadedModel(self.model, self.tokenizer, name, source, self.device, "float32", 0.0,
                           f"{self.identity}-{self.step}")

    @torch.no_grad()
    def predictions(self) -> list[str]:
        """The model's current guesses on a fixed validation story."""
        self.model.eval()
        tok = self.tokenizer
        prompt, words, masked = self._probe()
        if self.objective == "clm":
            ids = tok(prompt, return_tensors="pt")["input_ids"][:, :-1].to(self.device)  # drop the final [SEP]
            logits = self.model(input_ids=ids).logits[0, -1]
            return [f"{prompt} … → {_top_guesses(tok, logits)}"]
        masked_text = " ".join(words[:masked] + [tok.mask_token] + words[masked + 1:])
        enc = tok(masked_text, truncation=True, max_length=MAX_POSITIONS, return_tensors="pt").to(self.device)
        out = self.model(**enc)
        at = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0]
        lines = [f"{masked_text} → {_top_guesses(tok, out.prediction_logits[0, at])} (true: {words[masked]})"]
        if self.objective == "mlm+nsp":
            story, other = self.validation[0], (self.validation[1:] or self.corpus.train)[0]
            for b, truth in ((story.sentences[1], "follows"), (other.sentences[1], "from another story")):
                pair = tok(story.sentences[0], b, truncation=True, max_length=MAX_POSITIONS, return_tensors="pt")
                p_next = torch.softmax(self.model(**pair.to(self.device)).seq_relationship_logits[0], -1)[0].item()
                lines.append(f"p(B follows A) = {fmt_prob(p_next)} for B = “{b}” ({truth})")
        return lines

    def record_start(self) -> StepRecord:
        """Step 0, the untrained model's validation loss, where every curve starts: recorded once, before
        any step (a page shows it before anyone presses Train)."""
        with self._lock:
            if not self.history:
                self.history.append(StepRecord(0, None, self.validation_losses(), 0.0))
            return self.history[0]

    def stop(self) -> int:
        """End any run of this model in progress, once the step it is computing is recorded; returns the
        number of the next run. A Streamlit page calls it before reading the history: a click starts a new
        script run while the old one may still be inside a step, and that old run would otherwise go on
        training (and recording) until its next Streamlit call."""
        with self._numbering:
            self._runs += 1
            number = self._runs
        with self._lock:  # the step in progress, if any, is recorded; the run that made it makes no other
            return number

    def run(self, steps: int, eval_every: int = 10, predict_every: int = 50):
        """Train ``steps`` more steps, yielding a StepRecord after each (and, the first
        time, one for step 0: the untrained model's validation loss). It ends early, before a
        step, once another run has started or ``stop`` was called."""
        this_run = self.stop()
        if not self.history:
            yield self.record_start()
        start = time.perf_counter() - self.history[-1].seconds
        last = self.step + steps
        for _ in range(steps):
            with self._lock:
                if self._runs != this_run:
                    return
                train = self.train_step()
                done = self.step == last
                validation = self.validation_losses() if self.step % eval_every == 0 or done else None
                predictions = self.predictions() if self.step % predict_every == 0 or done else None
                record = StepRecord(self.step, train, validation, time.perf_counter() - start, predictions)
                self.history.append(record)
            yield record  # outside the lock: the caller draws while another run may stop this one


@torch.no_grad()
def evaluate(model, objective: str, tokenizer, stories: list[Story], seed: int = 0, batch_size: int = 32) -> dict:
    """Loss and accuracies over ``stories``, batch by batch (token-weighted for
    the token losses, pair-weighted for NSP)."""
    model.eval()
    device = next(model.parameters()).device
    totals = {"tokens": 0, "token_nll": 0.0, "token_correct": 0, "pairs": 0, "nsp_nll": 0.0, "nsp_correct": 0}
    for start in range(0, len(stories), batch_size):
        batch = make_batch(objective, stories[start:start + batch_size], tokenizer, seed=seed + start).to(device)
        _, info = compute_loss(model, objective, batch)
        token_info = info if objective != "mlm+nsp" else info["mlm_info"]
        counted = token_info["counted"]
        totals["tokens"] += int(counted.sum())
        totals["token_nll"] += float(token_info["nll"][counted].sum())
        totals["token_correct"] += int(((token_info["predictions"] == token_info["target_ids"]) & counted).sum())
        if objective == "mlm+nsp":
            nsp = info["nsp_info"]
            totals["pairs"] += len(nsp["nll"])
            totals["nsp_nll"] += float(nsp["nll"].sum())
            totals["nsp_correct"] += int((nsp["predictions"] == batch.nsp_labels).sum())
    result = {"token_loss": totals["token_nll"] / totals["tokens"],
              "token_accuracy": totals["token_correct"] / totals["tokens"], "tokens": totals["tokens"]}
    if totals["pairs"]:
        result.update(nsp_loss=totals["nsp_nll"] / totals["pairs"],
                      nsp_accuracy=totals["nsp_correct"] / totals["pairs"],
                      pairs=totals["pairs"])
    return result
