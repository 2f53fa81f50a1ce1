"""From the loss to learning: the gradient of a text's loss, and steps of SGD and AdamW on a real model.

Three computations, each on one text scored as lmviz.lessons.causal_lm scores it (the same tokens, labels
and optional start token, through ``make_request``):

- ``logit_gradient``: the gradient of the mean loss over the N labels with respect to every logit,
  by the formula (softmax − one-hot) / N and by autograd, and how far apart the two are;
- ``sgd_steps``: plain gradient descent on every weight, w ← w − lr·g, a few times, with what it does
  to the text's loss, to each token's p(label) and to a second text;
- ``adamw_first_step``: AdamW's first step on one matrix (the output matrix, which SmolLM2 ties to the
  input embedding), whose update is lr·g/(|g| + eps): ±lr where |g| is far above eps, whatever its size, and
  about lr·g/eps, proportional to g, where |g| is far below eps.

The model every session shares is never changed. A step works on ``private_copy``: a module of its own,
built for the call, whose parameters are new Parameter objects over the shared model's storage. Autograd
writes gradients into fresh tensors of its own; a step writes each new weight into its gradient's tensor
(``torch.add`` with ``out=``), puts it in place of the private parameter's, and never writes into a tensor that
was not made for the call. Other threads
scoring with the shared model at the same moment see its weights unchanged, to the last bit
(tests/lessons/test_gradient_step.py checks both). Everything the call allocates is freed when it returns.

Every step runs the model in eval mode, as it is shared (no dropout): the same text gives the same step.
"""

from __future__ import annotations

import copy
import ctypes
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from lmviz.core.text import readable_token
from lmviz.errors import BadInput, NothingToScore, OtherTextUnusable
from lmviz.lessons.causal_lm import Request, chunks, make_request, seconds_since

# A step's forward pass keeps every layer's activations for the backward pass, so a step takes fewer tokens
# than a page that only scores. Measured on SmolLM2 in float32 (docs/development/measurements.md, table 1: the
# step's peak memory above the loaded model): 769 MiB at 16 tokens, most of it the updated weights (513 MiB);
# 943 MiB at 256.
STEP_MAX_TOKENS = 256
MAX_STEPS = 20
# Above 1, a step moves the weights further than the gradient's own length (lr·‖g‖ > ‖g‖, and SmolLM2's ‖g‖
# on a sentence is ~30; its loss already rises at 0.01): no longer a step of learning, only a way to break it.
MAX_LEARNING_RATE = 1.0
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # PyTorch's AdamW defaults
# A weight whose gradient is at least this many times eps has lr·|g|/(|g| + eps) within 0.1% of lr: AdamW's first
# step moves it by ±lr, the sign of g. At |g| = eps the step is lr/2; below eps, less, and about lr·|g|/eps.
SIGN_LIKE = 1000
# AdamW's first step, lr·|g|/(|g| + eps), in three bands of |g|: (lowest |g|, highest |g| (excluded), the band in
# words, the step there in words)
STEP_BANDS = ((SIGN_LIKE * ADAM_EPS, math.inf, f"≥ {SIGN_LIKE:,} eps", "±lr, the sign of g (within 0.1 %)"),
              (ADAM_EPS, SIGN_LIKE * ADAM_EPS, f"eps to {SIGN_LIKE:,} eps", "from lr/2 to lr"),
              (0.0, ADAM_EPS, "below eps", "below lr/2; about lr · |g| / eps far below eps"))

# One step of learning's defaults: the page's, and the warm start's (lmviz.app.training), which computes them
# before the first visitor asks. 1e-3 lowers the default sentence's loss on SmolLM2 (2.567 → 1.855).
DEFAULT_TEXT = "The capital of France is Paris."
DEFAULT_OTHER = "The capital of France is Berlin."
DEFAULT_RATE, DEFAULT_STEPS = 1e-3, 3
Progress = Callable[[float, str], None]


