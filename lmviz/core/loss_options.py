"""The cross-entropy's own options, as a 2026 trainer exposes them: label smoothing, the z-loss, logit soft-capping,
and each position's entropy beside its -log p.

Every function takes logits (N, V) and labels (N,), never a model, and computes in float64 where the logits are
float64 (the toy) and float32 otherwise (as ``token_cross_entropy`` does). The order is a trainer's: the logits are
soft-capped first (Gemma's ``final_logit_softcapping`` and nanochat cap the model's output before any loss), then the
cross-entropy, label-smoothed or not, and the z-loss are computed from the capped logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lmviz.core.labels import IGNORE_INDEX
from lmviz.errors import LearnerError

PALM_Z_LOSS = 1e-4  # PaLM's z-loss coefficient, which OLMo-core's z_loss_multiplier also defaults to
GEMMA_SOFT_CAP = 30.0  # Gemma 2's final_logit_softcapping
NANOCHAT_SOFT_CAP = 15.0  # nanochat's cap on its logits


class BadOption(LearnerError, ValueError):
    """A setting no trainer accepts, said in one sentence."""


@dataclass(frozen=True)
class LossOptions:
    """What a trainer's configuration sets: ε of ``F.cross_entropy(label_smoothing=ε)``, the z-loss coefficient
    (0: off), the soft-cap c (None: off), and, to show what the z-loss reacts to, a constant added to every logit
    before anything else (a model could shift its logits so and its cross-entropy would not see it)."""

    label_smoothing: float = 0.0
    z_loss: float = 0.0
    soft_cap: float | None = None
    shift: float = 0.0


def check_options(options: LossOptions) -> None:
    """BadOption, one sentence, for settings no trainer accepts."""
    if not 0.0 <= options.label_smoothing <= 1.0:
        raise BadOption(f"Label smoothing ε must be between 0 and 1 (PyTorch's range); got {options.label_smoothing}.")
    if not (math.isfinite(options.z_loss) and options.z_loss >= 0.0):
        raise BadOption(f"The z-loss coefficient must be 0 or more; got {options.z_loss}.")
    if options.soft_cap is not None and not (math.isfinite(options.soft_cap) and options.soft_cap > 0.0):
        raise BadOption(f"A soft-cap must be a number above 0; got {options.soft_cap}.")
    if not math.isfinite(options.shift):
        raise BadOption(f"The shift added to every logit must be a finite number; got {options.shift}.")


def soft_cap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """c·tanh(z/c): about z where |z| is well below c, never past ±c. None leaves the logits as they are."""
    return logits if cap is None else cap * torch.tanh(logits / cap)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...): H = −Σ_v p_v log p_v in nats, a p of 0 adding 0 (its logit −∞ would give 0·∞)."""
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    return -torch.where(p > 0, p * log_p, torch.zeros_like(p)).sum(dim=-1)


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, epsilon: float,
                           ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, dict]:
    """The label-smoothed cross-entropy, PyTorch's definition written out: the target is (1 − ε) on the label plus
    ε/C on every one of the C classes (the label included), so each position's loss is
    (1 − ε)·(−log p_label) + ε·(1/C)·Σ_c (−log p_c).

    logits (N, V), labels (N,). Returns (mean over the counted positions, detail) with each position's ``nll``,
    ``uniform`` (the mean −log p over all C classes) and ``loss``.
    """
    counted = labels != ignore_index
    log_p = torch.log_softmax(logits, dim=-1)  # (N, V)
    nll = -log_p.gather(-1, labels.masked_fill(~counted, 0).unsqueeze(-1)).squeeze(-1)  # (N,)
    uniform = -log_p.mean(dim=-1)  # (N,): ∞ where some class has p = 0
    per_position = (1 - epsilon) * nll + (epsilon * uniform if epsilon else 0.0)  # ε = 0 never meets 0·∞
    per_position = torch.where(counted, per_position, torch.zeros_like(per_position))
    loss = per_position.sum() / counted.sum()
    return loss, {"nll": nll, "uniform": uniform, "loss": per_position, "counted": counted}


