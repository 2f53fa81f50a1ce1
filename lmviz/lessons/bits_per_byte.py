"""Bits per byte: a loss per byte of text, which compares models whose tokenizers cut the same text differently.

A loss per token depends on the tokenizer: one that cuts a text into fewer, longer tokens has more to predict at
each, so a higher loss per token, and may still be the better model. Counted per byte of the text instead,

    bits per byte = Σ -ln p / (ln 2 × bytes) = (nats per token) / (ln 2 × bytes per token),

and 2^bpb is the byte perplexity. Two conventions are in use, and this module computes both from one set of
-ln p, each token's with its context length:

- lm-evaluation-harness's: a prefix token before the text, so that every token of the text is predicted; the
  bytes of the whole document, ``len(text.encode("utf-8"))``; words by ``re.split(r"\\s+", text)``. lmviz scores
  the text's own tokens; lm-evaluation-harness 0.4.13 scores the text as the tokenizer encodes it by default, with
  whatever special tokens that adds (``harness_encoding``), and reads as many tokens at once as the model's config
  gives, else its tokenizer's model_max_length, else 2048 (``harness_max_length``);
- nanochat's: the bytes of the predicted tokens only, each token's own; a special token counts 0 bytes and its
  -ln p is left out of the sum. A token's bytes are read from its piece (``lmviz.core.text.token_bytes``).
  Counted after decoding the token to text alone, as nanochat did before its commit 2ce972a (``decoded_bytes``),
  a character the token cuts short counts as one U+FFFD's three bytes, and each byte of a character begun in an
  earlier token as three more; bpb looks better than it is.

A text longer than a model reads at once is scored in windows. ``harness_windows`` are lm-evaluation-harness's
rolling windows (each new one conditioned on the last token of the one before), ``strided_windows`` the loop of
Hugging Face's perplexity guide (each window starts ``stride`` tokens after the last, and scores only the tokens
the last did not), ``whole`` one pass. Every window is a ``Window`` (which tokens it reads, which it scores),
and ``score_windows`` runs any list of them, so the three differ only in their lists.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass

import torch

from lmviz.core.text import end_token_id, readable_token, reads_bytes, token_bytes, valid_text
from lmviz.core.toy import INPUT_WORDS, toy_loss
from lmviz.errors import LearnerError, NothingToScore
from lmviz.lessons.causal_lm import length_limit, seconds_since

LN2 = math.log(2)
# lm-evaluation-harness 0.4.13's lm_eval/models/utils.py: TOKENIZER_INFINITY, a tokenizer's model_max_length when
# it names none, and DEFAULT_MAX_LENGTH, what resolve_max_length falls back to
TOKENIZER_INFINITY, HARNESS_DEFAULT_MAX_LENGTH = 1000000000000000019884624838656, 2048
MAX_TEXT_TOKENS = 4096  # one text's tokens, however many windows a model needs to read them
DEFAULT_WINDOW, DEFAULT_STRIDE = 32, 16  # small on purpose: a paragraph then needs several windows
MIN_WINDOW = 2  # a window of one token would predict nothing in the guide's loop (its one token is only a label)
# How many positions of windows one forward pass reads together: their logits, positions × vocabulary float32
# numbers, stay near 200 MB for SmolLM2's 49,152-token vocabulary.
POSITIONS_AT_ONCE = 1024


class BadWindow(LearnerError, ValueError):
    """A window or stride the windows cannot be made with; the message says why."""


def harness_prefix_id(tokenizer) -> int:
    """The token lm-evaluation-harness puts before a text so that its first token is predicted too (its HFLM's
    prefix_token_id): the tokenizer's BOS, else its EOS."""
    for candidate in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return candidate
    raise NothingToScore("This tokenizer has no beginning-of-sequence or end-of-sequence token to put before the "
                         "text, so its first token cannot be predicted.")


def toy_per_byte() -> PerByte:
    """The toy example's loss per byte: its five -ln p (lmviz.core.toy, the article's table) over the 20 bytes of
    "I love dogs not cats", the start word <s> being the prefix, as lm-evaluation-harness counts them."""
    _, info = toy_loss()
    nll = info["nll"][info["counted"]]  # (5,), one per word of the sentence
    text = " ".join(INPUT_WORDS[1:])
    return PerByte(HARNESS, len(nll), nll.sum().item(), len(text.encode("utf-8")), harness_words(text))


