"""Text + BERT -> the numbers of the masked-LM, next-sentence and BERT-loss pages and CLI.

Every loss is computed twice: by lmviz (create_mlm_mask, mlm_loss, nsp_loss,
bert_loss) and by the Hugging Face model's own ``loss`` on the same inputs,
so each page can show both side by side.
"""

from __future__ import annotations

import functools
import json
import random
import time
import unicodedata
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from lmviz.core.corpus import Story, generate_corpus, next_sentence_spans, vocabulary
from lmviz.core.labels import IGNORE_INDEX, IS_NEXT_HF, Branch
from lmviz.core.losses import bert_loss, mlm_loss, nsp_loss
from lmviz.core.masking import MlmMask, create_mlm_mask, replacement_pool
from lmviz.core.text import readable_token, valid_text
from lmviz.errors import LearnerError, NothingToScore
from lmviz.models.loading import ASSETS, BERT_HUB_ID, TINY_BERT
from lmviz.models.pretrained import model_build_lock

MAX_PAIR_TOKENS = 128  # long enough for two sentences, short enough to stay quick on a CPU
# A word cut into this many pieces or more is being spelled out, not read: "lmviz" -> l ##m ##v ##i ##z.
# (bert-base-uncased cuts a rare word into two real pieces, "token ##ization": that word it knows.)
SPELLED_PIECES = 3


class NothingSelected(NothingToScore):
    """The random selection picked no position (min_selected=1 masks one); the message says why."""


class NotMaskable(LearnerError, ValueError):
    """A position that cannot be masked: a special token, or past the end of the text; one sentence."""


@dataclass(frozen=True)
class UnknownWords:
    """How much of a text a BERT's vocabulary knows as words (see unknown_words)."""

    words: list[str]  # the words it does not know, each once, in the order of the text
    num_unknown: int  # how many of the text's words those are, repeats included
    num_words: int  # the text's words, punctuation left out

    @property
    def most(self) -> bool:
        """More than half of the words are unknown: then no loss on this text says much about the model."""
        return 2 * self.num_unknown > self.num_words


def word_pieces(tokenizer, text: str) -> list[tuple[str, list[str]]]:
    """Each word of ``text`` as the tokenizer cuts it up: (the word as typed, its pieces).
    A word is what the tokenizer's own pre-tokenizer makes one ("Paris." is "Paris" and "."). Only the
    first MAX_PAIR_TOKENS tokens count, as on the pages, which score no more."""
    text = valid_text(text)
    if not getattr(tokenizer, "is_fast", False):  # no word ids without the Rust tokenizer: words between spaces
        return [(word, tokenizer.tokenize(word)) for word in text.split()]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=True,
                    max_length=MAX_PAIR_TOKENS)
    pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    words: dict[int, tuple[int, int, list[str]]] = {}
    for word, (start, end), piece in zip(enc.word_ids(), enc["offset_mapping"], pieces):
        first, _, so_far = words.get(word, (start, end, []))
        words[word] = (first, end, so_far + [piece])
    return [(text[start:end], parts) for start, end, parts in words.values()]


def is_unknown_word(pieces: list[str], unk_token: str) -> bool:
    """A word the vocabulary does not know: it becomes [UNK], or it is spelled out, cut into
    SPELLED_PIECES pieces or more, or into pieces of one character each ("of" -> o ##f).
    A word in one piece is known; so is one in two real pieces ("rewrite ##s", "token ##ization")."""
    if unk_token in pieces:
        return True
    letters = [piece.removeprefix("##") for piece in pieces]  # "##" marks a WordPiece continuation
    return len(pieces) >= SPELLED_PIECES or (len(pieces) > 1 and all(len(p) == 1 for p in letters))


def _is_punctuation(word: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in word)


