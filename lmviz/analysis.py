"""Text + causal LM -> one record per position: the numbers the page and the CLI show.

The article checks a real model's loss three ways; ``analyse_clm`` does the
same on every call: log-softmax at the label -> negate -> mean (the per-token
numbers of the table), the model's own loss function (what ``out.loss`` is
with labels = input_ids), and ``torch.nn.CrossEntropyLoss`` on the shifted
logits. It costs little beyond the forward pass: one sweep over the logits,
in chunks, gives every -log p, rank and top-k (see benchmarks/perf.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from lmviz.losses import perplexity
from lmviz.text import encode, pad_right, readable_token, valid_text

MAX_TOKENS = 1024
# A paragraph of ordinary English, the same for every model: its loss is the yardstick a page shows
# beside the loss of the learner's own text ("is 2.6 a good loss?": compare with what this model
# scores on plain prose).
REFERENCE_TEXT = ("The library opens at nine in the morning and closes at six in the evening. Visitors can borrow "
                  "up to five books at a time, and most books may be kept for three weeks. If you need a book for "
                  "longer, you can renew it online or at the front desk, as long as nobody else has asked for it.")


class NotEnoughMemory(RuntimeError):
    """The device ran out of memory while scoring; the message says how much was needed."""

    def __init__(self, message: str, device: str):
        super().__init__(message)
        self.device = device


def is_out_of_memory(error: BaseException) -> bool:
    """A failed allocation: CUDA's OutOfMemoryError, or the CPU allocator's RuntimeError."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


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
    loss: float  # 1. log-softmax at the label -> negate -> mean: the mean of the rows' nll
    loss_model: float  # 2. the model's own loss function (what out.loss is with labels=input_ids), in chunks
    loss_cross_entropy: float  # 3. torch.nn.CrossEntropyLoss on shifted logits and labels
    max_difference: float  # the largest gap between the three
    perplexity: float
    bos_added: bool
    truncated_from: int | None  # the token count before truncation, if the text was cut
    device: str
    forward_seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


# Characters that would be invisible, or would move or break the text around them.
def model_max_tokens(model) -> int | None:
    """The longest input the model's position embeddings allow (GPT-2: 1024), None if its config does not say."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def length_limit(model) -> tuple[int, str]:
    """How many tokens of one text are scored, and why: the model's own limit,
    or lmviz's MAX_TOKENS, which keeps one text's scores (positions x vocabulary
    floats) and its forward pass small enough for a laptop's CPU."""
    own = model_max_tokens(model)
    vocabulary = model.config.vocab_size
    if own is not None and own <= MAX_TOKENS:
        return own, f"the model's limit: its config allows {own:,} positions"
    scores_mb = MAX_TOKENS * vocabulary * 4 / 2**20
    takes = f"the model itself takes {own:,}" if own is not None else "the model's config gives no limit"
    return MAX_TOKENS, (f"lmviz's limit per text, not the model's ({takes}): it keeps the scores of one text, "
                        f"{MAX_TOKENS:,} positions × {vocabulary:,} vocabulary entries × 4 bytes = "
                        f"{scores_mb:,.0f} MiB, and its forward pass small enough for a laptop")


CHUNK_ROWS = 128  # positions scored at a time: bounds the temporary (rows, V) tensors


def score_positions(logits: torch.Tensor, targets: torch.Tensor, top_k: int) -> dict:
    """Everything the table shows, for one sequence, in one sweep over the logits.

    logits: (N, V), position t's scores for the token at t+1; targets: (N,).
    -log p(target) comes from log_softmax (never softmax().log(), whose tiny
    probabilities round to 0 in float32); the rank of the target is 1 + the
    number of tokens with a higher score; the top-k come from the same
    log-probabilities. Rows are processed CHUNK_ROWS at a time, so the
    temporary (rows, V) tensors stay small whatever the length of the text.
    """
    parts = {"nll": [], "rank": [], "top_p": [], "top_id": []}
    for start in range(0, logits.shape[0], CHUNK_ROWS):
        log_p = torch.log_softmax(logits[start:start + CHUNK_ROWS].float(), dim=-1)  # (c, V)
        target_log_p = log_p.gather(-1, targets[start:start + CHUNK_ROWS, None])  # (c, 1)
        parts["nll"].append(-target_log_p.squeeze(-1))
        parts["rank"].append((log_p > target_log_p).sum(-1) + 1)
        top_log_p, top_ids = log_p.topk(top_k, dim=-1)  # (c, k)
        parts["top_p"].append(top_log_p.exp())
        parts["top_id"].append(top_ids)
    return {k: torch.cat(v).cpu() for k, v in parts.items()}


def _rows_of(tokenizer, ids: list[int], tokens: list[str], scores: dict) -> list[TokenRow]:
    nll, rank = scores["nll"].tolist(), scores["rank"].tolist()
    top_p, top_id = scores["top_p"].tolist(), scores["top_id"].tolist()
    return [
        TokenRow(position=t, input_token=tokens[t], input_id=ids[t], target_token=tokens[t + 1],
                 target_id=ids[t + 1], prob=math.exp(-nll[t]), nll=nll[t], rank=rank[t],
                 top_k=[(readable_token(tokenizer, i), p) for i, p in zip(top_id[t], top_p[t])])
        for t in range(len(ids) - 1)
    ]