def harness_words(text: str) -> int:
    """Words as lm-evaluation-harness counts them for word perplexity: the pieces of ``re.split(r"\\s+", text)``.
    A text that ends (or begins) with a space or a line break gets an empty piece there, counted as a word."""
    return len(re.split(r"\s+", text))


def harness_max_length(model, tokenizer) -> tuple[int, str]:
    """How many tokens lm-evaluation-harness 0.4.13 reads at once with this model, and where it read that: its
    HFLM.max_length calls resolve_max_length (lm_eval/models/utils.py), which takes the first of n_positions,
    max_position_embeddings and n_ctx in the config (its text_config, where it has one), else the tokenizer's
    model_max_length unless that is TOKENIZER_INFINITY, else DEFAULT_MAX_LENGTH."""
    config = getattr(model.config, "text_config", None) or model.config
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        if getattr(config, name, None) is not None:
            return int(getattr(config, name)), f"{name} in the model's config"
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and limit != TOKENIZER_INFINITY:
        return int(limit), "the tokenizer's model_max_length"
    return HARNESS_DEFAULT_MAX_LENGTH, "its default: neither the config nor the tokenizer names a length"


def harness_encoding(tokenizer, text: str) -> list[int]:
    """The tokens lm-evaluation-harness 0.4.13 scores for ``text``: loglikelihood_rolling encodes it with HFLM's
    tok_encode (lm_eval/models/huggingface.py), which, add_bos_token unset, calls ``tokenizer.encode(text)`` with
    the tokenizer's own default special tokens ([CLS] … [SEP] for a BERT-style tokenizer), or none when the text
    already begins with the prefix token's text (has_bos_prefix)."""
    text = valid_text(text)
    starts = text.startswith(tokenizer.decode([harness_prefix_id(tokenizer)]))
    return tokenizer.encode(text, add_special_tokens=not starts, verbose=False)


def added_by_default(tokenizer, text: str) -> tuple[list[int], list[int]]:
    """The special tokens a tokenizer's defaults put before and after a text's own tokens (its post-processor's):
    ``tokenizer.encode(text)`` against the same with ``add_special_tokens=False``."""
    own = tokenizer.encode(valid_text(text), add_special_tokens=False, verbose=False)
    full = tokenizer.encode(valid_text(text), verbose=False)
    for before in range(len(full) - len(own) + 1):
        if full[before:before + len(own)] == own:
            return full[:before], full[before + len(own):]
    raise AssertionError("the tokenizer's default special tokens are not around the text's own tokens")


def decoded_bytes(tokenizer, token_id: int) -> int:
    """A token's bytes counted the wrong way: decode it to text alone, then count that text's UTF-8 bytes.
    Decoding writes one U+FFFD (3 bytes) for the start of a character the token cuts short, and one for each byte
    of a character begun in an earlier token, as Python's ``bytes.decode("utf-8", errors="replace")`` does."""
    return len(tokenizer.decode([token_id]).encode("utf-8"))


# ---------------------------------------------------------------------------------------------- windows

@dataclass(frozen=True)
class Window:
    """One forward pass over the tokens ``start`` to ``end - 2`` of a sequence, which predicts tokens
    ``start + 1`` to ``end - 1``; of those, it scores ``first`` to ``end - 1``. A token at position t is predicted
    from the t - start tokens before it in the window: its context length."""

    start: int
    end: int
    first: int

    @property
    def reads(self) -> int:
        """How many tokens the model reads: the longest context in the window."""
        return self.end - 1 - self.start


def whole(length: int) -> list[Window]:
    """The whole sequence in one pass: every token after the first predicted from all before it."""
    return [Window(0, length, 1)]


def harness_windows(length: int, window: int) -> list[Window]:
    """lm-evaluation-harness's rolling windows over a sequence of ``length`` tokens whose first is the prefix
    token (its get_rolling_token_windows with context_len = 1, then make_disjoint_window): the first window reads
    up to ``window`` tokens from the prefix on; each next one scores the next ``window`` tokens, reading them with
    the one token before them; the last, when shorter, reaches back so that it still reads ``window`` tokens."""
    first = min(window, length - 1)
    windows = [Window(0, first + 1, 1)]
    scored_to = first + 1  # the first token no window has scored yet
    while scored_to < length:
        end = min(scored_to + window, length)
        windows.append(Window(end - 1 - window, end, scored_to))
        scored_to = end
    return windows