def unknown_words(tokenizer, *texts: str) -> UnknownWords:
    """The words of ``texts`` that the tokenizer does not know (is_unknown_word), and how many words
    there are. Punctuation is not counted: every vocabulary knows "." and it would hide the rest."""
    words = [(w, p) for text in texts if text and text.strip() for w, p in word_pieces(tokenizer, text)
             if not _is_punctuation(w)]
    unknown = [w for w, pieces in words if is_unknown_word(pieces, tokenizer.unk_token)]
    return UnknownWords(list(dict.fromkeys(unknown)), len(unknown), len(words))


@dataclass
class MlmRow:
    position: int
    token: str  # the original token
    token_id: int
    branch: Branch  # what happened here: not selected, [MASK], random token or kept
    shown: str  # what the model reads at this position
    label: int  # the original id where selected, -100 elsewhere
    prob: float | None  # p(original token) where selected
    nll: float | None
    top_k: list  # [(token, prob), ...] where selected


@dataclass
class MlmAnalysis:
    model: str
    rows: list[MlmRow]
    loss: float  # lmviz: mlm_loss over the selected positions
    loss_model: float  # the model's own masked-LM loss on the same masked input and labels
    num_selected: int
    num_eligible: int  # tokens that could be selected (not special)
    unknown_tokens: list[str]  # words the tokenizer turned into [UNK]
    forward_seconds: float
    tokenizer_size: int  # len(tokenizer): the ids Hugging Face's collator draws a random token from
    replacement_pool_size: int  # the ids lmviz draws a random token from: the vocabulary less the special tokens

    def to_dict(self) -> dict:
        return _with_branch_words(asdict(self))


def _with_branch_words(data: dict) -> dict:
    """An analysis as the CLI's JSON writes it: each row's branch in words, as the pages show it."""
    for row in data["rows"]:
        row["branch"] = Branch(row["branch"]).words
    return data


def _heads(model):
    """Hugging Face's single-head BERT classes, sharing the weights of ``model``
    (a BertForPreTraining): their ``loss`` is the model's own code for that head."""
    from transformers import BertForMaskedLM, BertForNextSentencePrediction

    with model_build_lock, torch.device("meta"):  # built empty, then given the real modules: no copy, no random init
        mlm, nsp = BertForMaskedLM(model.config), BertForNextSentencePrediction(model.config)
    mlm.bert, mlm.cls.predictions = model.bert, model.cls.predictions
    nsp.bert, nsp.cls.seq_relationship = model.bert, model.cls.seq_relationship
    return mlm.eval(), nsp.eval()


def _encode(tokenizer, text: str, pair: str | None = None) -> dict:
    return tokenizer(valid_text(text), valid_text(pair) if pair is not None else None, truncation=True,
                     max_length=MAX_PAIR_TOKENS, return_token_type_ids=True, return_tensors="pt")


def _unknown(tokenizer, ids: list[int], text: str) -> list[str]:
    if tokenizer.unk_token_id not in ids:
        return []
    words = text.split()
    return [w for w in words if tokenizer.unk_token_id in tokenizer(w, add_special_tokens=False)["input_ids"]]


def _top_k(tokenizer, logits: torch.Tensor, k: int) -> list:
    probs, ids = torch.softmax(logits.float(), dim=-1).topk(k)
    return [(readable_token(tokenizer, i), p) for i, p in zip(ids.tolist(), probs.tolist())]