def return_freed_memory() -> None:
    """Give the memory a step freed back to the operating system. glibc keeps freed blocks for reuse, so after a
    SmolLM2 step every tensor is gone yet the process stays about 390 MiB larger (benchmarks.gradient_step,
    table 3: 1 310 MiB after the step against 915 loaded; 925 after this). Elsewhere than glibc it does nothing."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# --- checks ---------------------------------------------------------------------------------------------

def check_learning_rate(lr: float) -> float:
    """``lr`` as a float when it is a number above 0 and at most MAX_LEARNING_RATE; else BadInput."""
    is_number = isinstance(lr, (int, float)) and not isinstance(lr, bool)
    if not is_number or not 0 < lr <= MAX_LEARNING_RATE:  # NaN fails both comparisons
        raise BadInput(f"The learning rate must be a number above 0 and at most {MAX_LEARNING_RATE:g} "
                       f"(for example 0.001); got {lr!r}.")
    return float(lr)


def check_steps(steps: int) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise BadInput(f"The number of steps must be a whole number from 1 to {MAX_STEPS}; got {steps!r}.")
    return steps


# transformers' TrainingArguments defaults (transformers/training_args.py): its Trainer clips every step's gradient
# to max_grad_norm with torch.nn.utils.clip_grad_norm_ (Trainer._clip_grad_norm, through accelerate), steps with
# optim "adamw_torch_fused" (from torch 2.8; "adamw_torch" before), torch.optim.AdamW(fused=True)
# (trainer_optimizer.py, _get_adamw_torch), at weight_decay
# 0, and sets the rate by lr_scheduler_type "linear" after warmup_steps 0. Importing TrainingArguments takes seconds,
# so the page states them from here; a test reads the installed ones
TRAINER_MAX_GRAD_NORM = 1.0
TRAINER_OPTIMIZER, TRAINER_WEIGHT_DECAY = "adamw_torch_fused", 0.0
TRAINER_FUSED_FROM_TORCH = "2.8"  # the torch from which TrainingArguments' default optim is the fused AdamW
TRAINER_SCHEDULE, TRAINER_WARMUP_STEPS = "linear", 0


def check_max_norm(max_norm: float | None) -> float | None:
    is_number = isinstance(max_norm, (int, float)) and not isinstance(max_norm, bool)
    if max_norm is not None and not (is_number and math.isfinite(max_norm) and max_norm > 0):
        raise BadInput(f"The gradient's largest norm must be a number above 0 (for example 1.0); got {max_norm!r}.")
    return None if max_norm is None else float(max_norm)


def check_warmup(warmup: int | None, steps: int) -> int | None:
    if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < steps):
        raise BadInput(f"The warm-up must be a whole number of steps from 0 to {steps - 1}, fewer than the "
                       f"{steps} steps; got {warmup!r}.")
    return warmup


def check_weight_decay(weight_decay: float) -> float:
    is_number = isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool)
    if not is_number or not 0 <= weight_decay <= 1:
        raise BadInput(f"The weight decay must be a number from 0 to 1 (for example 0.01); got {weight_decay!r}.")
    return float(weight_decay)


# --- the private module -------------------------------------------------------------------------------

def private_copy(model: torch.nn.Module, trainable: Callable[[str], bool] = lambda name: True) -> torch.nn.Module:
    """A module of the call's own that computes exactly what ``model`` computes, without copying a weight.

    copy.deepcopy, told beforehand what each parameter and buffer becomes: every parameter a new
    Parameter over the same storage (``p.detach()``: no copy), requiring a gradient when ``trainable(name)``;
    every buffer the shared one itself (read, never written). Tied weights stay tied: deepcopy maps one
    object to one copy. Only the modules' Python objects and the config are copied (~20 ms for SmolLM2).
    ``model`` is only read, so other threads may run it meanwhile. Building the module from its config
    instead would start from the meta device (which lmviz.models.pretrained.model_build_lock guards), and
    load_state_dict would leave out the buffers a state dict does not hold (SmolLM2's rotary inv_freq).

    Writing into a private parameter would write into the shared model: replace its tensor instead
    (``param.data = new``), as the steps here do.
    """
    memo = {id(p): torch.nn.Parameter(p.detach(), requires_grad=trainable(name))
            for name, p in model.named_parameters()}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)


def _logits(module, input_ids: torch.Tensor) -> torch.Tensor:
    """(T, V) float32 logits of one text: position t's scores for the token at t + 1."""
    out = module(input_ids=input_ids[None], attention_mask=torch.ones_like(input_ids)[None], use_cache=False)
    return out.logits[0].float()


def _token_nll(module, input_ids: torch.Tensor) -> torch.Tensor:
    """(N,) -log p(label) of each of the text's N labels, without a graph."""
    with torch.no_grad():
        return F.cross_entropy(_logits(module, input_ids)[:-1], input_ids[1:], reduction="none")


def _ids(loaded, request: Request) -> torch.Tensor:
    return torch.tensor(request.ids, device=loaded.device)


def _tokens(loaded, request: Request) -> list[str]:
    return [readable_token(loaded.tokenizer, i) for i in request.ids]


# --- 1. the gradient with respect to the logits ---------------------------------------------------------

@dataclass
class GradientRow:
    """One predicted position's row of ∂L/∂z, L the mean loss over the text's N labels. "The formula" is
    (softmax(z) − one-hot) / N in float32, as the model computes; autograd's row is the same in float32."""
    position: int  # index of the input token; its label is the token at position + 1
    input_token: str
    target_token: str
    target_id: int
    prob: float  # p(label), from the float32 logits (as lmviz.lessons.causal_lm's rows)
    nll: float  # -log p(label)
    label_entry: float  # the formula at the label: (p − 1) / N, always negative
    autograd_label_entry: float  # autograd's gradient at the label
    others: list  # [(token, id, p / N), ...]: the formula's `top` largest other entries, largest first
    row_sum: float  # the formula's row, its V entries added in float64: 0 up to float32 rounding (~1e-6)
    autograd_row_sum: float  # autograd's row, added the same way
    row_norm: float  # the exact row's L2 norm, √((1 − p)² + Σ_others p_v²) / N: from (1 − p)/N (the wrong
    #                  probability spread thin) to √2·(1 − p)/N (all of it on one other token)
    max_difference: float  # the largest |formula − autograd| over the row's V entries (both float32)
    exact_difference: float  # the largest |exact − autograd|, exact the formula in float64 from the same logits


@dataclass
class LogitGradient:
    """The gradient of a text's mean loss with respect to its logits, by the formula and by autograd.

    The formula: ∂L/∂z[t, v] = (softmax(z[t])[v] − 1[v = label_t]) / N, from the model's float32 logits,
    in float32 (and in float64: "exact"). Autograd: torch.autograd.grad of F.cross_entropy (the mean over
    the N labels, float32) with respect to the whole (T, V) logits, the last position included. Compared
    entry by entry over the N rows that have a label."""
    model: str
    text: str
    tokens: list[str]  # every input token, readable (BOS included when added)
    input_ids: list[int]
    count: int  # N, the labels the mean runs over: len(tokens) - 1
    vocab_size: int  # V, the entries of each row
    rows: list[GradientRow]  # one per position with a label: N
    loss: float  # F.cross_entropy's mean over the N labels, float32: the loss autograd differentiates
    max_difference: float  # the largest |formula − autograd| over all N × V entries, both in float32 (~1e-8)
    exact_difference: float  # the largest |exact (float64) formula − autograd|: float32's own rounding (~1e-6)
    max_row_sum: float  # the largest |autograd_row_sum| over the rows
    last_position: int  # the last input token's position: it has no label
    last_token: str
    last_row_max: float  # the largest |entry| of autograd's row there: exactly 0.0, it is in no loss term
    bos_added: bool
    truncated_from: int | None  # the token count before the text was cut to max_tokens
    device: str
    seconds: float  # forward pass, autograd and formula

    def to_dict(self) -> dict:
        return asdict(self)


def _gradient_rows(tokenizer, ids: list[int], tokens: list[str], logits: torch.Tensor, grad: torch.Tensor,
                   labels: torch.Tensor, top: int) -> list[GradientRow]:
    """The rows of LogitGradient: logits and autograd's grad (N, V) float32, labels (N,). Worked a few
    positions at a time (lmviz.lessons.causal_lm.chunks), so that no float64 copy of all the logits is made."""
    count, rows = len(labels), []
    for (z, y), (g, _) in zip(chunks(logits, labels), chunks(grad, labels)):
        nll = F.cross_entropy(z, y, reduction="none")  # (n,)
        one_hot = F.one_hot(y, z.shape[-1])  # (n, V)
        formula = (torch.softmax(z, dim=-1) - one_hot) / count  # (n, V) float32
        exact = (torch.softmax(z.double(), dim=-1) - one_hot) / count  # (n, V) float64
        others = formula.scatter(1, y[:, None], -1.0).topk(min(top, z.shape[-1] - 1), dim=-1)  # the label left out
        difference, exact_difference = (formula - g).abs().amax(-1), (exact - g.double()).abs().amax(-1)
        row_sum, autograd_row_sum = formula.double().sum(-1), g.double().sum(-1)
        norm = torch.linalg.vector_norm(exact, dim=-1)  # float64: a float32 norm of V entries is off by ~3e-5
        for i in range(len(y)):
            t = len(rows)
            rows.append(GradientRow(
                position=t, input_token=tokens[t], target_token=tokens[t + 1], target_id=ids[t + 1],
                prob=math.exp(-nll[i].item()), nll=nll[i].item(), label_entry=formula[i, y[i]].item(),
                autograd_label_entry=g[i, y[i]].item(),
                others=[(readable_token(tokenizer, v), v, value)
                        for v, value in zip(others.indices[i].tolist(), others.values[i].tolist())],
                row_sum=row_sum[i].item(), autograd_row_sum=autograd_row_sum[i].item(), row_norm=norm[i].item(),
                max_difference=difference[i].item(), exact_difference=exact_difference[i].item()))
    return rows


def logit_gradient(loaded, text: str, add_bos: bool = False, top: int = 3,
                   max_tokens: int = STEP_MAX_TOKENS) -> LogitGradient:
    """∂L/∂logits for ``text`` on ``loaded``, L the mean cross-entropy over the text's N labels.

    A label's own entry is (p − 1)/N: negative, the loss falls as that logit rises, and the more slowly the
    surer the model already is (p near 1: near 0). Every other entry is p/N: the loss rises fastest with the logits
    of the tokens the model wrongly favours. Each row sums to 0 (the probabilities sum to 1: adding one number
    to every logit of a position changes no probability) and the last position, which predicts no label, has a
    row of zeros. A step changes weights, never a logit directly; the logits change because the weights did.
    One forward pass of the shared model (no gradient to any weight: only the logits are differentiated).
    Raises NothingToScore."""
    request = make_request(loaded, text, add_bos, max_tokens=max_tokens)
    input_ids = _ids(loaded, request)
    start = time.perf_counter()
    with torch.no_grad():
        logits = _logits(loaded.model, input_ids)  # (T, V)
    logits.requires_grad_(True)
    labels = input_ids[1:]
    loss = F.cross_entropy(logits[:-1], labels)  # the mean over the N labels; the last position is in no term
    (grad,) = torch.autograd.grad(loss, logits)  # (T, V) float32
    logits = logits.detach()
    tokens = _tokens(loaded, request)
    rows = _gradient_rows(loaded.tokenizer, request.ids, tokens, logits[:-1], grad[:-1], labels, top)
    return LogitGradient(
        model=loaded.name, text=request.text, tokens=tokens, input_ids=request.ids, count=len(rows),
        vocab_size=logits.shape[-1], rows=rows, loss=loss.item(),
        max_difference=max(row.max_difference for row in rows),
        exact_difference=max(row.exact_difference for row in rows),
        max_row_sum=max(abs(row.autograd_row_sum) for row in rows),
        last_position=len(tokens) - 1, last_token=tokens[-1], last_row_max=grad[-1].abs().max().item(),
        bos_added=request.add_bos, truncated_from=request.truncated_from, device=loaded.device,
        seconds=seconds_since(start, loaded.device))


# --- 2. steps of SGD ------------------------------------------------------------------------------------

@dataclass
class TokenChange:
    """One label of a text, before and after the steps."""
    position: int
    input_token: str
    target_token: str
    target_id: int
    prob_before: float  # p(label) before any step
    prob_after: float  # after the first step
    prob_last: float  # after the last step (prob_after when there is one step)
    nll_before: float  # -log p(label) before any step
    nll_after: float  # after the first step


@dataclass
class TextChange:
    """A text scored before the steps, after the first and after the last."""
    text: str
    tokens: list[str]
    input_ids: list[int]
    rows: list[TokenChange]  # one per label
    loss_before: float  # mean -log p over the labels, float32
    loss_after: float  # after the first step
    loss_last: float  # after the last step
    bos_added: bool
    truncated_from: int | None


def _text_change(loaded, request: Request, before: torch.Tensor, after: torch.Tensor,
                 last: torch.Tensor) -> TextChange:
    """before, after, last: (N,) -log p of the text's labels before, after the first and after the last step."""
    tokens, (b, a, z) = _tokens(loaded, request), (before.tolist(), after.tolist(), last.tolist())
    rows = [TokenChange(position=t, input_token=tokens[t], target_token=tokens[t + 1], target_id=request.ids[t + 1],
                        prob_before=math.exp(-b[t]), prob_after=math.exp(-a[t]), prob_last=math.exp(-z[t]),
                        nll_before=b[t], nll_after=a[t]) for t in range(len(b))]
    return TextChange(text=request.text, tokens=tokens, input_ids=request.ids, rows=rows,
                      loss_before=before.mean().item(), loss_after=after.mean().item(), loss_last=last.mean().item(),
                      bos_added=request.add_bos, truncated_from=request.truncated_from)


@dataclass
class SgdSteps:
    """Steps of plain gradient descent on every weight of the model, w ← w − lr · ∂L/∂w, L the text's
    mean loss: what torch.optim.SGD(lr=lr) does with no momentum and no weight decay. The shared model is
    untouched; the updated weights existed only during the call."""
    model: str
    lr: float
    steps: int
    weights: int  # how many numbers each step changes (tied weights counted once)
    losses: list[float]  # the text's loss before step 1, then after each step: steps + 1 values
    grad_norms: list[float]  # ‖∂L/∂w‖ over all weights at each step, summed in float64: steps values
    loss_rose: bool  # losses[1] > losses[0]: the rate is too large for this text
    text: TextChange  # the text the steps learn
    other: TextChange | None  # a second text, only scored: what else the steps change
    step_seconds: list[float]  # forward, backward and update of each step
    seconds: float  # the whole call, the scoring included
    device: str
    rates: list[float] = field(default_factory=list)  # each step's rate: lr throughout, or the schedule's
    max_norm: float | None = None  # the gradient clipped to this norm (None: not clipped)
    clip_factors: list[float] = field(default_factory=list)  # each step's min(1, max_norm / (‖g‖ + 1e-6))
    warmup: int | None = None  # warm-up steps before the cosine (None: a constant rate)

    def to_dict(self) -> dict:
        return asdict(self)


def cosine_rates(lr: float, steps: int, warmup: int) -> list[float]:
    """Each step's rate under a linear warm-up then a cosine decay to 0, step t = 0, 1, …, steps − 1:
    lr · t / warmup during the warm-up, then lr · ½(1 + cos(π (t − warmup) / (steps − warmup))), as transformers'
    get_cosine_schedule_with_warmup(num_warmup_steps=warmup, num_training_steps=steps). The first step of a
    warm-up has rate 0: the schedule starts from nothing."""
    return [lr * t / warmup if t < warmup else lr * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup)))
            for t in range(steps)]