def strided_windows(length: int, window: int, stride: int) -> list[Window]:
    """The loop of Hugging Face's perplexity guide: windows of ``window`` tokens (the last of which is only a
    label, so at most window - 1 of context) beginning every ``stride`` tokens; each scores the tokens after the
    last window's end, with the tokens before them in the window as context. The loop stops at the window that
    reaches the end. With stride = window, the first token of each window is never scored."""
    windows, previous_end = [], 0
    for begin in range(0, length, stride):
        end = min(begin + window, length)
        windows.append(Window(begin, end, max(previous_end, begin + 1)))
        previous_end = end
        if end == length:
            break
    return windows


def check_window(window: int, stride: int, longest: int) -> None:
    if not MIN_WINDOW <= window <= longest:
        raise BadWindow(f"The window must be {MIN_WINDOW} to {longest:,} tokens (the most lmviz reads at once with "
                        f"this model); it is {window:,}.")
    if not 1 <= stride <= window:
        raise BadWindow(f"The stride must be 1 to the window's {window:,} tokens; it is {stride:,}. A stride longer "
                        "than the window would skip the tokens between two windows.")


def _window_nll(model, ids: torch.Tensor, windows: list[Window]) -> list[torch.Tensor]:
    """-ln p of every token each window predicts, tokens start + 1 to end - 1, in float32. ids: (T,). Windows
    that read the same number of tokens are run as one batch, a few at a time (POSITIONS_AT_ONCE)."""
    out: list[torch.Tensor | None] = [None] * len(windows)
    by_length: dict[int, list[int]] = {}
    for n, w in enumerate(windows):
        by_length.setdefault(w.reads, []).append(n)
    for reads, members in by_length.items():
        at_once = max(1, POSITIONS_AT_ONCE // reads)
        for part in range(0, len(members), at_once):
            batch = members[part:part + at_once]
            inputs = torch.stack([ids[windows[n].start:windows[n].end - 1] for n in batch])  # (B, L)
            targets = torch.stack([ids[windows[n].start + 1:windows[n].end] for n in batch])  # (B, L)
            logits = model(input_ids=inputs).logits.float()  # (B, L, V); no attention mask: no padding
            nll = torch.logsumexp(logits, -1) - logits.gather(-1, targets[..., None])[..., 0]  # (B, L)
            for row, n in enumerate(batch):
                out[n] = nll[row].cpu()
    return out


@dataclass
class Scoring:
    """One way of scoring a sequence: its windows, and each token's context length and -ln p (None for the
    prefix, and for a token no window scores)."""

    name: str
    windows: list[Window]
    context: list[int | None]
    nll: list[float | None]

    @property
    def scored(self) -> int:
        return sum(x is not None for x in self.nll)

    @property
    def nats(self) -> float:
        return sum(x for x in self.nll if x is not None)

    @property
    def mean(self) -> float:
        return self.nats / self.scored

    def never_scored(self) -> list[int]:
        """The tokens after the prefix that no window scores."""
        return [t for t in range(1, len(self.nll)) if self.nll[t] is None]

    def lost_context(self) -> list[int]:
        """The scored tokens predicted from fewer tokens than all those before them."""
        return [t for t, c in enumerate(self.context) if c is not None and c < t]

    def to_dict(self) -> dict:
        return {"name": self.name, "windows": [asdict(w) for w in self.windows], "context": self.context,
                "nll": self.nll, "scored": self.scored, "nats": self.nats}


def score_windows(model, ids: list[int], windows: list[Window], name: str) -> Scoring:
    """Each token's -ln p and context length as ``windows`` score it. A token two windows score would be counted
    twice: that is refused, not summed."""
    context: list[int | None] = [None] * len(ids)
    nll: list[float | None] = [None] * len(ids)
    device = next(model.parameters()).device
    with torch.inference_mode():
        per_window = _window_nll(model, torch.tensor(ids, device=device), windows)
    for w, window_nll in zip(windows, per_window):
        for t in range(w.first, w.end):
            if nll[t] is not None:
                raise AssertionError(f"{name}: token {t} is scored by two windows")
            context[t], nll[t] = t - w.start, window_nll[t - w.start - 1].item()
    return Scoring(name, windows, context, nll)


def guide_average(strided: Scoring) -> float:
    """The average the perplexity guide itself reports for its windows: each window's mean -ln p (outputs.loss)
    weighted by its labels that are not -100, less one for the label the model's shift drops. That one is
    dropped only in the first window, whose labels begin at its first token; every later window's labels are all
    predicted, so the guide weighs them one token light, and its average differs a little from the mean of the
    tokens it scored (``strided.mean``)."""
    total = weight = 0.0
    previous_end = 0
    for w in strided.windows:
        scored = [strided.nll[t] for t in range(w.first, w.end)]
        labels = w.end - max(previous_end, w.start)  # the guide's trg_len: labels not set to -100
        total += sum(scored) / len(scored) * (labels - 1)
        weight += labels - 1
        previous_end = w.end
    return total / weight


# ---------------------------------------------------------------------------------------------- bits per byte

@dataclass
class ByteRow:
    """One predicted token: its bytes, counted two ways, and its -ln p."""

    position: int  # in the scored sequence; 0 is the prefix token, never predicted
    token: str  # readable (lmviz.core.text.readable_token)
    token_id: int
    raw: str | None  # its bytes in hex ("" for a special token); None where the tokenizer's tokens are not bytes
    byte_count: int | None  # len of those bytes
    decoded: str  # the token decoded alone: a U+FFFD for a character it cuts short, one per byte of one begun before
    decoded_byte_count: int  # the decoding bug's count: len(decode([id]).encode("utf-8")); 0 for a special token
    special: bool
    context: int  # how many tokens it was predicted from
    nll: float  # -ln p, in nats

    @property
    def bits(self) -> float:
        return self.nll / LN2


@dataclass
class PerByte:
    """A loss over a count of tokens and of bytes, and what follows from them."""

    convention: str
    tokens: int  # predicted tokens summed over
    nats: float  # Σ -ln p over them
    bytes: int
    words: int | None = None  # only lm-evaluation-harness counts words

    @property
    def nats_per_token(self) -> float:
        return self.nats / self.tokens

    @property
    def bits_per_token(self) -> float:
        return self.nats_per_token / LN2

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens

    @property
    def bits_per_byte(self) -> float:
        """Σ nats / (ln 2 × bytes): the same as (nats per token) / (ln 2 × bytes per token)."""
        return self.nats / (LN2 * self.bytes)

    @property
    def byte_perplexity(self) -> float:
        """2^bpb = e^(nats per byte): lm-evaluation-harness's byte_perplexity."""
        return 2 ** self.bits_per_byte

    @property
    def word_perplexity(self) -> float | None:
        """e^(Σ nats / words): lm-evaluation-harness's word_perplexity."""
        return None if self.words is None else math.exp(self.nats / self.words)

    def to_dict(self) -> dict:
        return {**asdict(self), "nats_per_token": self.nats_per_token, "bits_per_token": self.bits_per_token,
                "bytes_per_token": self.bytes_per_token, "bits_per_byte": self.bits_per_byte,
                "byte_perplexity": self.byte_perplexity, "word_perplexity": self.word_perplexity}


HARNESS, NANOCHAT, DECODED = "lm-evaluation-harness", "nanochat", "nanochat before 2ce972a: decoded bytes"
HARNESS_AS_RUN = "lm-evaluation-harness 0.4.13, its own tokens"


@dataclass
class BitsPerByte:
    model: str
    text: str
    prefix: str  # the prefix token, readable
    prefix_id: int
    end: str | None  # the special token put after the text, readable, when one was asked for
    rows: list[ByteRow]  # every predicted token: the text's, then the end token
    reads_bytes: bool  # whether the tokenizer's tokens are the text's bytes (byte-level BPE)
    keeps_text: bool  # whether decoding the tokens gives the text back (a normaliser or [UNK] does not)
    unknown_tokens: int  # how many of the text's tokens are the tokenizer's unknown token
    lowercases: bool  # whether the tokens, decoded, are the text in lower case: a normaliser lowercased it
    text_bytes: int  # len(text.encode("utf-8"))
    window: int  # the most tokens lmviz reads at once with this model (lmviz.lessons.causal_lm.length_limit)
    window_reason: str  # why: the model's limit or lmviz's
    windows: int  # how many windows of lm-evaluation-harness's kind that took
    harness_window: int  # the most tokens lm-evaluation-harness 0.4.13 reads at once with this model
    harness_window_from: str  # where it reads that (harness_max_length)
    harness: PerByte
    # the text scored as lm-evaluation-harness 0.4.13 encodes it, in lmviz's windows; None where those tokens are
    # lmviz's own. added: the tokens of that encoding that lmviz's has not (readable), [CLS] and [SEP] for BERT's
    as_run: PerByte | None
    added: list[str]
    nanochat: PerByte | None  # None where the tokenizer's tokens are not bytes: only the document's are defined
    decoded: PerByte | None  # nanochat's sums with each token's bytes counted after decoding it (byte-level only)
    device: str
    forward_seconds: float

    @property
    def special_rows(self) -> list[ByteRow]:
        return [r for r in self.rows if r.special]

    def to_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k not in ("harness", "nanochat", "decoded", "as_run")},
                "harness": self.harness.to_dict(), "nanochat": self.nanochat and self.nanochat.to_dict(),
                "decoded": self.decoded and self.decoded.to_dict(), "as_run": self.as_run and self.as_run.to_dict()}