def _masked_pair(loaded, text: str, pair: str | None, seed: int, mask_prob: float, random_replace_prob: float,
                 keep_original_prob: float, min_selected: int):
    """Tokenize and mask; (encoding, MlmMask, number of maskable tokens). Raises NothingToScore."""
    if not text or not text.strip():
        raise NothingToScore("There is nothing to mask: the text is empty. Type a sentence.")
    tokenizer = loaded.tokenizer
    enc = _encode(tokenizer, text, pair)
    ids = enc["input_ids"]  # (1, T)
    specials = tokenizer.all_special_ids
    num_eligible = int((~torch.isin(ids, torch.tensor(specials))).sum())
    if num_eligible == 0:
        raise NothingToScore("There is nothing to mask: the text has no token besides BERT's special tokens.")
    mask = create_mlm_mask(ids, tokenizer.mask_token_id, loaded.model.config.vocab_size, mask_prob,
                           random_replace_prob, keep_original_prob, special_token_ids=specials, seed=seed,
                           min_selected=min_selected)
    if not mask.masked_positions.any():
        raise NothingSelected(
            f"No position was selected: {mask_prob:.0%} of {num_eligible} tokens is less than one on average, "
            "and this seed picked none. Mask one position, change the seed, or raise the rate.")
    return enc, mask, num_eligible


def _model_inputs(enc: dict, mask, device: str) -> dict:
    return {"input_ids": mask.masked_input_ids.to(device), "attention_mask": enc["attention_mask"].to(device),
            "token_type_ids": enc["token_type_ids"].to(device)}


def _mlm_rows(tokenizer, ids: torch.Tensor, mask, info: dict, logits: torch.Tensor, top_k: int) -> list[MlmRow]:
    rows = []
    for t, token_id in enumerate(ids[0].tolist()):
        selected = bool(mask.masked_positions[0, t])
        rows.append(MlmRow(
            position=t, token=readable_token(tokenizer, token_id), token_id=token_id,
            branch=Branch(int(mask.branch[0, t])),
            shown=readable_token(tokenizer, int(mask.masked_input_ids[0, t])), label=int(mask.labels[0, t]),
            prob=float(info["target_probs"][0, t]) if selected else None,
            nll=float(info["nll"][0, t]) if selected else None,
            top_k=_top_k(tokenizer, logits[0, t], top_k) if selected else [],
        ))
    return rows


def analyse_mlm(loaded, text: str, seed: int = 0, mask_prob: float = 0.15, random_replace_prob: float = 0.1,
                keep_original_prob: float = 0.1, top_k: int = 5, min_selected: int = 0) -> MlmAnalysis:
    """Mask ``text`` BERT's way and score the model's guesses at the selected positions.

    Raises NothingToScore when there is nothing to mask, or nothing was
    selected (then ``min_selected=1`` masks one position).
    """
    enc, mask, num_eligible = _masked_pair(loaded, text, None, seed, mask_prob, random_replace_prob,
                                           keep_original_prob, min_selected)
    return _score_mlm(loaded, text, enc, mask, num_eligible, top_k)


def maskable_positions(tokenizer, text: str) -> dict[int, str]:
    """{position: token} of the tokens of ``text`` that can be masked: all but BERT's special tokens."""
    ids = _encode(tokenizer, text)["input_ids"][0].tolist()
    return {t: readable_token(tokenizer, i) for t, i in enumerate(ids) if i not in tokenizer.all_special_ids}


def analyse_mlm_at(loaded, text: str, positions, top_k: int = 5) -> MlmAnalysis:
    """The fill-in-the-blank demo: [MASK] at exactly ``positions`` (indices into the tokens, [CLS] = 0),
    and the masked-LM loss over those positions only. Raises NotMaskable for a special token or a
    position past the end, NothingToScore when no position is given."""
    if not text or not text.strip():
        raise NothingToScore("There is nothing to mask: the text is empty. Type a sentence.")
    tokenizer = loaded.tokenizer
    maskable = maskable_positions(tokenizer, text)
    if not maskable:
        raise NothingToScore("There is nothing to mask: the text has no token besides BERT's special tokens.")
    positions = sorted(set(int(t) for t in positions))
    if not positions:
        raise NothingToScore("No position is chosen: choose one or more tokens to mask.")
    for t in positions:
        if t not in maskable:
            raise NotMaskable(f"Position {t} cannot be masked: choose among the text's tokens, positions "
                              f"{min(maskable)} to {max(maskable)} (BERT never masks its special tokens).")
    enc = _encode(tokenizer, text)
    return _score_mlm(loaded, text, enc, mask_positions(enc["input_ids"], positions, tokenizer.mask_token_id),
                      len(maskable), top_k)


