"""Reinforcement learning with verifiable rewards, by numbers: GRPO, PPO's clip, the KL, the reward model.

GRPO (DeepSeekMath, Shao et al. 2024) samples a group of G answers to one prompt, scores each with a reward
rule, and turns the rewards into advantages by comparing each answer with its group: no value model. Each
answer token then gets PPO's clipped term (Schulman et al. 2017) with that advantage, plus β times an estimate
of the KL to a reference model, and the per-token terms are averaged into one loss. The names and the
arithmetic follow TRL's ``GRPOTrainer`` (``scale_rewards``, ``epsilon``/``epsilon_high``, ``beta``,
``importance_sampling_level``, ``loss_type``, ``use_bias_correction_kl``, ``num_iterations``); what TRL does by
default is stated once, in ``TRL``. Where TRL's choice and a paper's differ, both are computed:

- ``advantages``: r − mean, ÷ the population std, ÷ the sample std (DeepSeekMath writes "std" without saying
  which), TRL's 1e-4 optional. TRL's scale_rewards (GRPOTrainer._generate_and_score_completions, with its default
  multi_objective_aggregation "sum_then_normalize") always subtracts the group's mean; "group", its default (True
  means it too), then divides by the group's std + 1e-4, the std of TRL's nanstd (trl/trainer/utils.py), which
  leaves NaN rewards out and applies Bessel's correction, as torch.std does; "batch" divides by that std over
  every reward of the batch, every group together, + 1e-4 (not computed here: the page has one group); "none"
  (False) divides by nothing: Dr. GRPO's r − mean;
- ``clip_terms``: per token, the ratio r = exp(log π_θ − log π_old), r·A, clip(r, 1 − ε_low, 1 + ε_high)·A,
  which one the min takes, −min(...), and the k3 KL estimate, plain (DeepSeekMath) or times r (TRL's bias
  correction); token-level ratios or GSPO's sequence-level one; ``answer_ratios``: an answer's one ratio GSPO's
  way (the geometric mean of its tokens' ratios) and RLOO's (their product);
- ``aggregate``: five of the ways TRL's ``loss_type`` averages the per-token terms into one loss (its cispo,
  sapo and vespo change the per-token term itself: ``cispo`` computes cispo's; sapo and vespo are named only);
- ``bradley_terry`` and ``dpo_as_bradley_terry``: the reward model's loss, and DPO as that same loss.

The functions on plain numbers (``advantages``, ``group_loss``, ``bradley_terry``) return dataclasses whose
fields a page can write out as arithmetic; ``clip_terms`` and ``aggregate`` work on tensors so that a step can
differentiate them.

With a model: ``sample_group`` (G answers drawn with the chat template, seeded), the reward rules
(``contains_number``, ``contains_word``, ``at_most_tokens``), ``token_logprobs`` and
``group_logprobs`` (log π of each answer token, at the sampling temperature, as TRL computes them), and
``grpo_step``: μ steps of gradient descent on the same group's loss (TRL's num_iterations), on
lmviz.lessons.gradient_step's private copy of the weights (the shared model never changes), each update's terms
kept, and the group scored again after the last.
"""

from __future__ import annotations

import inspect
import math
import re
import textwrap
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from lmviz.core.text import readable_token, valid_text
from lmviz.core.trl import (
    BNPO,
    CISPO,
    CISPO_EPSILON_MAX,
    DAPO,
    DAPO_EPSILON_HIGH,
    DR_GRPO,
    GRPO,
    LUSPO,
    SAPO,
    SEQUENCE,
    TOKEN,
    TRL,
    VESPO,
)
from lmviz.errors import BadInput, ChatTemplateError, NoChatTemplate, NothingToScore
from lmviz.lessons.causal_lm import length_limit, seconds_since
from lmviz.lessons.chat_loss import minus_log_sigmoid
from lmviz.lessons.gradient_step import Progress, check_learning_rate, descend, private_copy, return_freed_memory
from lmviz.lessons.next_token import MAX_TEMPERATURE, MIN_TEMPERATURE

MEAN, POPULATION_STD, SAMPLE_STD = "mean", "population std", "sample std"
SCALINGS = (MEAN, POPULATION_STD, SAMPLE_STD)
LOSS_TYPES = (GRPO, BNPO, DR_GRPO, DAPO, LUSPO)  # the loss types lmviz computes: TRL's that average the clipped term
TRL_STD_EPS = TRL.std_eps
DEFAULT_EPSILON = TRL.epsilon  # PPO's clip
# DeepSeekMath's GRPO used β = 0.04; TRL defaults to 0 (TRL.beta), DeepSeek-R1 used 0.001. The page keeps
# DeepSeekMath's, so that the KL term has something to show.
DEFAULT_BETA = 0.04
# GSPO's paper (Zheng et al. 2025) clips its sequence ratio to [1 − 3e-4, 1 + 4e-4]: a mean of log-ratios moves far
# less than one token's, so PPO's 0.2 seldom binds on it. Its loss, the mean over answers of each answer's term, is
# loss_type grpo at sequence level (every token of an answer has the same term)
GSPO_EPSILON_LOW, GSPO_EPSILON_HIGH = 3e-4, 4e-4
LOSS_TYPE_SOURCES = {
    GRPO: "GRPO as published (DeepSeekMath, Shao et al. 2024): the mean over each answer's tokens, then the mean "
          "over the answers (TRL's docs: not recommended, for its length bias)",
    BNPO: "TRL's batch-normalised loss: the sum over every token of the local batch ÷ their count",
    DR_GRPO: "Dr. GRPO (Liu et al. 2025, Understanding R1-Zero-Like Training): the sum over every token ÷ "
             "(G × the completion length limit), a constant",
    DAPO: "DAPO's token-level averaging (Yu et al. 2025), TRL's default: the sum over every token ÷ the number of "
          "tokens of the whole batch (for one group, the same as bnpo); only the averaging, not DAPO's clip-higher, "
          "dynamic sampling or overlong reward shaping",
    LUSPO: "LUSPO (2026): each answer's sum over its tokens, then the mean over the answers: a token weighs 1 / G "
           "whatever its answer's length (TRL meant it for sequence-level ratios)",
}
TRL_OTHER_LOSS_TYPES = {
    CISPO: "MiniMax-M1's, in the form of ScaleRL (the paper TRL's epsilon_high help cites): the ratio, capped "
           "above at ε_max and detached, times A times log π_θ, in place of the clipped term (MiniMax-M1's paper clips "
           "that weight on both sides)",
    SAPO: "a smooth, temperature-controlled gate on the ratio in place of the hard clip",
    VESPO: "a smooth Gamma-shaped weight of the answer's ratio in place of the hard clip",
}
MIN_GROUP, MAX_GROUP = 2, 16  # a group compares at least two answers; the page offers up to 16
# Each new token is one forward pass of the whole group: SmolLM2 drew 8 answers of 12 tokens in ~25 s on two busy
# cores (issue 31's measurement, and this module's), so 64 tokens is already minutes there.
MAX_NEW_TOKENS = 64