def lowercased(tokenizer, text: str, ids: list[int]) -> bool:
    """Whether the text has capitals and its tokens, decoded (the unknown token left out), have none: a normaliser
    lowercased it."""
    known = tokenizer.decode([i for i in ids if i != tokenizer.unk_token_id])
    return valid_text(text) != valid_text(text).lower() and known == known.lower()


def encode_for_bpb(loaded, text: str, end_token: bool = False) -> list[int]:
    """The prefix token, the text's tokens and, when asked, the token a pre-training document ends with
    (lmviz.core.text.end_token_id). Raises NothingToScore for an empty text or one longer than MAX_TEXT_TOKENS."""
    tokenizer = loaded.tokenizer
    if not text or not text.strip():
        raise NothingToScore("There is nothing to score: the text is empty. Type a sentence.")
    # verbose=False: a text longer than the model reads at once is what the windows are for, not a warning
    ids = tokenizer(valid_text(text), add_special_tokens=False, split_special_tokens=True, verbose=False)["input_ids"]
    if len(ids) > MAX_TEXT_TOKENS:
        raise NothingToScore(f"The text is {len(ids):,} tokens long for {loaded.name}; this page scores at most "
                             f"{MAX_TEXT_TOKENS:,}. Shorten it.")
    end = end_token_id(tokenizer) if end_token else None
    if end_token and end is None:
        raise NothingToScore("This tokenizer has no end-of-text token to put after the text.")
    return [harness_prefix_id(tokenizer), *ids, *([end] if end_token else [])]


