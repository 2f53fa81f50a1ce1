"""Serving a causal LM to many learners: several texts in one padded forward pass, a long text read a piece
at a time, and a failed allocation told as one sentence. lmviz.lessons.causal_lm turns each text's logits
into its records; this module only decides how the forward passes are run (never shown on a page)."""

from __future__ import annotations

import functools
import time
from typing import Callable, TypeVar

import torch

from lmviz.core.text import pad_right
from lmviz.errors import NotEnoughMemory
from lmviz.lessons.causal_lm import MAX_TOKENS, ClmAnalysis, Request, make_request, records_from_logits, seconds_since

T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """A failed allocation: CUDA's OutOfMemoryError, or the CPU allocator's RuntimeError."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


def explaining_out_of_memory(loaded, compute: Callable[[], T], sentence: Callable[[], str]) -> T:
    """``compute()``, with a failed allocation raised as NotEnoughMemory(``sentence()``)."""
    try:
        return compute()
    except RuntimeError as error:  # torch.OutOfMemoryError is a RuntimeError too
        if not is_out_of_memory(error):
            raise
    # Raised here, outside the except block, so that the failed attempt's tensors (held by
    # its traceback) are freed before anyone retries.
    if loaded.device.startswith("cuda"):
        torch.cuda.empty_cache()  # and their blocks handed back by PyTorch's caching allocator
    raise NotEnoughMemory(sentence(), loaded.device)


def explains_out_of_memory(analyse):
    """``analyse`` (loaded, requests), with a failed allocation turned into NotEnoughMemory,
    whose one sentence says how large the texts' scores were."""
    @functools.wraps(analyse)
    def explained(loaded, requests: list[Request], **options) -> list[ClmAnalysis]:
        width = max(len(request.ids) for request in requests)
        return explaining_out_of_memory(
            loaded, lambda: analyse(loaded, requests, **options),
            lambda: _memory_sentence(len(requests), width, loaded.model.config.vocab_size, loaded.device))
    return explained


def _memory_sentence(texts: int, width: int, vocab_size: int, device: str) -> str:
    needed = texts * width * vocab_size * 4  # float32 logits: the largest tensor of a forward pass
    what = "this text's" if texts == 1 else f"these {texts} texts'"
    return (f"The {device} ran out of memory: the model's scores for {what} {width} tokens alone take "
            f"{needed / 2**20:,.0f} MB ({texts} × {width} positions × {vocab_size:,} vocabulary entries × 4 bytes).")



# On a shared server a long text is read this many tokens at a time, and the short texts of other
# visitors that arrive meanwhile are scored between its pieces (lmviz.serving.batcher.Batcher): they wait for one
# piece, not for the whole text (benchmarks/noisy_neighbour.py, README "Reliability").
PIECE_TOKENS = 64


def forward_in_pieces(loaded, input_ids: torch.Tensor, between_pieces: Callable,
                      piece: int | Callable[[], int] = PIECE_TOKENS) -> tuple[torch.Tensor, float]:
    """(the logits of one unpadded text, the seconds its own forward passes took): ``piece`` tokens at
    a time (or ``piece()``, asked before each piece), each attending to the keys and values the model
    kept from the pieces before it (its cache, as when it generates), so the logits equal one whole
    forward pass's within float rounding. ``between_pieces()`` runs after every piece but the last; its
    time is not counted. Each piece's logits are copied into one tensor as they come: the peak is one
    text's logits and one piece's, not the two copies that joining the pieces at the end would hold."""
    rows, length = input_ids.shape
    cache, logits, seconds, start = None, None, 0.0, 0
    while start < length:
        end = start + (piece() if callable(piece) else piece)
        began = time.perf_counter()
        out = loaded.model(input_ids=input_ids[:, start:end], cache=cache, use_cache=True)
        cache = out.cache
        if logits is None:
            logits = out.logits.new_empty((rows, length, out.logits.shape[-1]))  # (B, T, V)
        logits[:, start:end] = out.logits
        del out  # this piece's logits, before the next piece's
        seconds += seconds_since(began, loaded.device)
        if end < length:
            between_pieces()
        start = end
    return logits, seconds


@explains_out_of_memory
def analyse_batch(loaded, requests: list[Request], between_pieces: Callable | None = None,
                  piece_tokens: int | Callable[[], int] = PIECE_TOKENS) -> list[ClmAnalysis]:
    """Score several texts with one forward pass.

    The texts are padded on the right into one batch, with an attention mask: a causal model's
    real tokens never attend to the pads after them, and right padding leaves their positions
    unchanged, so each result equals the one-at-a-time result (within float rounding).
    With ``between_pieces``, one text is read ``piece_tokens`` at a time instead (forward_in_pieces).
    """
    pad = loaded.tokenizer.pad_token_id or 0  # any id: the attention mask hides the pads
    rows, masks = pad_right([request.ids for request in requests], pad)
    input_ids = torch.tensor(rows, device=loaded.device)  # (B, T)
    attention_mask = torch.tensor(masks, device=loaded.device)  # (B, T): 1 on real tokens, 0 on pads
    with torch.inference_mode():
        if between_pieces is not None:
            logits, seconds = forward_in_pieces(loaded, input_ids, between_pieces, piece_tokens)
        else:
            start = time.perf_counter()
            logits = loaded.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
            seconds = seconds_since(start, loaded.device)
        results = []
        for b, request in enumerate(requests):
            n = len(request.ids)
            results.append(records_from_logits(loaded, request, logits[b, :n], input_ids[b, :n], seconds))
    return results


def score_text(loaded, text: str, add_bos: bool = False, top_k: int = 5, max_tokens: int = MAX_TOKENS) -> ClmAnalysis:
    """lmviz.lessons.causal_lm.analyse_clm's records, on the serving path: a failed allocation becomes
    NotEnoughMemory, whose sentence says how large the text's scores were (the CLI's and a session's own model's)."""
    return analyse_batch(loaded, [make_request(loaded, text, add_bos, top_k, max_tokens)])[0]