def mask_positions(ids: torch.Tensor, positions: list[int], mask_token_id: int) -> MlmMask:
    """The MlmMask create_mlm_mask would return had it selected ``positions`` and drawn [MASK] at each."""
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    chosen[0, positions] = True
    return MlmMask(masked_input_ids=ids.masked_fill(chosen, mask_token_id), masked_positions=chosen,
                   branch=chosen.long() * int(Branch.MASKED), labels=ids.masked_fill(~chosen, IGNORE_INDEX))


def _score_mlm(loaded, text: str, enc: dict, mask: MlmMask, num_eligible: int, top_k: int) -> MlmAnalysis:
    """One forward pass of the masked text: lmviz's mlm_loss and BertForMaskedLM's own loss, row by row."""
    ids = enc["input_ids"]
    mlm_head, _ = _heads(loaded.model)
    with torch.inference_mode():
        start = time.perf_counter()
        out = mlm_head(**_model_inputs(enc, mask, loaded.device), labels=mask.labels.to(loaded.device))
        seconds = time.perf_counter() - start
        loss, info = mlm_loss(out.logits, ids.to(loaded.device), mask.masked_positions.to(loaded.device))
    tokenizer = loaded.tokenizer
    rows = _mlm_rows(tokenizer, ids, mask, info, out.logits, top_k)
    pool = replacement_pool(loaded.model.config.vocab_size, tokenizer.mask_token_id, tokenizer.all_special_ids)
    return MlmAnalysis(loaded.name, rows, loss.item(), out.loss.item(), int(mask.masked_positions.sum()), num_eligible,
                       _unknown(tokenizer, ids[0].tolist(), text), seconds, len(tokenizer), len(pool))


@dataclass
class NspAnalysis:
    model: str
    tokens: list[str]  # [CLS] A [SEP] B [SEP]
    segment_ids: list[int]
    label: int  # Hugging Face's convention: 0 = B follows A, 1 = B is from elsewhere
    logits: list[float]  # the head's two scores: [is next, is not next]
    probs: list[float]  # their softmax
    loss_two_logits: float  # lmviz nsp_loss on the two logits (cross-entropy)
    loss_one_logit: float  # lmviz nsp_loss on one logit, logit[1] - logit[0] (binary cross-entropy)
    loss_model: float  # BertForNextSentencePrediction's own loss
    loss_torch: float  # F.cross_entropy, the independent reference

    def to_dict(self) -> dict:
        return asdict(self)


def analyse_nsp(loaded, sentence_a: str, sentence_b: str, b_follows_a: bool = True) -> NspAnalysis:
    """Score the pair [CLS] A [SEP] B [SEP] with BERT's next-sentence head."""
    if not sentence_a.strip() or not sentence_b.strip():
        raise NothingToScore("Next-sentence prediction needs two sentences: type both A and B.")
    model, tokenizer = loaded.model, loaded.tokenizer
    enc = {k: v.to(loaded.device) for k, v in _encode(tokenizer, sentence_a, sentence_b).items()}
    label = torch.tensor([IS_NEXT_HF if b_follows_a else 1 - IS_NEXT_HF], device=loaded.device)
    _, nsp_head = _heads(model)
    with torch.inference_mode():
        out = nsp_head(**enc, labels=label)
        logits = out.logits  # (1, 2)
        two, info = nsp_loss(logits, label)
        one, _ = nsp_loss(logits[:, 1:] - logits[:, :1], label)
        reference = F.cross_entropy(logits.float(), label)
    ids = enc["input_ids"][0].tolist()
    return NspAnalysis(loaded.name, [readable_token(tokenizer, i) for i in ids], enc["token_type_ids"][0].tolist(),
                       int(label), logits[0].float().tolist(), info["probs"][0].tolist(), two.item(), one.item(),
                       out.loss.item(), reference.item())