def per_byte(rows: list[ByteRow], text: str, byte_level: bool,
             end_token: bool) -> tuple[PerByte, PerByte | None, PerByte | None]:
    """The text's loss per byte three ways, from its rows (the last of which is the end token when ``end_token``):
    lm-evaluation-harness's, nanochat's and nanochat's with each token's bytes counted after decoding it (the last
    two None where the tokens are not bytes: the decoding bug is a byte-level tokenizer's)."""
    text_rows = rows[:-1] if end_token else rows  # lm-evaluation-harness scores the text's tokens, [UNK] included
    harness = PerByte(HARNESS, len(text_rows), sum(r.nll for r in text_rows), len(text.encode("utf-8")),
                      harness_words(text))
    counted = [r for r in rows if not r.special]  # nanochat: a special token has 0 bytes and is left out
    nanochat = (PerByte(NANOCHAT, len(counted), sum(r.nll for r in counted), sum(r.byte_count for r in counted))
                if byte_level else None)
    decoded = (PerByte(DECODED, len(counted), sum(r.nll for r in counted),
                       sum(r.decoded_byte_count for r in counted)) if byte_level else None)
    return harness, nanochat, decoded


def bits_per_byte(loaded, text: str, end_token: bool = False) -> BitsPerByte:
    """``text``'s bits per byte under ``loaded`` (a lmviz.models.loading.LoadedModel): the prefix token, the text
    (and the end-of-text token, when asked), scored in lm-evaluation-harness's windows of the most tokens lmviz
    reads at once with the model (one pass, when the text fits), and each predicted token's bytes; and the text
    as lm-evaluation-harness 0.4.13 encodes it, where that differs, scored in the same windows."""
    tokenizer = loaded.tokenizer
    ids = encode_for_bpb(loaded, text, end_token)
    window, window_reason = length_limit(loaded.model)
    start = time.perf_counter()
    scoring = score_windows(loaded.model, ids, harness_windows(len(ids), window), HARNESS)
    seconds = seconds_since(start, loaded.device)
    byte_level = reads_bytes(tokenizer) and reads_bytes(tokenizer, text)
    special = set(tokenizer.all_special_ids)
    rows = []
    for t in range(1, len(ids)):
        raw = token_bytes(tokenizer, ids[t]) if byte_level else None
        rows.append(ByteRow(
            position=t, token=readable_token(tokenizer, ids[t]), token_id=ids[t],
            raw=None if raw is None else raw.hex(" ").upper(), byte_count=None if raw is None else len(raw),
            decoded=tokenizer.decode([ids[t]]),
            decoded_byte_count=0 if ids[t] in special else decoded_bytes(tokenizer, ids[t]),
            special=ids[t] in special, context=scoring.context[t], nll=scoring.nll[t]))
    harness, nanochat, decoded = per_byte(rows, text, byte_level, end_token)
    text_ids = ids[1:-1] if end_token else ids[1:]
    their_ids = harness_encoding(tokenizer, text)
    as_run = None
    if their_ids != text_ids:
        run = score_windows(loaded.model, [ids[0], *their_ids], harness_windows(len(their_ids) + 1, window),
                            HARNESS_AS_RUN)
        as_run = PerByte(HARNESS_AS_RUN, run.scored, run.nats, harness.bytes, harness.words)
    added = (Counter(their_ids) - Counter(text_ids)).elements()  # in the order of their first use
    harness_window, harness_window_from = harness_max_length(loaded.model, tokenizer)
    return BitsPerByte(
        model=loaded.name, text=text, prefix=readable_token(tokenizer, ids[0]), prefix_id=ids[0],
        end=readable_token(tokenizer, ids[-1]) if end_token else None, rows=rows,
        reads_bytes=byte_level, keeps_text=tokenizer.decode(text_ids) == valid_text(text),
        unknown_tokens=sum(i == tokenizer.unk_token_id for i in text_ids),
        lowercases=lowercased(tokenizer, text, text_ids),
        text_bytes=len(text.encode("utf-8")), window=window, window_reason=window_reason,
        windows=len(scoring.windows), harness_window=harness_window, harness_window_from=harness_window_from,
        harness=harness, nanochat=nanochat, decoded=decoded,
        as_run=as_run, added=[readable_token(tokenizer, i) for i in added],
        device=loaded.device, forward_seconds=seconds)