def clip_factor(norm: float, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s factor: every gradient entry is multiplied by max_norm / (‖g‖ + 1e-6)
    when that is below 1, so the gradient keeps its direction and its norm becomes (about) max_norm."""
    return min(1.0, max_norm / (norm + 1e-6))


SQUARES_CHUNK = 1 << 16  # numbers cast to float64 at a time: a chunk stays in the CPU's cache


def squared_norm(tensor: torch.Tensor) -> float:
    """Σ x² over a tensor, summed in float64. On a CPU a chunk at a time, each cast to float64 and dotted with
    itself: as exact as vector_norm(dtype=float64) (within 1e-13 relative on SmolLM2's embedding gradient) and about
    seven times faster, which casts the whole tensor at once (100 ms for that one matrix, most of a 16-token step's
    update). On a GPU the whole tensor at once: a chunk's .item() would wait for the device each time."""
    if tensor.device.type != "cpu":
        return torch.linalg.vector_norm(tensor, dtype=torch.float64).item() ** 2
    chunks = (chunk.double() for chunk in tensor.reshape(-1).split(SQUARES_CHUNK))
    return math.fsum(torch.dot(chunk, chunk).item() for chunk in chunks)


def descend(module: torch.nn.Module, loss: torch.Tensor, lr: float) -> float:
    """loss.backward(), with each parameter of ``module`` (a private_copy) replaced by w − lr·g as soon as its
    gradient is complete (a post-accumulate-grad hook, PyTorch's "optimizer step in backward"), and that gradient
    then let go: a step holds one set of weights beyond the shared ones and a few matrices' gradients at a time,
    never a whole set of gradients as well. The new weight is written into the gradient's own tensor (torch.add
    with out=: the same kernel, and the same bits, as torch.optim.SGD's param.add_(g, alpha=-lr)), which autograd
    made for this step alone, and put in place of the parameter's: no tensor is allocated and filled for it (on a
    CPU the first write to fresh memory costs about as much again), and nothing that existed before the step, the
    shared storage included, is written. Returns the gradient's norm over every weight, summed in float64: a
    float32 norm of SmolLM2's gradient on the default sentence is 31.36349 where the same float32 gradient's
    length is 31.36463."""
    squares = []

    def update(param: torch.nn.Parameter) -> None:
        squares.append(squared_norm(param.grad))
        param.data = torch.add(param.detach(), param.grad, alpha=-lr, out=param.grad)  # SGD's add_(g, alpha=-lr)
        param.grad = None

    handles = [p.register_post_accumulate_grad_hook(update) for p in module.parameters() if p.requires_grad]
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return math.sqrt(math.fsum(squares))


def _sgd_step(module, input_ids: torch.Tensor, lr: float) -> tuple[torch.Tensor, float]:
    """One SGD step on ``module`` (a private_copy): the text's (N,) -log p before it, and the gradient's norm."""
    nll = F.cross_entropy(_logits(module, input_ids)[:-1], input_ids[1:], reduction="none")
    return nll.detach(), descend(module, nll.mean(), lr)


def _clipped_sgd_step(module, input_ids: torch.Tensor, lr: float, max_norm: float
                      ) -> tuple[torch.Tensor, float, float]:
    """One SGD step with the gradient clipped to ``max_norm``: (the text's -log p before it, ‖g‖, the factor).
    Clipping needs the norm over every weight before any weight moves, so this step keeps a whole set of gradients
    (as torch.optim does), where _sgd_step updates each weight inside the backward pass."""
    nll = F.cross_entropy(_logits(module, input_ids)[:-1], input_ids[1:], reduction="none")
    nll.mean().backward()
    trained = [p for p in module.parameters() if p.grad is not None]
    norm = math.sqrt(math.fsum(squared_norm(p.grad) for p in trained))
    factor = clip_factor(norm, max_norm)
    for param in trained:  # into the gradient's own tensor, as descend does: the shared weights are never written
        param.data = torch.add(param.detach(), param.grad, alpha=-lr * factor, out=param.grad)
        param.grad = None
    return nll.detach(), norm, factor


def sgd_steps(loaded, text: str, lr: float, steps: int = 1, other_text: str | None = None, add_bos: bool = False,
              max_tokens: int = STEP_MAX_TOKENS, progress: Progress | None = None, max_norm: float | None = None,
              warmup: int | None = None) -> SgdSteps:
    """``steps`` steps of SGD at rate ``lr`` on every weight of ``loaded``'s model, to lower ``text``'s loss;
    ``other_text`` (optional) is scored before, after the first step and after the last, never learnt.

    The shared model is not changed (see ``private_copy``). ``progress(fraction, words)`` is called after
    each step. Raises BadInput for a learning rate or a number of steps it cannot use, NothingToScore for a
    text with nothing to predict, and OtherTextUnusable (a NothingToScore) when only ``other_text`` has nothing
    to predict, so that a page can take the steps without it.

    A trainer's two options: ``max_norm`` clips each step's gradient to that norm over every weight
    (torch.nn.utils.clip_grad_norm_), and ``warmup`` sets the rates to a warm-up of that many steps then a cosine
    decay to 0 over the rest (``cosine_rates``), lr being the peak."""
    lr, steps = check_learning_rate(lr), check_steps(steps)
    max_norm, warmup = check_max_norm(max_norm), check_warmup(warmup, steps)
    rates = [lr] * steps if warmup is None else cosine_rates(lr, steps, warmup)
    request = make_request(loaded, text, add_bos, max_tokens=max_tokens)
    try:
        other = make_request(loaded, other_text, add_bos, max_tokens=max_tokens) if other_text is not None else None
    except NothingToScore as problem:
        raise OtherTextUnusable(f"The other text cannot be scored. {problem}") from problem
    ids, other_ids = _ids(loaded, request), _ids(loaded, other) if other else None
    start = time.perf_counter()
    module = private_copy(loaded.model)
    other_scores = [_token_nll(module, other_ids)] if other else []
    scores, norms, factors, step_seconds = [], [], [], []
    for step in range(steps):
        step_start = time.perf_counter()
        if max_norm is None:
            nll, norm = _sgd_step(module, ids, rates[step])
        else:
            nll, norm, factor = _clipped_sgd_step(module, ids, rates[step], max_norm)
            factors.append(factor)
        step_seconds.append(seconds_since(step_start, loaded.device))
        scores.append(nll)
        norms.append(norm)
        if step == 0 and other:
            other_scores.append(_token_nll(module, other_ids))
        if progress:
            progress((step + 1) / steps, f"Step {step + 1} of {steps} done.")
    scores.append(_token_nll(module, ids))
    if other:
        other_scores.append(_token_nll(module, other_ids))
    weights = sum(p.numel() for p in module.parameters())
    del module  # the updated weights: freed before the result is built
    losses = [s.mean().item() for s in scores]
    return SgdSteps(
        model=loaded.name, lr=lr, steps=steps, weights=weights, losses=losses, grad_norms=norms,
        loss_rose=losses[1] > losses[0], text=_text_change(loaded, request, scores[0], scores[1], scores[-1]),
        other=_text_change(loaded, other, *other_scores[:2], other_scores[-1]) if other else None,
        step_seconds=step_seconds, seconds=seconds_since(start, loaded.device), device=loaded.device, rates=rates,
        max_norm=max_norm, clip_factors=factors, warmup=warmup)


# --- 3. AdamW's first step on one matrix ----------------------------------------------------------------

@dataclass
class WeightUpdate:
    """One weight of the matrix through AdamW's first step."""
    chosen_as: str  # why this weight is shown: "largest |g|", "median |g|", ...
    row: int  # the matrix's row: a vocabulary id
    token: str  # that token, readable
    column: int
    weight: float  # w before the step
    gradient: float  # g = ∂L/∂w
    gradient_in_eps: float  # |g| / eps: far above 1, the step is ±lr; far below, about lr·g/eps
    adam_part: float  # −lr · m̂ / (√v̂ + eps) = −lr · g / (|g| + eps) at the first step
    decay_part: float  # −lr · λ · w, the decoupled weight decay
    update: float  # Δw = w after − w before (the two parts, up to float rounding)
    ratio: float  # |Δw| / lr
    sgd_update: float  # −lr · g: what SGD at the same rate would do


@dataclass
class GradientBand:
    """The matrix's weights whose |g| lies in one of STEP_BANDS, and how far AdamW's first step moved them."""
    gradient: str  # the band of |g|, in words
    step: str  # what lr·|g|/(|g| + eps) is in the band, in words
    weights: int
    ratio_mean: float  # mean |Δw| / lr over them (NaN when there is none)


@dataclass
class AdamFirstStep:
    """AdamW's first step (PyTorch's algorithm and defaults: betas (0.9, 0.999), eps 1e-8) on one matrix
    of the model, every other weight left as it is.

    What eps does: Adam keeps m, a running mean of g, and v, a running mean of g², both starting at 0; bias
    correction divides them by 1 − β^t, so at t = 1 m̂ = g and v̂ = g² exactly, and the update
    lr · m̂ / (√v̂ + eps) = lr · g / (|g| + eps). Where |g| is far above eps that is ±lr, the sign of g however
    small or large g is; at |g| = eps it is lr/2; far below eps it is about lr · g / eps, proportional to g as
    SGD's step lr · g is (10⁸ times larger). How many weights are in each regime depends on the text: the rows of
    tokens absent from it that the model gives almost no probability at any position get gradients near eps or
    below (later steps, once m and v average several gradients, differ again). The weight decay
    is decoupled (AdamW): w ← w − lr·λ·w, separately from the gradient's part."""
    model: str
    text: str
    tokens: list[str]
    count: int  # N, the labels of the text's mean loss
    matrix: str  # the parameter's name in the model, e.g. "model.embed_tokens.weight"
    tied: bool  # the output matrix is the input embedding (one tensor): the step changes both
    description: str  # what the matrix is, in words
    shape: tuple[int, int]  # (vocabulary, hidden size)
    weights: int  # its number of weights
    lr: float
    weight_decay: float  # λ
    betas: tuple[float, float]
    eps: float
    loss_before: float  # the text's mean loss, float32
    loss_after: float  # after the step
    sign_like: int  # weights with |g| ≥ SIGN_LIKE · eps: there lr·|g|/(|g| + eps) is within 0.1% of lr
    ratio_mean: float  # |Δw| / lr over those weights: ≈ 1, off by at most λ·|w| (the decay) and 0.1% (eps)
    ratio_min: float  # (the three: NaN when sign_like is 0)
    ratio_max: float
    gradient_min: float  # the smallest |g| among them (NaN when there is none)
    gradient_max: float  # the largest |g|: orders of magnitude apart, for the same |Δw|
    gradient_median: float  # the median |g| over every weight of the matrix
    ratio_mean_all: float  # |Δw| / lr over every weight, those with |g| near or below eps included
    bands: list[GradientBand]  # STEP_BANDS': |g| ≥ SIGN_LIKE·eps, from eps to SIGN_LIKE·eps, below eps
    samples: list[WeightUpdate]  # the weights with the largest |g|, the median |g|, the smallest |g| of at
    #                              least SIGN_LIKE · eps and the smallest |g|, in that order, each weight once
    state_bytes: int  # the optimizer's state for this matrix: m and v, two tensors of its size
    gradient_bytes: int  # the gradient, one more tensor of its size
    seconds: float
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


def output_matrix(model) -> tuple[str, bool, str]:
    """(the output matrix's parameter name, whether the input embedding is that same tensor, in words)."""
    output, embedding = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    tied = output is embedding
    name = next(name for name, p in model.named_parameters() if p is output)  # named_parameters: a tied one once
    if tied:
        return name, True, (f"the tied input-embedding / output matrix ({name}): one tensor, the vocabulary's "
                            "embeddings at the input and its scores at the output")
    return name, False, f"the output matrix ({name}), which this model does not share with its input embedding"


def _adamw_first(weight: torch.Tensor, grad: torch.Tensor, lr: float, weight_decay: float):
    """AdamW at step 1 from zero state, as written in its paper and PyTorch's documentation:
    (new weight, m, v). Decay first (PyTorch's order), then the bias-corrected Adam update. Worked in place
    where it can: a matrix-sized temporary is 108 MiB for SmolLM2, and the call holds at most five."""
    (beta1, beta2), eps = ADAM_BETAS, ADAM_EPS
    m = grad.mul(1 - beta1)  # m_1 = β1·m_0 + (1 − β1)·g, m_0 = 0
    v = grad.square().mul_(1 - beta2)  # v_1 = β2·v_0 + (1 − β2)·g²
    denominator = v.div(1 - beta2).sqrt_().add_(eps)  # √v̂ + eps, v̂ = v_1 / (1 − β2) = g²
    step = m.div(1 - beta1).div_(denominator).mul_(lr)  # lr · m̂ / (√v̂ + eps), m̂ = m_1 / (1 − β1) = g
    del denominator
    return weight.mul(1 - lr * weight_decay).sub_(step), m, v


def _sample(tokenizer, chosen_as: str, flat: int, weight, grad, new, lr: float, weight_decay: float) -> WeightUpdate:
    w, g, w_new = weight.view(-1)[flat].item(), grad.view(-1)[flat].item(), new.view(-1)[flat].item()
    row, column = divmod(flat, weight.shape[1])
    return WeightUpdate(chosen_as=chosen_as, row=row, token=readable_token(tokenizer, row), column=column, weight=w,
                        gradient=g, gradient_in_eps=abs(g) / ADAM_EPS, adam_part=-lr * g / (abs(g) + ADAM_EPS),
                        decay_part=-lr * weight_decay * w, update=w_new - w, ratio=abs(w_new - w) / lr,
                        sgd_update=-lr * g)


def _bands(magnitude: torch.Tensor, ratio: torch.Tensor) -> list[GradientBand]:
    """The weights by |g| (``magnitude``, flat) in the three regimes of lr·|g|/(|g| + eps), with their mean
    |Δw| / lr (``ratio``, flat)."""
    bands = []
    for low, high, gradient, step in STEP_BANDS:
        inside = (magnitude >= low) & (magnitude < high)
        count = int(inside.sum())
        bands.append(GradientBand(gradient=gradient, step=step, weights=count,
                                  ratio_mean=ratio[inside].double().mean().item() if count else math.nan))
    return bands


def _update_statistics(tokenizer, weight, grad, new, lr: float, weight_decay: float) -> dict:
    """AdamFirstStep's fields from sign_like to samples: |Δw| / lr over the matrix, and a few weights."""
    ratio = (new - weight).abs_().div_(lr).view(-1)  # |Δw| / lr of every weight
    magnitude = grad.abs().view(-1)
    sign_like = magnitude >= SIGN_LIKE * ADAM_EPS
    chosen, count = ratio[sign_like], int(sign_like.sum())
    statistics = dict(sign_like=count, ratio_mean=chosen.double().mean().item(),  # NaN where no weight is
                      ratio_min=chosen.min().item() if count else math.nan,
                      ratio_max=chosen.max().item() if count else math.nan,
                      gradient_min=magnitude[sign_like].min().item() if count else math.nan,
                      gradient_max=magnitude.max().item(), ratio_mean_all=ratio.double().mean().item(),
                      bands=_bands(magnitude, ratio))
    del ratio, chosen
    median = magnitude.kthvalue((magnitude.numel() + 1) // 2)
    statistics["gradient_median"] = median.values.item()
    picks = [("largest |g|", magnitude.argmax().item()), ("median |g|", median.indices.item()),
             ("smallest |g|", magnitude.argmin().item())]
    if count:  # the smallest sign-like |g|, third; masked_fill_ overwrites magnitude, so it comes last
        picks.insert(2, (f"smallest |g| ≥ {SIGN_LIKE:,} eps",
                         magnitude.masked_fill_(~sign_like, math.inf).argmin().item()))
    firsts = {}  # each weight once, named by the first reason it was picked
    for chosen_as, flat in picks:
        firsts.setdefault(flat, chosen_as)
    statistics["samples"] = [_sample(tokenizer, chosen_as, flat, weight, grad, new, lr, weight_decay)
                             for flat, chosen_as in firsts.items()]
    return statistics


def adamw_first_step(loaded, text: str, lr: float = 1e-3, weight_decay: float = 0.01, add_bos: bool = False,
                     max_tokens: int = STEP_MAX_TOKENS) -> AdamFirstStep:
    """One AdamW step (see AdamFirstStep) on ``loaded``'s output matrix only, to lower ``text``'s loss.

    The matrix alone keeps the optimizer's state small: m and v for SmolLM2's 49 152 × 576 matrix are 2 ×
    108 MiB, where the whole model's would be 2 × 513 MiB. The shared model is not changed (see
    ``private_copy``). Raises BadInput for a rate or a decay it cannot use, NothingToScore for a text with
    nothing to predict."""
    lr, weight_decay = check_learning_rate(lr), check_weight_decay(weight_decay)
    request = make_request(loaded, text, add_bos, max_tokens=max_tokens)
    input_ids = _ids(loaded, request)
    start = time.perf_counter()
    name, tied, description = output_matrix(loaded.model)
    module = private_copy(loaded.model, trainable=lambda parameter: parameter == name)
    param = module.get_parameter(name)
    loss = F.cross_entropy(_logits(module, input_ids)[:-1], input_ids[1:])
    loss.backward()
    weight, grad = param.detach(), param.grad
    new, m, v = _adamw_first(weight, grad, lr, weight_decay)
    state_bytes, gradient_bytes, shape = m.nbytes + v.nbytes, grad.nbytes, tuple(weight.shape)
    del m, v
    statistics = _update_statistics(loaded.tokenizer, weight, grad, new, lr, weight_decay)
    param.grad = None
    del grad  # freed before the next forward pass
    param.data = new  # the private parameter now holds the new matrix; the shared one is untouched
    loss_after = _token_nll(module, input_ids).mean().item()
    return AdamFirstStep(
        model=loaded.name, text=request.text, tokens=_tokens(loaded, request), count=len(request.ids) - 1,
        matrix=name, tied=tied, description=description, shape=shape, weights=math.prod(shape), lr=lr,
        weight_decay=weight_decay, betas=ADAM_BETAS, eps=ADAM_EPS, loss_before=loss.item(),
        loss_after=loss_after, state_bytes=state_bytes, gradient_bytes=gradient_bytes,
        seconds=seconds_since(start, loaded.device), device=loaded.device, **statistics)
