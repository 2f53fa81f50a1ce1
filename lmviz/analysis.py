"""Text + causal LM -> one record per position: the numbers the page and the CLI show.

The article checks a real model's loss three ways; ``analyse_clm`` does the
same on every call: the model's own ``loss`` (labels = input_ids), the
article's softmax -> gather -> -log -> mean, and ``torch.nn.CrossEntropyLoss``
on the shifted logits. The per-token numbers themselves come from
``lmviz.losses.clm_loss``, so the page explains the function that computed them.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from lmviz.losses import clm_loss

MAX_TOKENS = 1024


class NothingToScore(ValueError):
    """The text gives the model nothing to predict; the message says why."""


@dataclass
class TokenRow:
    position: int  # index of the input token
    input_token: str
    input_id: int
    target_token: str  # the next token, which position ``position`` is scored on
    target_id: int
    prob: float  # p(target | tokens up to position)
    nll: float  # -log p(target)
    rank: int  # 1 = the model's favourite
    top_k: list = field(default_factory=list)  # [(token, prob), ...], most likely first


@dataclass
class ClmAnalysis:
    model: str
    text: str
    tokens: list[str]  # every input token, readable (BOS included when added)
    input_ids: list[int]
    rows: list[TokenRow]  # one per scored position: len(tokens) - 1
    loss: float  # lmviz's clm_loss: the mean of the rows' nll
    loss_model: float  # 1. the model's own out.loss
    loss_softmax_gather: float  # 2. softmax -> gather -> -log -> mean (the article's manual way)
    loss_cross_entropy: float  # 3. torch.nn.CrossEntropyLoss on shifted logits and labels
    max_difference: float  # the largest gap between the four values above
    perplexity: float
    bos_added: bool
    truncated_from: int | None  # the token count before truncation, if the text was cut
    device: str
    forward_seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def readable_token(tokenizer, token_id: int) -> str:
    """A token as text a learner can read: decoded (not BPE's 'Ġ' form), with
    spaces and line breaks made visible."""
    text = tokenizer.decode([token_id])
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def bos_token_id(tokenizer) -> int:
    """The token a sequence starts with: BOS, or else EOS (GPT-2 uses <|endoftext|> for both)."""
    for candidate in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return candidate
    raise NothingToScore("This tokenizer has no beginning-of-sequence or end-of-sequence token to prepend.")


def encode(tokenizer, text: str, add_bos: bool, max_tokens: int = MAX_TOKENS) -> tuple[list[int], int | None]:
    """Token ids of ``text`` (special tokens only as asked), cut to ``max_tokens``.

    Returns (ids, the length before cutting or None).
    """
    if not text or not text.strip():
        raise NothingToScore("There is nothing to score: the text is empty. Type a sentence.")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if add_bos:
        ids = [bos_token_id(tokenizer), *ids]
    if len(ids) < 2:
        raise NothingToScore(
            "There is no next token to predict: the text is a single token. Type more, "
            "or tick 'Start with the BOS token' so that the first token is predicted from the start marker."
        )
    if len(ids) > max_tokens:
        return ids[:max_tokens], len(ids)
    return ids, None


def _forward(model, input_ids: torch.Tensor):
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(input_ids=input_ids, labels=input_ids)
        if input_ids.device.type == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - start


def _three_way_check(logits: torch.Tensor, input_ids: torch.Tensor) -> tuple[float, float]:
    """The article's two manual computations on (1, T, V) logits."""
    shift_logits = logits[0, :-1].float()  # (T-1, V)
    shift_labels = input_ids[0, 1:]  # (T-1,)
    p = torch.nn.Softmax(dim=-1)(shift_logits)[torch.arange(len(shift_labels)), shift_labels]
    softmax_gather = (-p.log()).mean().item()
    cross_entropy = torch.nn.CrossEntropyLoss()(shift_logits, shift_labels).item()
    return softmax_gather, cross_entropy


def analyse_clm(loaded, text: str, add_bos: bool = False, top_k: int = 5, max_tokens: int = MAX_TOKENS) -> ClmAnalysis:
    """Score ``text`` with ``loaded`` (a lmviz.models.LoadedModel)."""
    model, tokenizer = loaded.model, loaded.tokenizer
    ids, truncated_from = encode(tokenizer, text, add_bos, max_tokens)
    input_ids = torch.tensor([ids], device=loaded.device)  # (1, T)
    out, seconds = _forward(model, input_ids)
    logits = out.logits  # (1, T, V)
    loss, info = clm_loss(logits, input_ids)
    softmax_gather, cross_entropy = _three_way_check(logits, input_ids)

    scored = logits[0, :-1].float()  # (T-1, V): position t predicts token t+1
    targets = input_ids[0, 1:]
    target_logits = scored.gather(-1, targets.unsqueeze(-1))  # (T-1, 1)
    ranks = ((scored > target_logits).sum(-1) + 1).tolist()  # 1 + how many tokens beat the target
    top_probs, top_ids = torch.softmax(scored, dim=-1).topk(top_k, dim=-1)  # (T-1, k)

    tokens = [readable_token(tokenizer, i) for i in ids]
    probs, nlls = info["target_probs"][0].tolist(), info["nll"][0].tolist()
    rows = [
        TokenRow(
            position=t, input_token=tokens[t], input_id=ids[t], target_token=tokens[t + 1], target_id=ids[t + 1],
            prob=probs[t], nll=nlls[t], rank=ranks[t],
            top_k=[(readable_token(tokenizer, i), p) for i, p in zip(top_ids[t].tolist(), top_probs[t].tolist())],
        )
        for t in range(len(ids) - 1)
    ]
    values = [loss.item(), out.loss.item(), softmax_gather, cross_entropy]
    return ClmAnalysis(
        model=loaded.name, text=text, tokens=tokens, input_ids=ids, rows=rows,
        loss=values[0], loss_model=values[1], loss_softmax_gather=values[2], loss_cross_entropy=values[3],
        max_difference=max(values) - min(values), perplexity=math.exp(values[0]), bos_added=add_bos,
        truncated_from=truncated_from, device=loaded.device, forward_seconds=seconds,
    )