# ---------------------------------------------------------------------------------------------- windows, three ways

@dataclass
class Windowed:
    """One text scored three ways after the same prefix token, lm-evaluation-harness's: its rolling windows, the
    perplexity guide's strided loop, and one pass (None when the text is longer than lmviz reads at once)."""

    model: str
    tokens: list[str]  # the scored sequence, readable; 0 is the prefix token
    window: int
    stride: int
    longest: int  # the most tokens lmviz reads at once with this model
    # what the tokenizer's defaults put before the text (readable): what the guide's own loop reads first; it
    # encodes with them (encodings = tokenizer("\n\n".join(test["text"]), return_tensors="pt")) and puts no prefix
    before: list[str]
    harness: Scoring
    strided: Scoring
    whole: Scoring | None

    def to_dict(self) -> dict:
        return {"model": self.model, "tokens": self.tokens, "window": self.window, "stride": self.stride,
                "longest": self.longest, "before": self.before, "harness": self.harness.to_dict(),
                "strided": self.strided.to_dict(), "whole": self.whole and self.whole.to_dict()}


def windowed(loaded, text: str, window: int = DEFAULT_WINDOW, stride: int = DEFAULT_STRIDE) -> Windowed:
    """``text`` after the prefix token, scored in lm-evaluation-harness's windows of ``window`` tokens, in the
    perplexity guide's windows of ``window`` tokens every ``stride``, and whole where it fits. Raises BadWindow
    for a window or stride that cannot be used, NothingToScore for a text that cannot."""
    longest = length_limit(loaded.model)[0]
    check_window(window, stride, longest)
    ids = encode_for_bpb(loaded, text)
    model, tokenizer = loaded.model, loaded.tokenizer
    return Windowed(
        model=loaded.name, tokens=[readable_token(tokenizer, i) for i in ids], window=window, stride=stride,
        longest=longest, before=[readable_token(tokenizer, i) for i in added_by_default(tokenizer, text)[0]],
        harness=score_windows(model, ids, harness_windows(len(ids), window), HARNESS),
        strided=score_windows(model, ids, strided_windows(len(ids), window, stride), "perplexity guide"),
        whole=score_windows(model, ids, whole(len(ids)), "one pass") if len(ids) - 1 <= longest else None)


def rankings(results: list[BitsPerByte]) -> tuple[list[str], list[str]]:
    """The models from best to worst on the text: by loss per token, and by bits per byte (lm-evaluation-harness's,
    over the document's bytes, which every tokenizer shares)."""
    by_token = sorted(results, key=lambda r: r.harness.nats_per_token)
    by_byte = sorted(results, key=lambda r: r.harness.bits_per_byte)
    return [r.model for r in by_token], [r.model for r in by_byte]
