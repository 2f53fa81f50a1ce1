"""Sentences in a batch: padding, labels, and the means that training takes.

A real training step scores several sentences at once. They have different
lengths, so the short ones are padded, and the loss is then a choice of mean:
Hugging Face's causal-LM loss is the mean over every counted token of the
batch (long sentences weigh more), not the mean of each sentence's mean.
Gradient accumulation splits the batch into micro-batches and must keep that
token-weighted mean: it sums the micro-batches' -log p and divides by the
number of counted tokens in the whole batch (``num_items_in_batch``).

Packing puts the same sentences in one row instead, with no padding at all, and
is correct only with a document mask: attention within each document, position
ids that restart, and no label at a document's first token.

Shapes: B sentences, T positions after padding, V the vocabulary; L the
packed row's length (every sentence's tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import transformers

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.losses import clm_loss
from lmviz.core.text import encode, end_token_id, pad_right
from lmviz.errors import NothingToScore

MAX_BATCH_SENTENCES = 8
MAX_TOKENS_PER_SENTENCE = 64
def encode_sentences(tokenizer, lines: list[str], max_tokens: int = MAX_TOKENS_PER_SENTENCE) -> list[list[int]]:
    """Token ids of each non-empty line, as a pre-training document: the start
    token, the words, then the end token (``end_token_id``: the document
    separator where the vocabulary has one, so the model learns where text ends).
    Raises NothingToScore unless there are two to MAX_BATCH_SENTENCES sentences of at most
    ``max_tokens`` tokens each (a cut sentence would get an EOS it does not have)."""
    sentences = [line.strip() for line in lines if line.strip()]
    if len(sentences) < 2:
        found = "no sentence" if not sentences else "only one sentence"
        raise NothingToScore(f"A batch needs at least two sentences, one per line; there is {found}.")
    if len(sentences) > MAX_BATCH_SENTENCES:
        raise NothingToScore(f"Type at most {MAX_BATCH_SENTENCES} sentences; there are {len(sentences)}.")
    end = end_token_id(tokenizer)
    sequences = []
    for number, sentence in enumerate(sentences, 1):
        ids, cut_from = encode(tokenizer, sentence, add_bos=True, max_tokens=max_tokens)
        if cut_from is not None:
            raise NothingToScore(f"Sentence {number} has {cut_from} tokens; this page takes at most {max_tokens} "
                                 "per sentence. Shorten it, or put its parts on lines of their own.")
        sequences.append(ids + ([end] if end is not None else []))
    return sequences


def reorderings(sentences: list[str]) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, where sentence j has exactly the words of sentence i
    (ignoring case and punctuation) in another order."""
    words = [re.findall(r"\w+", s.lower()) for s in sentences]
    return [(i, j) for i in range(len(words)) for j in range(i + 1, len(words))
            if words[i] and words[i] != words[j] and sorted(words[i]) == sorted(words[j])]