@dataclass
class BertLossAnalysis:
    model: str
    rows: list[MlmRow]  # the masked pair, position by position
    segment_ids: list[int]
    label: int  # next_sentence_label, Hugging Face's convention (0 = B follows A)
    p_is_next: float  # the NSP head's probability that B follows A, on the masked pair
    mlm_loss: float
    nsp_loss: float
    mlm_weight: float
    nsp_weight: float
    total: float  # lmviz bert_loss: mlm_weight * mlm_loss + nsp_weight * nsp_loss
    total_model: float  # BertForPreTraining's own loss (both weights 1)

    def to_dict(self) -> dict:
        return _with_branch_words(asdict(self))


def analyse_bert_loss(loaded, sentence_a: str, sentence_b: str, b_follows_a: bool = True, seed: int = 0,
                      mlm_weight: float = 1.0, nsp_weight: float = 1.0) -> BertLossAnalysis:
    """BERT's pre-training loss on one pair: one forward pass of the *masked*
    pair gives both heads' logits, as in pre-training."""
    if not sentence_b or not sentence_b.strip():
        raise NothingToScore("BERT's pre-training loss needs two sentences: type both A and B.")
    enc, mask, _ = _masked_pair(loaded, sentence_a, sentence_b, seed, 0.15, 0.1, 0.1, min_selected=1)
    ids, device = enc["input_ids"], loaded.device
    label = torch.tensor([IS_NEXT_HF if b_follows_a else 1 - IS_NEXT_HF], device=device)
    with torch.inference_mode():
        out = loaded.model(**_model_inputs(enc, mask, device), labels=mask.labels.to(device), next_sentence_label=label)
        total, info = bert_loss(out.prediction_logits, out.seq_relationship_logits, ids.to(device),
                                mask.masked_positions.to(device), label, mlm_weight=mlm_weight, nsp_weight=nsp_weight)
    return BertLossAnalysis(
        loaded.name, _mlm_rows(loaded.tokenizer, ids, mask, info["mlm_info"], out.prediction_logits, 1),
        enc["token_type_ids"][0].tolist(), int(label), float(info["nsp_info"]["p_is_next"][0]),
        info["mlm_info"]["loss"], info["nsp_info"]["loss"], mlm_weight, nsp_weight, total.item(), out.loss.item())


@functools.cache
def held_out_stories() -> list[Story]:
    """The stories the Next-sentence page draws its pairs from: the first validation stories of the corpus
    scripts.pretrain_tiny trains the tiny BERT on (seed 0), a random stream it never trained on."""
    return generate_corpus(num_train=0, num_validation=100, seed=0).validation


def draw_nsp_pair(follows: bool, draw: int) -> tuple[str, str]:
    """Draw number ``draw`` of the Next-sentence page's buttons: two held-out stories, and the first pair that
    lmviz.lessons.training.make_batch makes of them with seed ``draw``, as it made the tiny BERT's training
    pairs: A the first story's first sentences (next_sentence_spans), and B the sentence after them or, when
    not ``follows``, the other story's B (create_nsp_pairs takes a not-next B from the B places of the batch's
    other stories). The same ``draw`` always gives the same pair."""
    story, other = random.Random(f"nsp-draw-{draw}").sample(held_out_stories(), 2)  # not the spans' own stream
    (a, b), (_, elsewhere) = next_sentence_spans([story, other], random.Random(draw))
    return a, b if follows else elsewhere


def tiny_bert_nsp_accuracy() -> dict:
    """How often the tiny BERT's next-sentence head is right, as benchmarks/nsp_accuracy.py measured it and
    recorded it in assets/tiny-models.json: per way of drawing pairs ("as_in_training", draw_nsp_pair's, and
    "one_sentence_a", A one sentence), the share right where B follows A ("is_next") and where it does not
    ("not_next"); with the pairs per label, the first draw and the command."""
    models = json.loads((ASSETS / "tiny-models.json").read_text())["models"]
    return next(m for m in models if m["objective"] == "mlm+nsp")["page_pairs"]