def z_loss(logits: torch.Tensor, coefficient: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PaLM's auxiliary loss per position, coefficient·(log Z)², where log Z = logsumexp(z) is the softmax's
    normaliser; returns (per-position z-loss, log Z). It is 0 only where log Z is 0, i.e. where the exponentiated
    logits already sum to 1."""
    log_z = torch.logsumexp(logits, dim=-1)
    return coefficient * log_z**2, log_z


@dataclass
class OptionRow:
    """One position under a trainer's options."""

    position: int
    label: int
    nll: float  # −log p(label) with the logits as the model gave them: the plain loss's term
    entropy: float  # H of the same distribution
    capped_nll: float  # −log p(label) after the shift and the soft-cap (= nll when both are off)
    capped_entropy: float
    uniform: float  # the mean −log p over all C classes, after the cap: label smoothing's other term
    smoothed: float  # (1 − ε)·capped_nll + ε·uniform
    log_z: float  # logsumexp of the shifted, capped logits
    z_term: float  # coefficient·log_z²
    largest_logit: float  # after the shift and the cap: never past ±c


@dataclass
class OptionLoss:
    """A trainer's loss on (N, V) logits, its parts and the plain cross-entropy beside it."""

    options: LossOptions
    classes: int  # C, over which label smoothing spreads ε
    rows: list[OptionRow]  # one per counted position
    plain: float  # mean −log p(label), no option
    cross_entropy: float  # mean of the smoothed terms (= mean capped_nll at ε = 0)
    z_loss: float  # mean of the z-terms
    total: float  # cross_entropy + z_loss: what the trainer minimises
    mean_entropy: float


def with_options(logits: torch.Tensor, labels: torch.Tensor | list[int], options: LossOptions,
                 ignore_index: int = IGNORE_INDEX) -> OptionLoss:
    """The loss a trainer configured with ``options`` computes on ``logits`` (N, V) for ``labels`` (N,), every part
    of it per position. The plain loss is computed from the same logits with every option off."""
    check_options(options)
    labels = torch.as_tensor(labels)
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (N, V) and labels (N,); got {tuple(logits.shape)} and {tuple(labels.shape)}.")
    if logits.dtype != torch.float64:
        logits = logits.float()
    counted = labels != ignore_index
    if not bool(counted.any()):
        raise ValueError("No position counts towards the loss (every label is ignored), so the mean is undefined.")
    with torch.no_grad():
        _, plain = smoothed_cross_entropy(logits, labels, 0.0, ignore_index)
        moved = soft_cap(logits + options.shift, options.soft_cap)  # (N, V)
        loss, smoothed = smoothed_cross_entropy(moved, labels, options.label_smoothing, ignore_index)
        _, capped = smoothed_cross_entropy(moved, labels, 0.0, ignore_index)
        z_terms, log_z = z_loss(moved, options.z_loss)
        plain_entropy, capped_entropy = entropy(logits), entropy(moved)
        largest = moved.max(dim=-1).values
    rows = [OptionRow(position=t, label=int(labels[t]), nll=float(plain["nll"][t]), entropy=float(plain_entropy[t]),
                      capped_nll=float(capped["nll"][t]), capped_entropy=float(capped_entropy[t]),
                      uniform=float(smoothed["uniform"][t]), smoothed=float(smoothed["loss"][t]),
                      log_z=float(log_z[t]), z_term=float(z_terms[t]), largest_logit=float(largest[t]))
            for t in range(len(labels)) if counted[t]]
    n = len(rows)
    mean_z = sum(r.z_term for r in rows) / n
    return OptionLoss(options=options, classes=logits.shape[-1], rows=rows, plain=sum(r.nll for r in rows) / n,
                      cross_entropy=float(loss), z_loss=mean_z, total=float(loss) + mean_z,
                      mean_entropy=sum(r.entropy for r in rows) / n)