def pad_batch(sequences: list[list[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id lists to one width. Returns input_ids (B, T) and
    attention_mask (B, T): 1 on real tokens, 0 on pads."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left'; got {side!r}.")
    if not sequences or not all(sequences):
        raise ValueError("Give at least one sentence, and no empty ones.")
    rows, masks = pad_right(sequences, pad_id)
    if side == "left":  # the same pads, moved in front: each row's real tokens end at the last position
        rows = [row[len(ids):] + row[:len(ids)] for row, ids in zip(rows, sequences)]
        masks = [mask[len(ids):] + mask[:len(ids)] for mask, ids in zip(masks, sequences)]
    return torch.tensor(rows), torch.tensor(masks)


def labels_for(input_ids: torch.Tensor, attention_mask: torch.Tensor, ignore_index: int = IGNORE_INDEX,
               mask_by: str = "attention", pad_id: int | None = None) -> torch.Tensor:
    """Labels (B, T) for a causal LM: the inputs themselves (the model shifts
    them), with ``ignore_index`` where a pad stands.

    mask_by="attention" finds the pads by the attention mask (correct).
    mask_by="pad_id" finds them as every token equal to ``pad_id``, as a
    collator that only sees ids does. When the pad token is also the EOS
    token, that masks the sentences' real EOS too: the model is never
    taught to end a text.
    """
    if mask_by == "attention":
        is_pad = attention_mask == 0
    elif mask_by == "pad_id":
        if pad_id is None:
            raise ValueError("mask_by='pad_id' needs the pad_id.")
        is_pad = input_ids == pad_id
    else:
        raise ValueError(f"mask_by must be 'attention' or 'pad_id'; got {mask_by!r}.")
    return input_ids.masked_fill(is_pad, ignore_index)


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) positions counted from each sentence's first real token. Left
    padding would otherwise move every word along by the number of pads, and
    a model with position embeddings would read a different input."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, **loss_kwargs):
    """The model's output (logits (B, T, V) and its own loss) for a padded batch."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        return model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                     position_ids=position_ids_for(attention_mask).to(device), labels=labels.to(device),
                     **loss_kwargs)


def count_items(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> int:
    """How many predictions a causal LM's loss counts: labels from the second
    position on (the model shifts them) that are not ignored. This is the
    ``num_items_in_batch`` Hugging Face's Trainer passes to the loss."""
    return int((labels[:, 1:] != ignore_index).sum())


@dataclass
class BatchLosses:
    model_loss: float  # the model's own out.loss for the whole batch
    nll: torch.Tensor  # (B, T) -log p(label at t+1) at each position t; 0 where nothing counts
    counted: torch.Tensor  # (B, T) bool: the predictions out.loss averages over
    from_padding: torch.Tensor  # (B, T) bool: counted predictions made at a pad (left padding's last pad)
    sentence_losses: list[float]  # each sentence's mean over its counted predictions
    sentence_counts: list[int]
    token_weighted_mean: float  # all -log p summed / all counted: equals model_loss
    mean_of_means: float  # mean of sentence_losses: what you get averaging sentences, not tokens


def batch_losses(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> BatchLosses:
    """Score a padded batch the way the model's own loss does.

    Hugging Face shifts the labels and counts every position whose next label
    is not -100; it never looks at the attention mask. With right padding that
    is exactly the real predictions. With left padding the last pad position
    "predicts" the sentence's first real token, and that prediction counts.
    """
    out = _forward(model, input_ids, attention_mask, labels)
    device = out.logits.device
    _, info = clm_loss(out.logits, input_ids.to(device), labels=labels.to(device))  # no attention mask: as the model
    nll, counted = info["nll"].cpu(), info["counted"].cpu()  # (B, T)
    counts = counted.sum(-1)  # (B,)
    if bool((counts == 0).any()):
        raise NothingToScore("Every sentence needs at least one token to predict.")
    sentence_losses = (nll.sum(-1) / counts).tolist()
    return BatchLosses(
        model_loss=out.loss.item(), nll=nll, counted=counted, from_padding=counted & (attention_mask == 0),
        sentence_losses=sentence_losses, sentence_counts=counts.tolist(),
        token_weighted_mean=(nll.sum() / counted.sum()).item(),
        mean_of_means=sum(sentence_losses) / len(sentence_losses),
    )


def nll_under_labels(result: BatchLosses) -> list[list[float | None]]:
    """(B, T) the -log p that the loss counts, each written under the label it scores: the prediction made at
    t - 1 scores the label at t. None where no counted prediction scores the label: position 0, which nothing
    predicts, and every label the loss ignores."""
    return [[None if t == 0 or not counted[t - 1] else nll[t - 1] for t in range(len(nll))]
            for nll, counted in zip(result.nll.tolist(), result.counted.tolist())]


@dataclass
class Accumulation:
    micro_batches: list[list[int]]  # the sentence indices in each micro-batch
    micro_counts: list[int]  # counted predictions in each
    micro_means: list[float]  # each micro-batch's own mean loss (out.loss)
    micro_shares: list[float]  # each one's out.loss with num_items_in_batch = the whole batch's count
    averaged: float  # (a) mean of micro_means: each step's loss divided by the number of steps
    summed: float  # (b) sum of micro_shares = all -log p / all counted: the full batch's loss


def gradient_accumulation(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                          micro_batch_size: int) -> Accumulation:
    """The batch split into micro-batches of ``micro_batch_size`` sentences,
    their losses combined the two ways a training loop can."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1; got {micro_batch_size}.")
    num_items = count_items(labels)  # counted over the WHOLE batch, before splitting
    parts = [list(range(s, min(s + micro_batch_size, len(input_ids))))
             for s in range(0, len(input_ids), micro_batch_size)]
    counts, means, shares = [], [], []
    for part in parts:
        # as Hugging Face's Trainer does: the model divides this micro-batch's summed -log p by num_items
        out = _forward(model, input_ids[part], attention_mask[part], labels[part], num_items_in_batch=num_items)
        shares.append(out.loss.item())
        # the same logits, the model's loss function without num_items_in_batch: this micro-batch's own mean
        means.append(model.loss_function(logits=out.logits, labels=labels[part].to(out.logits.device),
                                         vocab_size=out.logits.shape[-1]).item())
        counts.append(count_items(labels[part]))
    return Accumulation(micro_batches=parts, micro_counts=counts, micro_means=means, micro_shares=shares,
                        averaged=sum(means) / len(means), summed=sum(shares))


# Packing: the sentences in one row, three ways (transformers' DataCollatorWithFlattening makes the third's inputs)
NAIVE, POSITIONS_ONLY, DOCUMENT_MASK = "naive", "position ids only", "document mask"
PACKINGS = (NAIVE, POSITIONS_ONLY, DOCUMENT_MASK)
# the version whose masking rule packed_losses relies on (and tests/lessons/test_batches.py checks): the page says it
TRANSFORMERS_VERSION = transformers.__version__


@dataclass
class Packed:
    """One row of packed sentences, and what one way of packing gives the model."""

    way: str
    input_ids: list[int]  # (L,) every sentence's ids, one after another
    position_ids: list[int]  # (L,) 0..L-1 (naive), or restarting at 0 at each sentence
    labels: list[int]  # (L,) the inputs, with IGNORE_INDEX at each sentence's first token unless naive
    documents: list[int]  # (L,) which sentence each token is from
    nll: list[float | None]  # (L,) -log p of the label at each position, from the prediction before it; None if
    # nothing scores it
    loss: float  # the model's own out.loss on the row
    counted: int  # the predictions it averages


def pack(sequences: list[list[int]], way: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """(input_ids, position_ids, labels, documents) of the sentences in one row. Naive packing concatenates them
    and scores every next token, the next sentence's first one included (predicted from the end of the one
    before); the other two restart the positions and ignore each sentence's first token, as
    DataCollatorWithFlattening does."""
    if way not in PACKINGS:
        raise ValueError(f"way must be one of {PACKINGS}; got {way!r}.")
    ids = [i for sequence in sequences for i in sequence]
    documents = [d for d, sequence in enumerate(sequences) for _ in sequence]
    if way == NAIVE:
        return ids, list(range(len(ids))), list(ids), documents
    positions = [t for sequence in sequences for t in range(len(sequence))]
    labels = [IGNORE_INDEX if t == 0 else i for i, t in zip(ids, positions)]
    return ids, positions, labels, documents


def packed_losses(model, sequences: list[list[int]], way: str) -> Packed:
    """Score the packed row as a trainer would, each way.

    The document mask is the one transformers builds itself from position ids that restart, which it does only
    when it is given no attention mask and no cache (``masking_utils._preprocess_mask_arguments``, transformers
    5.24): so this forward passes neither, and ``use_cache=False``, since a causal LM otherwise makes a cache of
    its own. "position ids only" passes a mask of ones, the way a collator that pads would, which silently turns
    the document mask off: each sentence then attends to the ones before it."""
    ids, positions, labels, documents = pack(sequences, way)
    device = next(model.parameters()).device
    as_row = {"input_ids": torch.tensor([ids], device=device), "labels": torch.tensor([labels], device=device),
              "position_ids": torch.tensor([positions], device=device), "use_cache": False}
    if way == POSITIONS_ONLY:
        as_row["attention_mask"] = torch.ones_like(as_row["input_ids"])
    with torch.inference_mode():
        out = model(**as_row)
    _, info = clm_loss(out.logits, as_row["input_ids"], labels=as_row["labels"])
    nll, counted = info["nll"][0].tolist(), info["counted"][0].tolist()
    under = [None if t == 0 or not counted[t - 1] else nll[t - 1] for t in range(len(ids))]
    return Packed(way=way, input_ids=ids, position_ids=positions, labels=labels, documents=documents, nll=under,
                  loss=out.loss.item(), counted=int(sum(counted)))


@dataclass
class Slots:
    """Where the tokens of a batch go: the padded batch's B × T slots against one packed row's L."""

    tokens: int  # Σ of the sentences' lengths
    padded: int  # B × T
    padding: int  # padded − tokens: slots the model computes and the loss ignores
    packed: int  # L = tokens


def slots(sequences: list[list[int]]) -> Slots:
    tokens = sum(map(len, sequences))
    padded = len(sequences) * max(map(len, sequences))
    return Slots(tokens=tokens, padded=padded, padding=padded - tokens, packed=tokens)