def percent(share: float) -> str:
    return f"{100 * share:.1f} %"


# The BERT pages' notes on what their model can do: one line for the pinned panel, and the rest for below
# it (the panel stays short enough to leave a 720-pixel projector's screen to the page).

def panel_note(loaded, check: UnknownWords, next_sentence: bool = False) -> str | None:
    """The panel's one line: that the model does not know most of the text's words (check: unknown_words),
    else, on the tiny BERT, what it knows (on the Next-sentence page, ``next_sentence``, how often it is
    right); None for another BERT on words it knows."""
    if check.most:
        return (f"{loaded.name} does not know {check.num_unknown} of these {check.num_words} words: "
                "these numbers say little (below).")
    if loaded.name != TINY_BERT:
        return None
    if next_sentence:
        right = tiny_bert_nsp_accuracy()["as_in_training"]
        return (f"{loaded.name}, on pairs drawn as trained: right {percent(right['is_next'])} if B follows A, "
                f"{percent(right['not_next'])} if not (below).")
    return (f"{loaded.name} knows only lmviz's stories (a vocabulary of {len(loaded.tokenizer):,}): other words "
            "are spelled out (below).")


def english_bert_advice(offered: bool) -> str:
    """Where to get a BERT that knows English, for a page on one that does not. ``offered``: whether the pages' Model
    list has it here now. If not, downloading it is no step for a class, which is often offline, but one a teacher
    takes before class, while online (docs/teachers/offline.md), after which it loads with no internet."""
    if offered:
        return f"For English, choose {BERT_HUB_ID} under Model."
    return (f"For English, {BERT_HUB_ID}, which Model does not offer here now: a teacher adds it to the machine that "
            "serves lmviz before class, while online, with python -m lmviz prepare (lmviz's guide for teachers, “An "
            "offline classroom”), and Model then offers it, with no internet.")


def tiny_bert_about(loaded, english_offered: bool) -> str | None:
    """Below the panel, on the tiny BERT: what it knows, what becomes of other words, and where to get a BERT that
    knows English (``english_offered``: see english_bert_advice). None for another BERT."""
    if loaded.name != TINY_BERT:
        return None
    pieces = " ".join(loaded.tokenizer.tokenize("Paris"))
    words = len(set(vocabulary()) & set(loaded.tokenizer.get_vocab()))
    return (f"{loaded.name} was trained on lmviz's generated stories only. Its vocabulary of "
            f"{len(loaded.tokenizer):,} is their {words} words, letters and BERT's special entries: any other word "
            f"is spelled out (“Paris” becomes {pieces}), and a loss over letters says little. "
            + english_bert_advice(english_offered))


def tiny_bert_nsp_about(loaded) -> str | None:
    """Below the Next-sentence page's panel, on the tiny BERT: how often it is right on the pairs the buttons
    draw, and on pairs with one sentence as A; the measurement's size and command. None for another BERT."""
    if loaded.name != TINY_BERT:
        return None
    measured = tiny_bert_nsp_accuracy()
    span, one = measured["as_in_training"], measured["one_sentence_a"]
    return (f"How often {loaded.name} is right, on {measured['pairs_per_label']:,} pairs of each kind drawn by "
            f"the buttons above: {percent(span['is_next'])} when B follows A, {percent(span['not_next'])} when B "
            f"is from another story (measured by {measured['command']}). Its training pairs were drawn that way: "
            "A a span, a story's first sentences, which name its two characters and its place, and B one "
            "sentence. With one sentence of a story as A instead, it is right on only "
            f"{percent(one['is_next'])} of true pairs and {percent(one['not_next'])} of the others: a sentence "
            "such as “they felt happy .” says little about whose story it is.")