@dataclass
class Request:
    """One text to score, already tokenized (so that bad input fails before batching)."""
    text: str
    ids: list[int]
    truncated_from: int | None
    add_bos: bool
    top_k: int = 5


def make_request(loaded, text: str, add_bos: bool = False, top_k: int = 5, max_tokens: int = MAX_TOKENS) -> Request:
    """Tokenize ``text`` for ``loaded``, cut to ``max_tokens`` or the model's own limit,
    whichever is smaller. Raises NothingToScore."""
    ids, truncated_from = encode(loaded.tokenizer, text, add_bos, min(max_tokens, length_limit(loaded.model)[0]))
    return Request(valid_text(text), ids, truncated_from, add_bos, top_k)


def analyse_batch(loaded, requests: list[Request]) -> list[ClmAnalysis]:
    """Score several texts with one forward pass.

    The sequences are right-padded into one batch with an attention mask: a
    causal model's real tokens never attend to the pads that follow them, and
    right padding leaves their positions unchanged, so each result equals the
    one-at-a-time result (within float rounding).
    """
    model, tokenizer, device = loaded.model, loaded.tokenizer, loaded.device
    lengths = [len(r.ids) for r in requests]
    width = max(lengths)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows, masks = pad_right([r.ids for r in requests], pad)
    input_ids = torch.tensor(rows, device=device)  # (B, T)
    # without padding the model takes its plain causal path
    attention_mask = torch.tensor(masks, device=device) if min(lengths) < width else None
    try:
        return _score_batch(loaded, requests, input_ids, attention_mask, lengths)
    except RuntimeError as error:  # torch.OutOfMemoryError is a RuntimeError too
        if not is_out_of_memory(error):
            raise
    # Raised here, outside the except block, so that the failed attempt's tensors (held by
    # its traceback) are freed before anyone retries.
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # and their blocks handed back by PyTorch's caching allocator
    raise NotEnoughMemory(_memory_sentence(len(requests), width, model.config.vocab_size, device), device)


def _score_batch(loaded, requests, input_ids, attention_mask, lengths) -> list[ClmAnalysis]:
    with torch.inference_mode():
        start = time.perf_counter()
        logits = loaded.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
        if loaded.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return [_analysis_of_row(loaded, request, logits[b, :length], input_ids[b, :length], seconds)
                for b, (request, length) in enumerate(zip(requests, lengths))]


def _memory_sentence(texts: int, width: int, vocab_size: int, device: str) -> str:
    needed = texts * width * vocab_size * 4  # float32 logits: the largest tensor of a forward pass
    what = "this text's" if texts == 1 else f"these {texts} texts'"
    return (f"The {device} ran out of memory: the model's scores for {what} {width} tokens alone take "
            f"{needed / 2**20:,.0f} MB ({texts} × {width} positions × {vocab_size:,} vocabulary entries × 4 bytes).")


def _reference_losses(model, logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    """The model's own loss function and torch.nn.CrossEntropyLoss, on (N, V) shifted logits.

    Both run over CHUNK_ROWS rows at a time, summing and dividing by N at the end, so
    that neither makes a full (N, V) copy of the logits. For the model's function this
    is Hugging Face's own gradient-accumulation path (``num_items_in_batch``); its result
    equals the one-call loss (out.loss with labels = input_ids) up to float rounding.
    """
    count, vocab_size = len(targets), logits.shape[-1]
    own, torch_ce = 0.0, 0.0
    for start in range(0, count, CHUNK_ROWS):
        chunk, chunk_targets = logits[start:start + CHUNK_ROWS], targets[start:start + CHUNK_ROWS]
        own += model.loss_function(logits=chunk, labels=None, vocab_size=vocab_size, shift_labels=chunk_targets,
                                   num_items_in_batch=count).item()
        torch_ce += torch.nn.CrossEntropyLoss(reduction="sum")(chunk.float(), chunk_targets).item()
    return own, torch_ce / count


def _analysis_of_row(loaded, request: Request, logits: torch.Tensor, ids: torch.Tensor, seconds: float) -> ClmAnalysis:
    model = loaded.model
    targets = ids[1:]
    scores = score_positions(logits[:-1], targets, min(request.top_k, logits.shape[-1]))
    # The article's three ways to the mean:
    by_hand = scores["nll"].mean().item()  # log-softmax at the label -> negate -> mean (the table's numbers)
    model_own, cross_entropy = _reference_losses(model, logits[:-1], targets)
    values = [by_hand, model_own, cross_entropy]
    tokens = [readable_token(loaded.tokenizer, i) for i in request.ids]
    return ClmAnalysis(
        model=loaded.name, text=request.text, tokens=tokens, input_ids=request.ids,
        rows=_rows_of(loaded.tokenizer, request.ids, tokens, scores), loss=by_hand,
        loss_model=model_own, loss_cross_entropy=cross_entropy, max_difference=max(values) - min(values),
        perplexity=perplexity(by_hand), bos_added=request.add_bos, truncated_from=request.truncated_from,
        device=loaded.device, forward_seconds=seconds,
    )


def analyse_clm(loaded, text: str, add_bos: bool = False, top_k: int = 5, max_tokens: int = MAX_TOKENS) -> ClmAnalysis:
    """Score ``text`` with ``loaded`` (a lmviz.models.LoadedModel), cut to
    ``max_tokens`` or the model's own limit, whichever is smaller."""
    return analyse_batch(loaded, [make_request(loaded, text, add_bos, top_k, max_tokens)])[0]