# --- advantages -------------------------------------------------------------------------------------------

@dataclass
class Advantages:
    """A group's rewards turned into advantages, with every step of the arithmetic.

    A_i = (r_i − mean) for "mean" (Dr. GRPO), (r_i − mean) / (std + eps) for the two others; the std is
    √(Σ (r_i − mean)² / divisor), divisor G (population) or G − 1 (sample, Bessel's correction: torch.std's
    and TRL's). A group whose rewards are all equal has every advantage exactly 0: it teaches nothing."""
    how: str
    rewards: list[float]
    count: int  # G
    total: float  # Σ r_i
    mean: float  # total / G
    deviations: list[float]  # r_i − mean
    squares: list[float]  # (r_i − mean)²
    divisor: int | None  # G or G − 1; None for "mean"
    variance: float | None  # Σ squares / divisor
    std: float | None  # √variance
    eps: float  # added to the std before dividing (0 unless asked; TRL adds TRL_STD_EPS)
    denominator: float | None  # std + eps: what each deviation is divided by; None for "mean"
    advantages: list[float]
    teaches_nothing: bool  # every reward is equal: every advantage is 0, and so is the clipped term's gradient

    def to_dict(self) -> dict:
        return asdict(self)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_rewards(rewards) -> list[float]:
    rewards = list(rewards)
    if len(rewards) < MIN_GROUP or not all(_is_number(r) for r in rewards):
        raise BadInput(f"A group needs at least {MIN_GROUP} rewards, each a finite number; got {rewards!r}.")
    return [float(r) for r in rewards]


def advantages(rewards, how: str = SAMPLE_STD, eps: float = 0.0) -> Advantages:
    """The advantages of a group's ``rewards``, scaled as ``how`` says (one of SCALINGS).

    ``eps`` defaults to 0, not TRL's 1e-4, so that the page's arithmetic is the arithmetic a learner does by
    hand: with 1e-4 the HF course's ±0.935 becomes ±0.9352 (0.5 / 0.5346). TRL adds it only so that a group of
    equal rewards does not divide 0 by 0; here such a group is recognised by its rewards and given exactly 0
    (``teaches_nothing``), what TRL's 0 / 1e-4 gives too. Pass eps=TRL_STD_EPS for TRL's own numbers."""
    rewards = _check_rewards(rewards)
    if how not in SCALINGS:
        raise BadInput(f"The advantage is scaled by one of: {', '.join(SCALINGS)}; got {how!r}.")
    if not _is_number(eps) or eps < 0:
        raise BadInput(f"The eps added to the standard deviation must be a number of at least 0; got {eps!r}.")
    count, total = len(rewards), math.fsum(rewards)
    mean = total / count
    # Equal rewards give deviations of exactly 0 only where the mean is exact: 0.1 × 3 / 3 is not 0.1 in floats
    teaches_nothing = all(r == rewards[0] for r in rewards)
    deviations = [0.0] * count if teaches_nothing else [r - mean for r in rewards]
    squares = [d * d for d in deviations]
    if how == MEAN:
        return Advantages(how, rewards, count, total, mean, deviations, squares, None, None, None, float(eps), None,
                          list(deviations), teaches_nothing)
    divisor = count if how == POPULATION_STD else count - 1
    variance = math.fsum(squares) / divisor
    std = math.sqrt(variance)
    denominator = std + eps
    scaled = [0.0] * count if teaches_nothing else [d / denominator for d in deviations]
    return Advantages(how, rewards, count, total, mean, deviations, squares, divisor, variance, std, float(eps),
                      denominator, scaled, teaches_nothing)


def leave_one_out(rewards) -> list[float]:
    """RLOO's advantages (Ahmadian et al. 2024; TRL's RLOOTrainer): each answer's reward minus the mean of the other
    G − 1 rewards of its group, A_i = r_i − (Σ_j r_j − r_i) / (G − 1), which is G / (G − 1) · (r_i − mean): no
    standard deviation, and an answer is never compared with itself."""
    rewards = _check_rewards(rewards)
    count, total = len(rewards), math.fsum(rewards)
    if all(r == rewards[0] for r in rewards):
        return [0.0] * count  # as in advantages: a group of equal rewards teaches nothing, exactly
    return [r - (total - r) / (count - 1) for r in rewards]


# --- the clipped surrogate, per token ----------------------------------------------------------------------

def check_clip(epsilon_low: float, epsilon_high: float, level: str, beta: float) -> None:
    for name, value in (("epsilon", epsilon_low), ("epsilon_high", epsilon_high)):
        if not _is_number(value) or not 0 <= value < 1:
            raise BadInput(f"The clip range's {name} must be a number from 0 to below 1 (for example 0.2); "
                           f"got {value!r}.")
    if level not in (TOKEN, SEQUENCE):
        raise BadInput(f"The ratio is taken per {TOKEN} or per {SEQUENCE}; got {level!r}.")
    if not _is_number(beta) or beta < 0:
        raise BadInput(f"The KL weight beta must be a number of at least 0 (for example 0.04); got {beta!r}.")


def clip_terms(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
               epsilon_low: float = DEFAULT_EPSILON, epsilon_high: float | None = None, level: str = TOKEN,
               logp_ref: torch.Tensor | None = None, beta: float = 0.0,
               kl_bias_correction: bool = False) -> dict[str, torch.Tensor]:
    """Every answer token's terms of the GRPO loss, as TRL's GRPOTrainer computes them.

    logp_new, logp_old (and logp_ref): (G, L) log-probabilities of each answer's tokens under π_θ (the policy
    being trained), π_old (the one that sampled) and π_ref (the reference); advantages: (G,); mask: (G, L),
    1 where an answer has a token, 0 where it is padding. epsilon_high None means epsilon_low (PPO's
    symmetric clip). level TOKEN: each token's own ratio; SEQUENCE (GSPO, Zheng et al. 2025): one ratio per
    answer, exp of the mean over its tokens of log π_θ − log π_old, for each of its tokens.

    Returns (G, L) tensors: log_ratio, the exponent (per token, or its answer's mean); ratio; unclipped r·A;
    clipped clip(r, 1 − ε_low, 1 + ε_high)·A; takes_clipped (the min takes the clipped term, strictly: TRL's
    "region clipped", where the token's gradient is 0); surrogate −min(unclipped, clipped); kl, the k3 estimate
    exp(ref − logp) − (ref − logp) − 1 (zeros without logp_ref); kl_term, what β multiplies: k3, or k3 × r with
    ``kl_bias_correction`` (TRL's use_bias_correction_kl); loss = surrogate + β·kl_term. Padding positions are
    0 everywhere. Differentiable with respect to logp_new."""
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    check_clip(epsilon_low, epsilon_high, level, beta)
    mask = mask.to(logp_new.dtype)
    log_ratio = (logp_new - logp_old) * mask
    if level == SEQUENCE:  # TRL: (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        log_ratio = (log_ratio.sum(-1) / mask.sum(-1).clamp(min=1.0))[:, None].expand_as(mask)
    ratio = torch.exp(log_ratio)
    advantage = advantages.to(logp_new.dtype)[:, None]
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * advantage
    surrogate = -torch.min(unclipped, clipped)
    if logp_ref is None:
        kl = torch.zeros_like(logp_new)
    else:
        gap = logp_ref - logp_new
        # k3 (Schulman, "Approximating KL divergence"): ≥ 0; its mean over tokens drawn from π_θ is KL(π_θ‖π_ref).
        # The tokens were drawn from π_old: once π_θ has moved, weighing k3 by the ratio π_θ/π_old restores that
        # (TRL's use_bias_correction_kl), and makes its gradient the reverse KL's
        kl = torch.exp(gap) - gap - 1
    kl_term = kl * ratio if kl_bias_correction else kl
    return {"log_ratio": log_ratio * mask, "ratio": ratio * mask, "unclipped": unclipped * mask,
            "clipped": clipped * mask, "takes_clipped": (clipped < unclipped) & (mask > 0),
            "surrogate": surrogate * mask, "kl": kl * mask, "kl_term": kl_term * mask,
            "loss": (surrogate + beta * kl_term) * mask}


def aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str = GRPO,
              max_completion_length: int | None = None) -> torch.Tensor:
    """One loss from the (G, L) per-token terms, as TRL's ``loss_type`` says (see LOSS_TYPE_SOURCES).

    GRPO: each answer's mean over its own tokens, then the mean over the G answers: a token of a short answer
    weighs more than one of a long answer (the length bias Dr. GRPO points out). BNPO and DAPO: the sum over
    every token ÷ how many there are: every token weighs the same (TRL's dapo divides by the tokens of the
    whole batch across devices and accumulation steps; for one group that is bnpo). DR_GRPO: the sum ÷
    (G × max_completion_length), the generation's token limit (None: the padded width L), a constant. LUSPO:
    each answer's sum, then the mean over the G answers: every token weighs 1 / G."""
    if loss_type not in LOSS_TYPES:
        raise BadInput(f"The loss type must be one of: {', '.join(LOSS_TYPES)}; got {loss_type!r}.")
    mask = mask.to(per_token_loss.dtype)
    summed = (per_token_loss * mask).sum(-1)  # (G,)
    if loss_type == GRPO:
        return (summed / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type in (BNPO, DAPO):
        return summed.sum() / mask.sum().clamp(min=1.0)
    if loss_type == LUSPO:
        return summed.mean()
    return summed.sum() / (mask.shape[0] * (max_completion_length or mask.shape[1]))


# --- the same on plain numbers, for a page ---------------------------------------------------------------

@dataclass
class TokenTerms:
    """One answer token's terms of the GRPO loss, and its gradient."""
    answer: int  # which answer of the group
    position: int  # the token's index in its answer
    logp_new: float  # log π_θ
    logp_old: float  # log π_old
    log_ratio: float  # the exponent of ratio: log π_θ − log π_old, or the answer's mean of it (level "sequence")
    ratio: float  # exp(log_ratio)
    advantage: float  # A of its answer
    unclipped: float  # ratio · A
    clipped: float  # clip(ratio, 1 − ε_low, 1 + ε_high) · A
    takes_clipped: bool  # the min is the clipped term (strictly smaller): the clipped term's gradient is 0
    logp_ref: float | None  # log π_ref, where a reference is given
    kl: float  # the k3 estimate exp(ref − new) − (ref − new) − 1 (0 without a reference)
    weighted_kl: float  # β · kl_term: β · k3, or β · k3 · ratio with the bias correction
    loss: float  # −min(unclipped, clipped) + weighted_kl
    surrogate_gradient: float  # ∂(the loss's clipped part)/∂ log π_θ of this token, under GroupLoss.loss_type
    kl_gradient: float  # ∂(the loss's β·KL part)/∂ log π_θ: > 0 pulls the token's log π down towards π_ref


@dataclass
class Aggregation:
    """One of TRL's loss types on the group: the per-token terms' sum, what it is divided by, and the loss."""
    loss_type: str
    source: str  # which paper, in words (LOSS_TYPE_SOURCES)
    loss: float
    token_weights: list[float]  # what one token of each answer weighs in the loss: its factor before the sum


@dataclass
class GroupLoss:
    """The GRPO loss of one group, token by token, and aggregated each way lmviz computes."""
    level: str
    epsilon_low: float
    epsilon_high: float
    beta: float
    kl_bias_correction: bool
    loss_type: str  # the one whose gradient the tokens' surrogate_gradient and kl_gradient are
    advantages: list[float]
    lengths: list[int]  # each answer's token count
    max_completion_length: int  # dr_grpo's constant
    tokens: list[list[TokenTerms]]  # per answer, per token
    answer_means: list[float]  # each answer's mean of the per-token loss
    answer_sums: list[float]  # each answer's sum
    token_count: int  # all answer tokens of the group
    clip_unit: str  # "token", or "answer" at sequence level, where one ratio is clipped for all its tokens
    clip_total: int  # how many units: token_count, or G
    clipped_low: int  # units with r < 1 − ε_low and A < 0: TRL's clip_ratio/low_mean × clip_total
    clipped_high: int  # units with r > 1 + ε_high and A > 0: clip_ratio/high_mean × clip_total
    clipped_count: int  # the two together: the units whose min takes the clipped term
    clip_fraction: float  # clipped_count / clip_total: TRL's clip_ratio/region_mean
    mean_kl: float  # the mean over every token of kl_term (k3, or k3 × r when corrected): TRL's logged "kl"
    losses: dict[str, Aggregation]  # by loss type

    def to_dict(self) -> dict:
        return asdict(self)


def _padded(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([[float(x) for x in row] + [0.0] * (width - len(row)) for row in rows], dtype=torch.float64)


def _check_group_logps(logp_new, logp_old, advantages, logp_ref) -> None:
    given = [logp_new, logp_old] + ([logp_ref] if logp_ref is not None else [])
    if not logp_new or len({len(g) for g in given} | {len(advantages)}) != 1:
        raise BadInput("Each answer of the group needs its log-probabilities and its advantage.")
    for answer in range(len(logp_new)):
        if len({len(g[answer]) for g in given}) != 1 or not logp_new[answer]:
            raise BadInput(f"Answer {answer + 1} needs one log-probability per token, the same count under each "
                           "policy, and at least one token.")
    if not all(_is_number(x) for g in given for row in g for x in row) or not all(_is_number(a) for a in advantages):
        raise BadInput("Each log-probability and each advantage must be a finite number.")


def group_loss(logp_new: list[list[float]], logp_old: list[list[float]], advantages: list[float],
               epsilon_low: float = DEFAULT_EPSILON, epsilon_high: float | None = None, level: str = TOKEN,
               logp_ref: list[list[float]] | None = None, beta: float = 0.0,
               max_completion_length: int | None = None, loss_type: str = TRL.loss_type,
               kl_bias_correction: bool = False) -> GroupLoss:
    """``clip_terms`` and ``aggregate`` on plain numbers, in float64: one list of per-token log-probabilities
    per answer (their own lengths), one advantage per answer. max_completion_length (dr_grpo's constant)
    defaults to the longest answer; a page passes the generation's token limit, as TRL does. Each token also gets
    the gradient of the ``loss_type`` loss with respect to its log π_θ, split into the clipped term's part and
    the KL's (autograd on these float64 terms)."""
    _check_group_logps(logp_new, logp_old, advantages, logp_ref)
    if loss_type not in LOSS_TYPES:
        raise BadInput(f"The loss type must be one of: {', '.join(LOSS_TYPES)}; got {loss_type!r}.")
    lengths = [len(row) for row in logp_new]
    width = max(lengths)
    limit = width if max_completion_length is None else max_completion_length
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < width:
        raise BadInput(f"The completion length limit must be a whole number of at least the longest answer's "
                       f"{width} tokens; got {max_completion_length!r}.")
    mask = _padded([[1.0] * n for n in lengths], width)
    new, old = _padded(logp_new, width).requires_grad_(True), _padded(logp_old, width)
    ref = None if logp_ref is None else _padded(logp_ref, width)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    adv = torch.tensor(advantages, dtype=torch.float64)
    terms = clip_terms(new, old, adv, mask, epsilon_low, epsilon_high, level, ref, beta, kl_bias_correction)
    gradients = [torch.autograd.grad(aggregate(part, mask, loss_type, limit), new, retain_graph=True)[0]
                 if part.requires_grad else torch.zeros_like(mask)  # without a reference the KL term is a constant 0
                 for part in (terms["surrogate"], beta * terms["kl_term"])]
    terms = {k: v.detach() for k, v in terms.items()}
    values = {k: v.tolist() for k, v in terms.items()}
    tokens = [[TokenTerms(answer=i, position=t, logp_new=new[i, t].item(), logp_old=old[i, t].item(),
                          log_ratio=values["log_ratio"][i][t], ratio=values["ratio"][i][t],
                          advantage=float(advantages[i]), unclipped=values["unclipped"][i][t],
                          clipped=values["clipped"][i][t], takes_clipped=values["takes_clipped"][i][t],
                          logp_ref=None if ref is None else ref[i, t].item(), kl=values["kl"][i][t],
                          weighted_kl=beta * values["kl_term"][i][t], loss=values["loss"][i][t],
                          surrogate_gradient=gradients[0][i, t].item(), kl_gradient=gradients[1][i, t].item())
               for t in range(n)] for i, n in enumerate(lengths)]
    count, groups = sum(lengths), len(lengths)
    weights = {GRPO: [1 / (groups * n) for n in lengths], BNPO: [1 / count] * groups, DAPO: [1 / count] * groups,
               DR_GRPO: [1 / (groups * limit)] * groups, LUSPO: [1 / groups] * groups}
    losses = {kind: Aggregation(kind, LOSS_TYPE_SOURCES[kind], aggregate(terms["loss"], mask, kind, limit).item(),
                                weights[kind]) for kind in LOSS_TYPES}
    sums = (terms["loss"] * mask).sum(-1)
    low, high = _clipped_units(terms, adv, level)
    total = count if level == TOKEN else groups
    return GroupLoss(
        level=level, epsilon_low=float(epsilon_low), epsilon_high=float(epsilon_high), beta=float(beta),
        kl_bias_correction=kl_bias_correction, loss_type=loss_type, advantages=[float(a) for a in advantages],
        lengths=lengths, max_completion_length=limit, tokens=tokens,
        answer_means=[s / n for s, n in zip(sums.tolist(), lengths)], answer_sums=sums.tolist(), token_count=count,
        clip_unit=TOKEN if level == TOKEN else "answer", clip_total=total, clipped_low=low, clipped_high=high,
        clipped_count=low + high, clip_fraction=(low + high) / total,
        mean_kl=(terms["kl_term"].sum() / count).item(), losses=losses)


def _clipped_units(terms: dict, advantages: torch.Tensor, level: str) -> tuple[int, int]:
    """How many tokens (answers, at sequence level: TRL counts each answer's one ratio once) the min clips from
    below (A < 0) and from above (A > 0)."""
    taken = terms["takes_clipped"]
    if level == SEQUENCE:
        taken = taken.any(-1)
        below = taken & (advantages < 0)
    else:
        below = taken & (advantages[:, None] < 0)
    return int(below.sum()), int((taken & ~below).sum())


# --- what other trainers change: clip-higher, CISPO, the overlong penalty --------------------------------------

def rescored(loss: GroupLoss, **settings) -> GroupLoss:
    """``loss``'s tokens, their log π_θ, log π_old and log π_ref, scored again with other ``settings`` (any of
    group_loss's: epsilon_low, epsilon_high, beta, level, ...): arithmetic on the numbers, not the model."""
    rows = {name: [[getattr(t, name) for t in answer] for answer in loss.tokens]
            for name in ("logp_new", "logp_old", "logp_ref")}
    has_ref = all(x is not None for row in rows["logp_ref"] for x in row)
    kept = dict(epsilon_low=loss.epsilon_low, epsilon_high=loss.epsilon_high, level=loss.level, beta=loss.beta,
                max_completion_length=loss.max_completion_length, loss_type=loss.loss_type,
                kl_bias_correction=loss.kl_bias_correction)
    return group_loss(rows["logp_new"], rows["logp_old"], loss.advantages,
                      logp_ref=rows["logp_ref"] if has_ref else None, **(kept | settings))


@dataclass
class AnswerRatio:
    """One answer's one ratio, as the two trainers that give an answer a single ratio take it."""
    log_ratios: list[float]  # log π_θ − log π_old of each of its tokens
    gspo: float  # e^(their mean): the geometric mean of its tokens' ratios (TRL's importance_sampling_level="sequence")
    rloo: float  # e^(their sum) = π_θ(answer) / π_old(answer), the product of its tokens' ratios (TRL's RLOOTrainer)


def answer_ratios(loss: GroupLoss) -> list[AnswerRatio]:
    """Each answer's ratio GSPO's way and RLOO's way, from ``loss``'s log π_θ and log π_old (at either level).
    RLOOTrainer._compute_loss takes exp(Σ log π_θ − Σ log π_old) over the answer's tokens: GSPO's ratio to the
    power of the answer's length."""
    rows = [[t.logp_new - t.logp_old for t in answer] for answer in loss.tokens]
    return [AnswerRatio(row, math.exp(math.fsum(row) / len(row)), math.exp(math.fsum(row))) for row in rows]


def released_by_clip_higher(loss: GroupLoss) -> list[TokenTerms]:
    """The tokens whose clipped term a symmetric clip at ε_low would hold and ``loss``'s ε_high does not: A > 0
    and 1 + ε_low < r ≤ 1 + ε_high, so they keep their gradient (DAPO's clip-higher). None where
    ε_high ≤ ε_low."""
    symmetric = rescored(loss, epsilon_high=loss.epsilon_low)
    return [token for answer, held in zip(loss.tokens, symmetric.tokens) for token, was in zip(answer, held)
            if was.takes_clipped and not token.takes_clipped]


@dataclass
class ClipHigher:
    """What clip-higher changes at one update: the upper ε it uses and the units it releases."""
    epsilon_high: float  # the loss's own ε_high where it is above ε_low, else DAPO's
    own: bool  # True: the loss's own clip releases them; False: DAPO's ε_high would
    released: list[TokenTerms]


def clip_higher(loss: GroupLoss) -> ClipHigher | None:
    """The tokens clip-higher releases at this update (released_by_clip_higher), with the loss's own ε_high
    where it is above ε_low, else with DAPO's 0.28, what it would release; None where neither is above ε_low."""
    own = loss.epsilon_high > loss.epsilon_low
    high = loss.epsilon_high if own else DAPO_EPSILON_HIGH
    if high <= loss.epsilon_low:
        return None
    return ClipHigher(high, own, released_by_clip_higher(loss if own else rescored(loss, epsilon_high=high)))


@dataclass
class CispoToken:
    """One token under CISPO (MiniMax-M1, 2025) as TRL's loss_type "cispo" computes it: the per-token term
    −sg(min(r, ε_max))·A·log π_θ, with a token-level ratio and the token count of the group as its divisor
    (as dapo)."""
    answer: int
    position: int
    ratio: float
    advantage: float
    weight: float  # min(r, ε_max)·A, detached: what multiplies log π_θ
    gradient: float  # ∂(the CISPO loss)/∂ log π_θ of this token: −weight / the group's token count
    ppo_gradient: float  # the same for PPO's clipped term averaged as dapo: −r·A / count, or 0 where it is clipped
    ppo_clipped: bool  # PPO's min takes the clipped term here, so its gradient is 0 and CISPO's is not


@dataclass
class Cispo:
    epsilon_max: float
    loss: float  # Σ −min(r, ε_max)·A·log π_θ / count: its value depends on log π_θ itself; its gradient is the point
    tokens: list[list[CispoToken]]
    capped: int  # tokens with r > ε_max and A > 0: TRL's cispo_clip_ratio × the count
    kept_by_cispo: int  # tokens PPO's clip holds (gradient 0) that CISPO still pushes


def cispo(loss: GroupLoss, epsilon_max: float = CISPO_EPSILON_MAX) -> Cispo:
    """CISPO on ``loss``'s tokens (their ratios and advantages, token level). ε_max is TRL's epsilon_high under
    loss_type "cispo": a cap on r itself, not on r − 1. PPO's clip is ``loss``'s (ε_low, ε_high)."""
    if not _is_number(epsilon_max) or epsilon_max <= 0:
        raise BadInput(f"CISPO's cap on the ratio, ε_max, must be a number above 0 (TRL's docs recommend "
                       f"{CISPO_EPSILON_MAX:g}); got {epsilon_max!r}.")
    if loss.level != TOKEN:
        raise BadInput("CISPO weighs each token by its own ratio: it is computed at token level.")
    count = loss.token_count
    tokens = [[CispoToken(t.answer, t.position, t.ratio, t.advantage, weight=min(t.ratio, epsilon_max) * t.advantage,
                          gradient=-min(t.ratio, epsilon_max) * t.advantage / count,
                          ppo_gradient=0.0 if t.takes_clipped else -t.ratio * t.advantage / count,
                          ppo_clipped=t.takes_clipped)
               for t in answer] for answer in loss.tokens]
    value = math.fsum(-c.weight * t.logp_new for answer, row in zip(loss.tokens, tokens) for t, c in zip(answer, row))
    flat = [c for row in tokens for c in row]
    return Cispo(float(epsilon_max), value / count, tokens,
                 capped=sum(c.ratio > epsilon_max and c.advantage > 0 for c in flat),
                 kept_by_cispo=sum(c.ppo_clipped and c.gradient != 0 for c in flat))


def overlong_penalty(lengths: list[int], max_length: int, cache: int) -> list[float]:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13; TRL's get_soft_overlong_punishment), added to each
    answer's reward: 0 up to max_length − cache tokens, then falling linearly to −1 at max_length, −1 beyond."""
    max_length = _check_whole(max_length, "longest answer, L_max", 1, 10**9)
    cache = _check_whole(cache, "penalty's cache, L_cache", 0, max_length)
    start = max_length - cache
    return [0.0 if n <= start else -1.0 if n > max_length else (start - n) / cache for n in lengths]


@dataclass
class OverlongShaping:
    """A group's rewards with DAPO's soft overlong penalty added, and the advantages they would give."""
    lengths: list[int]  # each answer's tokens, the end token included, as TRL's completion_ids count them
    penalties: list[float]
    rewards: list[float]  # each reward plus its penalty
    advantages: Advantages  # of those rewards, ÷ the sample std


def overlong_shaped(group: Group, scores: list[float], cache: int) -> OverlongShaping:
    """DAPO's penalty on each answer of ``group``, L_max its token limit; raises BadInput for a cache above it."""
    lengths = [len(answer.ids) for answer in group.answers]
    penalties = overlong_penalty(lengths, group.max_new_tokens, cache)
    shaped = [r + q for r, q in zip(scores, penalties)]
    return OverlongShaping(lengths, penalties, shaped, advantages(shaped, SAMPLE_STD))


# --- the reward model, and DPO as one ---------------------------------------------------------------------

@dataclass
class BradleyTerry:
    """The Bradley–Terry model of a preference: P(chosen ≻ rejected) = σ(r_chosen − r_rejected); a reward model
    is trained with the loss −log σ(r_chosen − r_rejected) (InstructGPT, Ouyang et al. 2022)."""
    reward_chosen: float
    reward_rejected: float
    margin: float  # r_chosen − r_rejected
    probability: float  # σ(margin): how likely the model says the chosen answer is preferred
    loss: float  # −log σ(margin)


def bradley_terry(reward_chosen: float, reward_rejected: float) -> BradleyTerry:
    if not (_is_number(reward_chosen) and _is_number(reward_rejected)):
        raise BadInput("Each reward must be a finite number.")
    margin = reward_chosen - reward_rejected
    loss = minus_log_sigmoid(margin)
    return BradleyTerry(float(reward_chosen), float(reward_rejected), margin, math.exp(-loss), loss)


def implicit_reward(policy_logps: float, reference_logps: float, beta: float) -> float:
    """DPO's implicit reward of an answer (Rafailov et al. 2023): β · log(π(y|x) / π_ref(y|x)), from the answer's
    summed log-probabilities under the policy and the reference."""
    if not _is_number(beta) or beta <= 0:
        raise BadInput(f"beta must be a number above 0; got {beta!r}.")
    if not (_is_number(policy_logps) and _is_number(reference_logps)):
        raise BadInput("Each log-probability must be a finite number.")
    return beta * (policy_logps - reference_logps)


def dpo_as_bradley_terry(policy_chosen_logps: float, policy_rejected_logps: float, reference_chosen_logps: float,
                         reference_rejected_logps: float, beta: float = 0.1) -> BradleyTerry:
    """DPO's loss is the Bradley–Terry loss of its implicit rewards (Rafailov et al. 2023, eq. 7): the same number
    as lmviz.lessons.chat_loss.dpo_loss from the same four summed log-probabilities (β 0.1: TRL's default)."""
    return bradley_terry(implicit_reward(policy_chosen_logps, reference_chosen_logps, beta),
                         implicit_reward(policy_rejected_logps, reference_rejected_logps, beta))


# --- with a model: the group ------------------------------------------------------------------------------

@dataclass
class Answer:
    """One sampled answer of the group."""
    text: str  # decoded, the stopping token left out
    ids: list[int]  # the sampled token ids, the stopping token included when one was drawn (it counts in the loss)
    tokens: list[str]  # readable
    logp_old: list[float]  # log π_old of each sampled token: log_softmax(logits / T) at it, what the draw came from
    finished: bool  # it ended with a stopping token; False: cut at the token limit

    @property
    def length(self) -> int:
        """Its tokens without the stopping token: what at_most_tokens counts."""
        return len(self.ids) - self.finished


@dataclass
class Group:
    """G answers to one prompt, drawn from the model with its chat template."""
    model: str
    prompt: str  # as typed
    prompt_ids: list[int]  # the conversation the template writes, up to the assistant's turn (generation prompt)
    prompt_tokens: list[str]
    size: int  # G
    seed: int
    temperature: float
    max_new_tokens: int
    stop_ids: list[int]  # the tokens that end an answer: the model's end-of-sequence ids
    answers: list[Answer]
    seconds: float
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


def _check_whole(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput(f"The {name} must be a whole number from {low} to {high}; got {value!r}.")
    return value


def check_sampling(size: int, seed: int, temperature: float, max_new_tokens: int) -> None:
    _check_whole(size, "group size G", MIN_GROUP, MAX_GROUP)
    _check_whole(max_new_tokens, "token limit", 1, MAX_NEW_TOKENS)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise BadInput(f"The seed must be a whole number of at least 0; got {seed!r}.")
    if not _is_number(temperature) or not MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE:
        raise BadInput(f"The temperature must be a number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g} "
                       f"(1 samples from the model's own probabilities); got {temperature!r}.")


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt as a one-message conversation, written by the tokenizer's chat template up to the start of the
    assistant's turn (add_generation_prompt=True). Typed control tokens stay characters
    (sanitize_control_tokens=True), as on the Chat page. Raises NothingToScore, NoChatTemplate, ChatTemplateError."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise NothingToScore("The prompt is empty: type a question whose answer a rule can check.")
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplate("This model's tokenizer has no chat template, so it cannot be asked a question as a chat "
                             "model is: choose a chat model such as the bundled SmolLM2-135M-Instruct.")
    try:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": valid_text(prompt)}],
                                                  add_generation_prompt=True,
                                                  sanitize_control_tokens=True)["input_ids"])
    except Exception as error:  # jinja2's TemplateError, or raise_exception() called by the template itself
        said = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        raise ChatTemplateError(f"This model's chat template refuses this prompt: {said}.") from error


def stop_ids(loaded) -> list[int]:
    """The tokens that end an answer: the generation config's eos_token_id (one id or a list) and the tokenizer's."""
    configured = getattr(loaded.model.generation_config, "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    return sorted({i for i in [*ids, loaded.tokenizer.eos_token_id] if i is not None})


def draw_answers(model, prompt: list[int], size: int, temperature: float, max_new_tokens: int, stops: list[int],
                 generator: torch.Generator, progress: Progress | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampling, with the key/value cache: the prompt is read once for the G rows, then each step feeds each row's
    last token only. At each step: logits ÷ T, log-softmax, one draw per row from its probabilities.
    Returns the drawn ids (G, n) and their log-probabilities (G, n); a row that has stopped keeps being fed its
    stopping token, and what it draws after it is not part of its answer."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([prompt] * size, device=device), use_cache=True)
    drawn, logps = [], []
    stopped = torch.zeros(size, dtype=torch.bool)
    stop = torch.tensor(stops)
    for _ in range(max_new_tokens):
        log_p = torch.log_softmax(out.logits[:, -1].float().cpu() / temperature, dim=-1)  # (G, V)
        token = torch.multinomial(log_p.exp(), num_samples=1, generator=generator)  # (G, 1)
        if drawn:  # a row that has stopped is fed its stopping token again
            token = torch.where(stopped[:, None], drawn[-1], token)
        drawn.append(token)
        logps.append(log_p.gather(-1, token))
        stopped |= torch.isin(token[:, 0], stop)
        if progress:
            progress(len(drawn) / max_new_tokens, f"{len(drawn)} of at most {max_new_tokens} tokens drawn.")
        if stopped.all():
            break
        out = model(input_ids=token.to(device), cache=out.cache, use_cache=True)  # transformers 5's name
    return torch.cat(drawn, dim=1), torch.cat(logps, dim=1)


def _answer(tokenizer, ids: list[int], logps: list[float], stops: list[int]) -> Answer:
    end = next((n + 1 for n, i in enumerate(ids) if i in stops), len(ids))  # up to the first stopping token
    ids, finished = ids[:end], ids[end - 1] in stops
    return Answer(text=tokenizer.decode(ids[:len(ids) - finished]), ids=ids,
                  tokens=[readable_token(tokenizer, i) for i in ids], logp_old=logps[:end], finished=finished)


def sample_group(loaded, prompt: str, size: int = 8, seed: int = 0, temperature: float = 1.0,
                 max_new_tokens: int = 12, progress: Progress | None = None) -> Group:
    """G = ``size`` answers to ``prompt`` from ``loaded`` (a lmviz.models.loading.LoadedModel), drawn together.

    Drawn with a torch.Generator of the call's own, seeded with ``seed``: the same settings give the same group,
    whatever other sessions of the server draw meanwhile. (transformers' generate draws from torch's global
    random state, which any thread may reseed or advance mid-group, so a class would not all see one group.)
    Each answer keeps the log-probability its tokens were drawn with: log π_old, the policy that sampled.
    ``progress(fraction, words)`` is called after each token is drawn for the group.
    Raises BadInput, NothingToScore, NoChatTemplate, ChatTemplateError."""
    check_sampling(size, seed, temperature, max_new_tokens)
    ids = prompt_ids(loaded.tokenizer, prompt)
    limit = length_limit(loaded.model)[0]
    if len(ids) + max_new_tokens > limit:
        raise BadInput(f"The prompt is {len(ids):,} tokens once the chat template is applied; with {max_new_tokens} "
                       f"new tokens that is more than the {limit:,} this model reads: shorten it.")
    stops = stop_ids(loaded)
    start = time.perf_counter()
    with torch.inference_mode():
        drawn, logps = draw_answers(loaded.model, ids, size, float(temperature), max_new_tokens, stops,
                                    torch.Generator().manual_seed(seed), progress)
    seconds = seconds_since(start, loaded.device)
    answers = [_answer(loaded.tokenizer, row, row_logps, stops)
               for row, row_logps in zip(drawn.tolist(), logps.tolist())]
    return Group(model=loaded.name, prompt=prompt, prompt_ids=ids,
                 prompt_tokens=[readable_token(loaded.tokenizer, i) for i in ids], size=size, seed=seed,
                 temperature=float(temperature), max_new_tokens=max_new_tokens, stop_ids=stops, answers=answers,
                 seconds=seconds, device=loaded.device)


# --- the reward rules -------------------------------------------------------------------------------------

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")  # digits, a minus sign and a decimal point: "12", "-3", "2.5"


@dataclass(frozen=True)
class RewardRule:
    """A rule that scores an answer: 1.0 when it holds, 0.0 when not."""
    name: str  # e.g. "contains_number(12)"
    description: str  # in words
    score: Callable[[Answer], float]

    @property
    def source(self) -> str:
        """The scoring function's own code, for a page to show."""
        return textwrap.dedent(inspect.getsource(self.score))


def contains_number(number) -> RewardRule:
    """The answer's text contains ``number`` written in digits: 12 in "It is 12." and in "7 + 5 = 12", not in
    "112" or "twelve"."""
    try:
        value = float(str(number).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadInput(f"The number to look for must be written in digits, such as 12; got {str(number)!r}.")

    def score(answer: Answer) -> float:
        return 1.0 if any(float(found) == value for found in NUMBER.findall(answer.text)) else 0.0
    shown = f"{value:g}"
    return RewardRule(f"contains_number({shown})", f"1 if the answer contains the number {shown}, else 0", score)


def contains_word(word) -> RewardRule:
    """The answer's text contains ``word`` as a whole word, in any case: "Paris" in "It's paris!", not in
    "Parisian"."""
    word = str(word).strip()
    if not word or re.search(r"\s", word):
        raise BadInput(f"The word to look for must be one word, without spaces; got {word!r}.")
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)

    def score(answer: Answer) -> float:
        return 1.0 if pattern.search(answer.text) else 0.0
    return RewardRule(f"contains_word({word!r})", f"1 if the answer contains the word {word!r}, else 0", score)


def at_most_tokens(limit) -> RewardRule:
    """The answer has at most ``limit`` tokens, its stopping token not counted."""
    if isinstance(limit, str) and limit.strip().isdigit():
        limit = int(limit)
    limit = _check_whole(limit, "token count of at_most_tokens", 1, MAX_NEW_TOKENS)

    def score(answer: Answer) -> float:
        return 1.0 if answer.length <= limit else 0.0
    return RewardRule(f"at_most_tokens({limit})", f"1 if the answer is at most {limit} tokens long, else 0", score)


def rewards(group: Group, rule: RewardRule) -> list[float]:
    return [rule.score(answer) for answer in group.answers]


def default_advantages(group: Group) -> list[float]:
    """The lesson's default advantages of a group: the default rule's rewards (contains_number(DEFAULT_NUMBER)),
    over the sample std as TRL divides."""
    return advantages(rewards(group, contains_number(DEFAULT_NUMBER)), SAMPLE_STD).advantages


# --- with a model: log π of each answer token --------------------------------------------------------------

def group_logprobs(model, prompt: list[int], answers: list[list[int]],
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """log π of every answer token after ``prompt``, as TRL computes it: log_softmax(logits / T) at the token, T the
    sampling temperature. model: a module or a LoadedModel. The prompt but its last token is read once, and its keys
    and values are shared by the G answers, which are read together, right-padded, each after the prompt's last
    token (TRL reads the whole prompt once per answer: the numbers are the same, the prompt's cost G times smaller;
    gradients flow through the shared keys and values into the prompt's pass as they would through G copies).
    Returns (G, L) float32 log-probabilities (0 at padding) and the (G, L) mask; differentiable where the module's
    parameters require a gradient (a private copy), without a graph for the shared model."""
    # a LoadedModel's module; a module as it is (a causal LM's own .model is its body, without the output head)
    model = model if isinstance(model, torch.nn.Module) else model.model
    device = next(model.parameters()).device
    size, width, start = len(answers), max(len(a) for a in answers), max(len(prompt) - 1, 0)
    # each row: the prompt's last token, which scores the answer's first, then the answer (right-padded)
    ids = torch.tensor([prompt[start:] + a + [0] * (width - len(a)) for a in answers], device=device)
    mask = torch.tensor([[1] * len(a) + [0] * (width - len(a)) for a in answers], device=device)  # (G, L)
    cache = None
    if start:
        cache = model(input_ids=torch.tensor([prompt[:start]], device=device), use_cache=True, logits_to_keep=1).cache
        cache.batch_repeat_interleave(size)  # (1, heads, P − 1, d) -> (G, heads, P − 1, d), in every layer
    attention = torch.cat([torch.ones(size, start, dtype=mask.dtype, device=device), torch.ones_like(mask[:, :1]),
                           mask], dim=1)
    logits = model(input_ids=ids, attention_mask=attention, cache=cache, use_cache=cache is not None).logits
    scores = logits[:, :-1].float() / temperature  # (G, L, V): position t scores token t + 1
    targets = ids[:, 1:, None]
    logp = (scores.gather(-1, targets)[..., 0] - torch.logsumexp(scores, dim=-1)) * mask  # = log_softmax at targets
    return logp, mask


def token_logprobs(model, prompt: list[int], answer: list[int], temperature: float = 1.0) -> torch.Tensor:
    """(n,) log π of each of one answer's n tokens after ``prompt``: see group_logprobs."""
    return group_logprobs(model, prompt, [answer], temperature)[0][0]


# --- one step -----------------------------------------------------------------------------------------------

# RL fine-tuning's defaults: the page's, and the warm start's (lmviz.app.training), which computes its group and step
# before the first visitor asks. The reward: contains_number(DEFAULT_NUMBER).
DEFAULT_PROMPT = "What is 7 + 5? Reply with just the number."
DEFAULT_GROUP, DEFAULT_SEED, DEFAULT_TEMPERATURE, DEFAULT_LIMIT = 8, 0, 1.0, 12
DEFAULT_NUMBER, DEFAULT_RATE = "12", 1e-3
MAX_UPDATES = 4  # μ: a fourth update already takes as long as sampling the default group on a CPU
DEFAULT_UPDATES = 3  # the page's: the first update, where the clip and the KL cannot act, and two where they do


@dataclass
class GrpoUpdate:
    """One gradient step of GrpoStep: the group's loss at the weights it starts from, and its gradient's norm."""
    number: int  # 1 for the first update on the group
    start: GroupLoss  # the terms at this update's weights, against the unchanged π_old and π_ref
    loss: float  # the loss the update differentiated, in float32 (start.losses[loss_type] is it in float64)
    grad_norm: float  # ‖∂loss/∂w‖ over every weight


@dataclass
class GrpoStep:
    """μ = ``updates`` steps of plain gradient descent (w ← w − lr·g, torch.optim.SGD without momentum) on one
    group's GRPO loss, as TRL takes num_iterations updates on each generated batch, on a private copy of every
    weight: the shared model never changes.

    π_old, the model that sampled, and π_ref, the reference, are both the shared model here: its log π of the
    answers, the detached values of the first update's own forward pass (TRL's per_token_logps.detach() when
    old_per_token_logps is None). At the first update π_θ = π_old, so every ratio is exactly 1 and nothing is
    clipped; π_θ = π_ref too, so the KL and its gradient are 0 (in training π_ref stays the starting model while
    π_old follows the policy, so later groups start with a KL above 0). Each later update scores the same answers
    with the weights the update before left: the ratios have moved, the clip zeroes the gradient of the tokens
    that moved far enough, and the KL pulls them back towards π_ref."""
    model: str
    lr: float
    loss_type: str
    level: str
    epsilon_low: float
    epsilon_high: float
    beta: float
    kl_bias_correction: bool
    temperature: float  # log π is log_softmax(logits / T), T the group's sampling temperature (as TRL)
    advantages: list[float]
    updates: list[GrpoUpdate]  # μ of them, in order
    before: GroupLoss  # updates[0].start: π_θ = π_old = π_ref, ratios 1, KL 0
    after: GroupLoss  # the answers scored once more after the last update; π_old and π_ref still the shared model
    loss: float  # the first update's loss, float32
    grad_norm: float  # the first update's ‖g‖
    weights: int  # how many numbers each update changed (tied weights once)
    answer_logps_before: list[float]  # Σ log π over each answer's tokens: log p(answer | prompt) at T
    answer_logps_after: list[float]  # after the last update
    seconds: float
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


def check_updates(updates: int) -> int:
    return _check_whole(updates, "number of updates on the group", 1, MAX_UPDATES)


def _check_step(lr, loss_type: str, updates: int, group: Group, advantages: list[float]) -> float:
    lr = check_learning_rate(lr)
    if loss_type not in LOSS_TYPES:
        raise BadInput(f"The loss type must be one of: {', '.join(LOSS_TYPES)}; got {loss_type!r}.")
    check_updates(updates)
    if len(advantages) != len(group.answers) or not all(_is_number(a) for a in advantages):
        raise BadInput(f"The step needs one advantage per answer ({len(group.answers)}), each a finite number.")
    return lr


def grpo_step(loaded, group: Group, advantages: list[float], lr: float = 1e-3, loss_type: str = TRL.loss_type,
              level: str = TOKEN, epsilon_low: float = DEFAULT_EPSILON, epsilon_high: float | None = None,
              beta: float = DEFAULT_BETA, updates: int = 1, kl_bias_correction: bool = False,
              progress: Progress | None = None) -> GrpoStep:
    """``updates`` SGD steps at rate ``lr`` on ``group``'s GRPO loss with these ``advantages`` (one per answer),
    each on the weights the one before left, and the group scored again after the last (see GrpoStep).
    ``progress(fraction, words)`` is called after each update. Raises BadInput."""
    lr = _check_step(lr, loss_type, updates, group, advantages)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    check_clip(epsilon_low, epsilon_high, level, beta)
    answers, prompt, temperature = [a.ids for a in group.answers], group.prompt_ids, group.temperature
    score = dict(epsilon_low=epsilon_low, epsilon_high=epsilon_high, level=level, beta=beta,
                 max_completion_length=group.max_new_tokens, loss_type=loss_type,
                 kl_bias_correction=kl_bias_correction)
    start = time.perf_counter()
    module = private_copy(loaded.model)
    old, old_rows, done = None, None, []
    for number in range(1, updates + 1):
        logp, mask = group_logprobs(module, prompt, answers, temperature)
        if old is None:  # π_old = π_ref = the shared model: the copy before its first update computes exactly that
            old = logp.detach()
            old_rows = [row[:len(a)] for row, a in zip(old.tolist(), answers)]
        terms = clip_terms(logp, old, torch.tensor(advantages, device=old.device), mask, epsilon_low, epsilon_high,
                           level, old, beta, kl_bias_correction)
        loss = aggregate(terms["loss"], mask, loss_type, group.max_new_tokens)
        rows = [row[:len(a)] for row, a in zip(logp.detach().tolist(), answers)]
        del terms, logp
        norm = descend(module, loss, lr)
        done.append(GrpoUpdate(number, group_loss(rows, old_rows, advantages, logp_ref=old_rows, **score),
                               loss.item(), norm))
        if progress:
            progress(number / (updates + 1), f"Update {number} of {updates} done; "
                                              + ("the next" if number < updates else "scoring the group again") + "…")
    with torch.no_grad():
        new = group_logprobs(module, prompt, answers, temperature)[0]
    weights = sum(p.numel() for p in module.parameters())
    del module
    return_freed_memory()
    new_rows = [row[:len(a)] for row, a in zip(new.tolist(), answers)]
    return GrpoStep(
        model=loaded.name, lr=lr, loss_type=loss_type, level=level, epsilon_low=float(epsilon_low),
        epsilon_high=float(epsilon_high), beta=float(beta), kl_bias_correction=kl_bias_correction,
        temperature=temperature, advantages=[float(a) for a in advantages], updates=done, before=done[0].start,
        after=group_loss(new_rows, old_rows, advantages, logp_ref=old_rows, **score), loss=done[0].loss,
        grad_norm=done[0].grad_norm, weights=weights, answer_logps_before=[math.fsum(r) for r in old_rows],
        answer_logps_after=[math.fsum(r) for r in new_rows], seconds=seconds_since(start, loaded.device),
        device=loaded.device)


def moved_against_advantage(step: GrpoStep) -> list[int]:
    """The answers whose log π the updates moved against their advantage's sign (down with A > 0, up with A < 0):
    the gradient raises a rewarded answer only to first order, and the weights the answers share can carry it the
    other way over a finite step."""
    return [i for i, (a, before, after) in enumerate(zip(step.advantages, step.answer_logps_before,
                                                         step.answer_logps_after))
            if a * (after - before) < 0]
