"""Text + causal LM -> one record per position: the numbers the page and the CLI show.

The article checks a real model's loss three ways; ``records_from_logits`` does the
same on every call: log-softmax at the label -> negate -> mean (the per-token
numbers of the table), the model's own loss function (what ``out.loss`` is
with labels = input_ids), and ``torch.nn.CrossEntropyLoss`` on the shifted
logits. It costs little beyond the forward pass (benchmarks/perf.py measures
it): the logits are read a few positions at a time, while they are in the
CPU's cache, and top-k and rank skip most of the vocabulary.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from lmviz.core.losses import perplexity
from lmviz.core.text import encode, readable_token, valid_text

MAX_TOKENS = 1024
# A paragraph of ordinary English, the same for every model: its loss is the yardstick a page shows
# beside the loss of the learner's own text ("is 2.6 a good loss?": compare with what this model
# scores on plain prose).
REFERENCE_TEXT = ("The library opens at nine in the morning and closes at six in the evening. Visitors can borrow "
                  "up to five books at a time, and most books may be kept for three weeks. If you need a book for "
                  "longer, you can renew it online or at the front desk, as long as nobody else has asked for it.")


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


# How many (position, vocabulary entry) scores are worked on at a time. On a CPU, 2**20 float32
# scores (4 MB; ~21 positions of a 49k-token vocabulary) stay in the processor's cache while
# log-softmax, top-k and rank read them; on a GPU, larger steps launch fewer kernels. Either way no
# temporary the size of the whole text's logits is made.
CHUNK_SCORES = {"cpu": 2**20, "accelerator": 2**25}


def chunks(logits: torch.Tensor, labels: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(N, V) logits and (N,) labels as pieces of a few positions each: see CHUNK_SCORES."""
    scores = CHUNK_SCORES["cpu" if logits.device.type == "cpu" else "accelerator"]
    rows = max(1, scores // logits.shape[-1])
    return list(zip(logits.split(rows), labels.split(rows)))


def in_chunks(score):
    """``score`` run on a few positions at a time (see CHUNK_SCORES), its tensors joined again."""
    @functools.wraps(score)  # "Show the code" shows ``score`` itself, under this decorator
    def chunked(logits: torch.Tensor, labels: torch.Tensor, *args) -> dict:
        pieces = [score(piece, piece_labels, *args) for piece, piece_labels in chunks(logits, labels)]
        return {key: torch.cat([piece[key] for piece in pieces]) for key in pieces[0]}
    return chunked


TOP_K_BLOCK = 128  # vocabulary entries per block in topk_by_blocks


def topk_by_blocks(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(scores, k, dim=-1), in two cheap steps instead of one costly one.

    scores: (N, V). The k largest scores of a row lie in the k blocks of TOP_K_BLOCK entries
    with the largest maxima: a block left out is outranked by k blocks, each holding a score at
    least as large as any of its own. So: every block's maximum (a pass as fast as a sum), the k
    best blocks, and torch.topk over their k × TOP_K_BLOCK entries only: about 6 times faster on
    a CPU than torch.topk over all V. The values are torch.topk's; among equal scores, the ids
    may differ. Returns values (N, k), largest first, and their ids (N, k).
    """
    rows, size = scores.shape
    whole = size - size % TOP_K_BLOCK  # the last, shorter block is always searched
    if k * TOP_K_BLOCK >= whole:  # few blocks: nothing to gain
        return scores.topk(k, dim=-1)
    best = scores[:, :whole].view(rows, -1, TOP_K_BLOCK).amax(-1).topk(k, dim=-1).indices  # (N, k)
    block = torch.arange(TOP_K_BLOCK, device=scores.device)
    ids = torch.cat([(best[:, :, None] * TOP_K_BLOCK + block).view(rows, -1),  # (N, k × TOP_K_BLOCK)
                     torch.arange(whole, size, device=scores.device).expand(rows, -1)], dim=1)
    values, where = scores.gather(1, ids).topk(k, dim=-1)  # (N, k)
    return values, ids.gather(1, where)


@in_chunks
def score_positions(logits: torch.Tensor, targets: torch.Tensor, top_k: int) -> dict:
    """Everything the table shows: -log p of each label, its rank, and the model's top-k guesses.

    logits: (N, V), position t's scores for the token at t+1; targets: (N,), the tokens at t+1.
    -log p comes from log_softmax, never softmax().log(): a tiny probability rounds to 0 in
    float32, and log 0 = -inf.
    """
    log_p = torch.log_softmax(logits.float(), dim=-1)  # (N, V), in float32 whatever the weights' dtype
    target_log_p = log_p.gather(-1, targets[:, None])  # (N, 1)
    top_log_p, top_ids = topk_by_blocks(log_p, min(top_k, log_p.shape[-1]))  # (N, k), most likely first
    # rank = 1 + how many tokens score higher than the label. When the label is among the top k, all
    # of those are too, and are counted there; only the other positions need the whole vocabulary.
    # (Counted in int32, not sum's default int64: a vocabulary is far smaller than 2**31, and the
    # count over the vocabulary then takes a third less time.)
    rank = (top_log_p > target_log_p).sum(-1, dtype=torch.int32) + 1  # (N,)
    outside = (target_log_p[:, 0] < top_log_p[:, -1]).nonzero()[:, 0]  # positions whose label is below the k-th guess
    rank[outside] = (log_p.index_select(0, outside) > target_log_p[outside]).sum(-1, dtype=torch.int32) + 1
    return {"nll": -target_log_p[:, 0], "rank": rank, "top_p": top_log_p.exp(), "top_id": top_ids}


def loss_three_ways(model, logits: torch.Tensor, labels: torch.Tensor, nll: torch.Tensor) -> list[float]:
    """The article's check: three independent routes to the text's loss, which must agree.

    logits: (N, V), position t's scores for the token at t+1; labels: (N,); nll: (N,), the -log p
    of score_positions. Routes 2 and 3 add up sums over a few positions at a time and divide by N
    (for the model's function, Hugging Face's own gradient-accumulation path, num_items_in_batch):
    the mean, without a temporary the size of the logits.
    """
    count, pieces = len(labels), chunks(logits, labels)
    # 1. log-softmax at the label -> negate -> mean: the mean of the table's numbers
    by_hand = nll.mean().item()
    # 2. the model's own loss function: what out.loss is with labels = input_ids
    model_own = sum(model.loss_function(logits=piece, labels=None, vocab_size=logits.shape[-1],
                                        shift_labels=piece_labels, num_items_in_batch=count).item()
                    for piece, piece_labels in pieces)
    # 3. torch.nn.CrossEntropyLoss on the shifted logits and labels
    cross_entropy = sum(torch.nn.CrossEntropyLoss(reduction="sum")(piece.float(), piece_labels).item()
                        for piece, piece_labels in pieces) / count
    return [by_hand, model_own, cross_entropy]


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


def seconds_since(start: float, device: str) -> float:
    """Seconds since ``start`` (time.perf_counter), once the device has finished what it was given."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # a GPU runs its kernels after the call returns: wait for them
    return time.perf_counter() - start


def _analysis(loaded, request: Request, scores: dict, losses: list[float], seconds: float) -> ClmAnalysis:
    tokens = [readable_token(loaded.tokenizer, i) for i in request.ids]
    by_hand, model_own, cross_entropy = losses
    return ClmAnalysis(
        model=loaded.name, text=request.text, tokens=tokens, input_ids=request.ids,
        rows=_rows_of(loaded.tokenizer, request.ids, tokens, scores), loss=by_hand,
        loss_model=model_own, loss_cross_entropy=cross_entropy, max_difference=max(losses) - min(losses),
        perplexity=perplexity(by_hand), bos_added=request.add_bos, truncated_from=request.truncated_from,
        device=loaded.device, forward_seconds=seconds,
    )


def records_from_logits(loaded, request: Request, logits: torch.Tensor, input_ids: torch.Tensor,
                        seconds: float) -> ClmAnalysis:
    """One text's records from the model's logits: what the page's table, chart and three-way check show.

    logits: (T, V), position t's scores for every token that could come at t + 1; input_ids: (T,).
    Position t is scored on the token at t + 1, so the last position and the first token drop out."""
    shifted, labels = logits[:-1], input_ids[1:]  # (T-1, V), (T-1,)
    scores = score_positions(shifted, labels, request.top_k)
    losses = loss_three_ways(loaded.model, shifted, labels, scores["nll"])
    return _analysis(loaded, request, scores, losses, seconds)


def analyse_clm(loaded, text: str, add_bos: bool = False, top_k: int = 5, max_tokens: int = MAX_TOKENS) -> ClmAnalysis:
    """Score ``text`` with ``loaded`` (a lmviz.models.loading.LoadedModel), cut to ``max_tokens`` or the model's
    own limit, whichever is smaller: one forward pass, then records_from_logits."""
    request = make_request(loaded, text, add_bos, top_k, max_tokens)
    input_ids = torch.tensor([request.ids], device=loaded.device)  # (1, T)
    with torch.inference_mode():
        start = time.perf_counter()
        logits = loaded.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits  # (1, T, V)
        seconds = seconds_since(start, loaded.device)
        return records_from_logits(loaded, request, logits[0], input_ids[0], seconds)
