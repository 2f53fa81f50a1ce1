"""Text + causal LM -> one record per position: the numbers the page and the CLI show.

The article checks a real model's loss three ways; ``analyse_clm`` does the
same on every call: the model's own ``loss`` (labels = input_ids), the
article's softmax -> gather -> -log -> mean, and ``torch.nn.CrossEntropyLoss``
on the shifted logits. The per-token numbers themselves come from
``lmviz.losses.clm_loss``, so the page explains the function that computed them.
"""

from __future__ import annotations

import functools
import time
import unicodedata
from dataclasses import asdict, dataclass, field

import torch

from lmviz.losses import clm_loss, perplexity

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


# Characters that would be invisible, or would move or break the text around them.
_SHOWN_AS = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _visible(text: str) -> str:
    out = []
    for ch in text:
        if ch in _SHOWN_AS:
            out.append(_SHOWN_AS[ch])
        elif unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
            out.append(f"<U+{ord(ch):04X}>")  # control, format (e.g. right-to-left override) and other invisibles
        else:
            out.append(ch)
    return "".join(out) or "∅"


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE (GPT-2, SmolLM2, Llama 3) writes each byte as a printable
    character: bytes that are printable Latin-1 stand for themselves, the others
    are shifted to 256, 257, ... in order. This maps those characters back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(shifted)}


def readable_token(tokenizer, token_id: int) -> str:
    """A token as text a learner can read: decoded (not BPE's 'Ġ' form), with
    spaces, line breaks and invisible characters made visible. A token that is
    only part of a character's UTF-8 bytes (CJK and emoji are often split) is
    shown as its bytes in hex, e.g. <E6 97>."""
    text = tokenizer.decode([token_id])
    if "\ufffd" in text:
        piece = tokenizer.convert_ids_to_tokens(token_id)
        alphabet = _byte_level_alphabet()
        if piece and all(ch in alphabet for ch in piece):
            return "<" + " ".join(f"{alphabet[ch]:02X}" for ch in piece) + ">"
        if piece and piece.startswith("<0x"):  # SentencePiece byte fallback, already in this form
            return piece
    return _visible(text)


def start_token_id(tokenizer) -> int:
    """The token a text starts with in pre-training: the document separator
    <|endoftext|> where the vocabulary has one (GPT-2, SmolLM2; SmolLM2-Instruct's
    BOS is a chat-turn marker instead), else BOS, else EOS."""
    separator = tokenizer.get_vocab().get("<|endoftext|>")
    for candidate in (separator, tokenizer.bos_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return candidate
    raise NothingToScore("This tokenizer has no beginning-of-sequence or end-of-sequence token to prepend.")


def model_max_tokens(model) -> int:
    """The longest input the model's position embeddings allow (GPT-2: 1024)."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or MAX_TOKENS


def encode(tokenizer, text: str, add_bos: bool, max_tokens: int = MAX_TOKENS) -> tuple[list[int], int | None]:
    """Token ids of ``text`` (special tokens only as asked), cut to ``max_tokens``.

    Returns (ids, the length before cutting or None).
    """
    if not text or not text.strip():
        raise NothingToScore("There is nothing to score: the text is empty. Type a sentence.")
    # split_special_tokens: typing "<|endoftext|>" gives the characters, not the model's control token
    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if add_bos:
        ids = [start_token_id(tokenizer), *ids]
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
    """Score ``text`` with ``loaded`` (a lmviz.models.LoadedModel), cut to
    ``max_tokens`` or the model's own limit, whichever is smaller."""
    model, tokenizer = loaded.model, loaded.tokenizer
    ids, truncated_from = encode(tokenizer, text, add_bos, min(max_tokens, model_max_tokens(model)))
    input_ids = torch.tensor([ids], device=loaded.device)  # (1, T)
    out, seconds = _forward(model, input_ids)
    logits = out.logits  # (1, T, V)
    loss, info = clm_loss(logits, input_ids)
    softmax_gather, cross_entropy = _three_way_check(logits, input_ids)

    scored = logits[0, :-1].float()  # (T-1, V): position t predicts token t+1
    targets = input_ids[0, 1:]
    target_logits = scored.gather(-1, targets.unsqueeze(-1))  # (T-1, 1)
    ranks = ((scored > target_logits).sum(-1) + 1).tolist()  # 1 + how many tokens beat the target
    top_probs, top_ids = torch.softmax(scored, dim=-1).topk(min(top_k, scored.shape[-1]), dim=-1)  # (T-1, k)

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
        max_difference=max(values) - min(values), perplexity=perplexity(values[0]), bos_added=add_bos,
        truncated_from=truncated_from, device=loaded.device, forward_seconds=seconds,
    )
