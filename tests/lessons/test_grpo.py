"""lmviz.lessons.grpo against references: the published worked numbers (the HF LLM course's group of 8, the group
of 2 right and 2 wrong, the issue's measured group), Python's statistics module and torch.std, a per-token loss
written here in plain Python from the published equations (PPO's clip, the k3 estimate, TRL's four loss types),
autograd, the exact KL of two small distributions, torch's logsigmoid and lmviz.lessons.chat_loss.dpo_loss."""

import copy
import math
import random
import re
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.trl import TRL
from lmviz.course.glossary import TERMS
from lmviz.errors import BadInput, NoChatTemplate, NothingToScore
from lmviz.lessons.chat_loss import dpo_loss
from lmviz.lessons.grpo import (
    BNPO,
    DAPO,
    DR_GRPO,
    GRPO,
    LOSS_TYPES,
    LUSPO,
    MAX_UPDATES,
    MEAN,
    POPULATION_STD,
    SAMPLE_STD,
    SCALINGS,
    SEQUENCE,
    TOKEN,
    TRL_STD_EPS,
    Answer,
    advantages,
    aggregate,
    at_most_tokens,
    bradley_terry,
    cispo,
    clip_higher,
    clip_terms,
    contains_number,
    contains_word,
    dpo_as_bradley_terry,
    group_logprobs,
    group_loss,
    grpo_step,
    implicit_reward,
    leave_one_out,
    overlong_penalty,
    overlong_shaped,
    released_by_clip_higher,
    rescored,
    rewards,
    sample_group,
    stop_ids,
    token_logprobs,
)
from lmviz.models.loading import TINY_GPT, LoadedModel, load_causal_lm
from tests.helpers import one_sentence

# --- advantages -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how, right, wrong", [(POPULATION_STD, 1.0, -1.0), (SAMPLE_STD, 0.866, -0.866),
                                               (MEAN, 0.5, -0.5)])
def test_two_right_and_two_wrong(how, right, wrong):
    result = advantages([1, 1, 0, 0], how)
    assert result.mean == 0.5 and result.deviations == [0.5, 0.5, -0.5, -0.5]
    assert result.advantages == pytest.approx([right, right, wrong, wrong], abs=5e-4)
    assert not result.teaches_nothing


def test_the_hf_courses_group_of_eight_with_four_right():
    result = advantages([1, 0, 1, 1, 0, 0, 1, 0], SAMPLE_STD)
    assert result.mean == 0.5
    assert result.std == pytest.approx(0.5345, abs=5e-5)
    assert result.divisor == 7 and result.variance == pytest.approx(2 / 7, rel=1e-15)  # 8 × 0.25 / 7
    assert [round(a, 3) for a in result.advantages] == [0.935, -0.935, 0.935, 0.935, -0.935, -0.935, 0.935, -0.935]


@pytest.mark.parametrize("how, right, wrong", [(MEAN, 0.75, -0.25), (POPULATION_STD, 1.73, -0.58),
                                               (SAMPLE_STD, 1.62, -0.54)])
def test_the_issues_measured_group_two_of_eight(how, right, wrong):
    result = advantages([0, 1, 0, 0, 0, 1, 0, 0], how)
    assert [round(a, 2) for a in result.advantages] == [wrong, right, wrong, wrong, wrong, right, wrong, wrong]


def test_the_arithmetic_is_pythons_statistics_and_torch_std():
    rewards = [0.3, 1.0, 0.0, 0.5, 0.25, 1.0]
    population, sample = advantages(rewards, POPULATION_STD), advantages(rewards, SAMPLE_STD)
    assert population.mean == pytest.approx(statistics.fmean(rewards), rel=1e-15)
    assert population.std == pytest.approx(statistics.pstdev(rewards), rel=1e-14)
    assert sample.std == pytest.approx(statistics.stdev(rewards), rel=1e-14)
    assert sample.std == pytest.approx(torch.tensor(rewards, dtype=torch.float64).std().item(), rel=1e-14)
    assert population.squares == pytest.approx([(r - statistics.fmean(rewards)) ** 2 for r in rewards], rel=1e-12)
    for result in (population, sample):
        assert result.advantages == pytest.approx([d / result.std for d in result.deviations], rel=1e-15)
    assert advantages(rewards, MEAN).advantages == pytest.approx([r - statistics.fmean(rewards) for r in rewards])


def test_trls_eps_gives_trls_numbers():
    """TRL: (rewards - mean) / (std + 1e-4), std the sample std (its nanstd, as torch.std)."""
    rewards = torch.tensor([1.0, 0, 1, 1, 0, 0, 1, 0], dtype=torch.float64)
    trl = ((rewards - rewards.mean()) / (rewards.std() + 1e-4)).tolist()
    result = advantages(rewards.tolist(), SAMPLE_STD, eps=TRL_STD_EPS)
    assert result.denominator == result.std + TRL_STD_EPS
    assert result.advantages == pytest.approx(trl, rel=1e-14)
    assert round(result.advantages[0], 4) == 0.9352  # not 0.9354: why the default eps is 0


@pytest.mark.parametrize("rewards", [[1, 1, 1, 1], [0.1, 0.1, 0.1], [0.7] * 5, [0, 0]])
@pytest.mark.parametrize("how", SCALINGS)
def test_equal_rewards_teach_nothing(rewards, how):
    result = advantages(rewards, how)
    assert result.teaches_nothing
    assert result.advantages == [0.0] * len(rewards)  # exactly, even where the float mean is not exact


@pytest.mark.parametrize("rewards", [[1, 1, 0, 0, 0, 0, 0, 0], [0.5, -1.0, 2.0], [3, 3, 3, 3], [0, 1]])
def test_rloos_advantage_is_each_reward_against_the_mean_of_the_others(rewards):
    """Ahmadian et al.'s leave-one-out baseline written out: r_i − mean over j ≠ i, and its closed form."""
    g = len(rewards)
    expected = [r - sum(rewards[:i] + rewards[i + 1:]) / (g - 1) for i, r in enumerate(rewards)]
    assert leave_one_out(rewards) == pytest.approx(expected, abs=1e-12)
    mean = sum(rewards) / g
    assert leave_one_out(rewards) == pytest.approx([g / (g - 1) * (r - mean) for r in rewards], abs=1e-12)


def test_rloos_advantage_for_two_right_answers_of_eight_is_the_issues():
    shown = leave_one_out([1, 1, 0, 0, 0, 0, 0, 0])
    assert [round(a, 6) for a in shown[:3]] == [0.857143, 0.857143, -0.285714]
    assert leave_one_out([2.0, 2.0]) == [0.0, 0.0]
    with pytest.raises(BadInput):
        leave_one_out([1.0])


@pytest.mark.parametrize("rewards, how, eps", [([1], SAMPLE_STD, 0.0), ([], MEAN, 0.0), ([1, math.nan], MEAN, 0.0),
                                               ([1, "a"], MEAN, 0.0), ([1, True], MEAN, 0.0),
                                               ([1, 0], "std", 0.0), ([1, 0], SAMPLE_STD, -1e-4)])
def test_advantages_it_cannot_compute_are_one_sentence(rewards, how, eps):
    with pytest.raises(BadInput) as raised:
        advantages(rewards, how, eps)
    assert one_sentence(str(raised.value))


# --- the clipped surrogate ---------------------------------------------------------------------------------

def reference_token_loss(new: float, old: float, advantage: float, eps_low: float, eps_high: float,
                         ref: float | None, beta: float, log_ratio: float | None = None) -> tuple[float, bool]:
    """PPO's clipped objective for one token, negated, plus β·k3: written from the equations, in plain Python."""
    ratio = math.exp(new - old if log_ratio is None else log_ratio)
    clipped_ratio = min(max(ratio, 1 - eps_low), 1 + eps_high)
    kl = 0.0 if ref is None else math.exp(ref - new) - (ref - new) - 1
    return -min(ratio * advantage, clipped_ratio * advantage) + beta * kl, clipped_ratio * advantage < ratio * advantage


def reference_losses(new, old, adv, eps_low, eps_high, ref, beta, level, limit) -> dict:
    per_answer = []
    for i in range(len(new)):
        sequence = sum(n - o for n, o in zip(new[i], old[i])) / len(new[i])
        per_answer.append([reference_token_loss(new[i][t], old[i][t], adv[i], eps_low, eps_high,
                                                None if ref is None else ref[i][t], beta,
                                                sequence if level == SEQUENCE else None)[0]
                           for t in range(len(new[i]))])
    count = sum(len(row) for row in per_answer)
    total = sum(sum(row) for row in per_answer)
    return {GRPO: sum(sum(row) / len(row) for row in per_answer) / len(per_answer), BNPO: total / count,
            DAPO: total / count, DR_GRPO: total / (len(per_answer) * limit),
            LUSPO: sum(sum(row) for row in per_answer) / len(per_answer)}


def random_group(seed: int, sizes=(3, 7, 1, 5)):
    rng = random.Random(seed)
    old = [[math.log(rng.uniform(0.05, 0.95)) for _ in range(n)] for n in sizes]
    new = [[o + rng.uniform(-0.5, 0.5) for o in row] for row in old]  # ratios from 0.61 to 1.65: some clipped
    ref = [[o + rng.uniform(-0.3, 0.3) for o in row] for row in old]
    return new, old, ref, [rng.uniform(-1.5, 1.5) for _ in sizes]


@pytest.mark.parametrize("level", [TOKEN, SEQUENCE])
@pytest.mark.parametrize("seed, eps_low, eps_high, beta", [(0, 0.2, None, 0.0), (1, 0.2, 0.28, 0.04),
                                                           (2, 0.1, 0.3, 0.5)])
def test_group_loss_is_the_published_equations(seed, eps_low, eps_high, beta, level):
    new, old, ref, adv = random_group(seed)
    result = group_loss(new, old, adv, eps_low, eps_high, level, ref, beta, max_completion_length=9)
    high = eps_low if eps_high is None else eps_high
    expected = reference_losses(new, old, adv, eps_low, high, ref, beta, level, 9)
    assert {kind: result.losses[kind].loss for kind in LOSS_TYPES} == pytest.approx(expected, rel=1e-12)
    flat = [token for answer in result.tokens for token in answer]
    clipped = 0
    for token in flat:
        sequence = sum(n - o for n, o in zip(new[token.answer], old[token.answer])) / len(new[token.answer])
        loss, is_clipped = reference_token_loss(token.logp_new, token.logp_old, token.advantage, eps_low, high,
                                                token.logp_ref, beta, sequence if level == SEQUENCE else None)
        assert token.loss == pytest.approx(loss, rel=1e-12, abs=1e-15)
        assert token.takes_clipped == is_clipped
        assert token.weighted_kl == pytest.approx(beta * token.kl, rel=1e-15)
        clipped += is_clipped
    assert result.token_count == len(flat) == 16
    if level == TOKEN:
        assert result.clipped_count == clipped and result.clip_total == 16 and result.clip_fraction == clipped / 16
        assert 0 < clipped < 16  # the random group does reach the clip: the check above is not vacuous
    else:  # TRL counts each answer's one ratio once
        answers = sum(answer[0].takes_clipped for answer in result.tokens)
        assert result.clipped_count == answers and result.clip_total == 4 and result.clip_fraction == answers / 4


def test_the_sequence_ratio_is_gspos_one_per_answer():
    new, old, _, adv = random_group(3)
    result = group_loss(new, old, adv, level=SEQUENCE)
    for i, answer in enumerate(result.tokens):
        mean_log_ratio = statistics.fmean(n - o for n, o in zip(new[i], old[i]))
        assert all(t.ratio == pytest.approx(math.exp(mean_log_ratio), rel=1e-14) for t in answer)
        assert all(t.log_ratio == pytest.approx(mean_log_ratio, rel=1e-12) for t in answer)


def test_before_any_update_every_ratio_is_exactly_one_and_nothing_is_clipped():
    _, old, ref, _ = random_group(4)
    adv = advantages([1, 0, 0, 1], SAMPLE_STD).advantages
    for level in (TOKEN, SEQUENCE):
        result = group_loss(old, old, adv, level=level)  # π_θ = π_old: the first step after sampling
        assert all(t.ratio == 1.0 and not t.takes_clipped for answer in result.tokens for t in answer)
        assert result.clip_fraction == 0.0 and result.clipped_count == 0
        assert all(t.loss == -t.advantage for answer in result.tokens for t in answer)  # −min(A, A)


def test_a_token_above_the_clip_with_a_positive_advantage_has_no_gradient():
    """PPO's case analysis (CS336 §7): the clip binds for A > 0 when r > 1 + ε, for A < 0 when r < 1 − ε;
    there the token's gradient is 0. Elsewhere it is −A·r (d(−r·A)/d log π_θ)."""
    ratios = torch.tensor([[1.5, 1.1, 0.5], [1.5, 1.1, 0.5]], dtype=torch.float64)  # above, inside, below [0.8, 1.2]
    old = torch.log(torch.tensor([[0.2, 0.3, 0.4]] * 2, dtype=torch.float64))
    new = (old + ratios.log()).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones_like(old)
    terms = clip_terms(new, old, adv, mask, 0.2)
    assert terms["takes_clipped"].tolist() == [[True, False, False], [False, False, True]]
    terms["loss"].sum().backward()
    assert new.grad.flatten().tolist() == pytest.approx([0.0, -1.1, -0.5, 1.5, 1.1, 0.0], rel=1e-12)
    assert new.grad[0, 0] == 0 and new.grad[1, 2] == 0  # exactly: the clamp's gradient outside its range
    assert terms["clipped"].flatten().tolist() == pytest.approx([1.2, 1.1, 0.8, -1.2, -1.1, -0.8], rel=1e-12)


def test_the_k3_estimate_averages_to_the_exact_kl():
    """k3 = exp(ref − logp) − (ref − logp) − 1 for tokens drawn from π: its mean under π is KL(π ‖ π_ref)."""
    pi = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    ref = torch.tensor([0.3, 0.3, 0.2, 0.1, 0.1], dtype=torch.float64)
    logp = pi.log()[None]
    terms = clip_terms(logp, logp, torch.zeros(1, dtype=torch.float64), torch.ones_like(logp), logp_ref=ref.log()[None],
                       beta=0.04)
    exact = torch.sum(pi * (pi.log() - ref.log())).item()
    assert torch.sum(pi * terms["kl"][0]).item() == pytest.approx(exact, rel=1e-12)
    assert (terms["kl"] >= 0).all() and terms["kl"][0, 3] == 0.0  # equal probabilities: exactly 0
    assert terms["loss"][0].tolist() == pytest.approx((0.04 * terms["kl"][0]).tolist(), rel=1e-15)  # A = 0


def test_a_long_wrong_answer_and_a_short_right_one():
    """Right: 2 tokens, A = +1; wrong: 6 tokens, A = −1; ratios 1, so each token's term is −A. By hand:
    grpo (−1 + 1) / 2 = 0; bnpo and dapo (2·(−1) + 6·1) / 8 = 0.5; dr_grpo with a limit of 8: 4 / (2·8) = 0.25.
    A token of the short answer weighs 1/4 in grpo, one of the long answer 1/12: the length bias."""
    old = [[math.log(0.5)] * 2, [math.log(0.25)] * 6]
    result = group_loss(old, old, [1.0, -1.0], max_completion_length=8)
    assert {kind: result.losses[kind].loss for kind in LOSS_TYPES} == pytest.approx(
        {GRPO: 0.0, BNPO: 0.5, DAPO: 0.5, DR_GRPO: 0.25, LUSPO: 2.0}, abs=1e-15)  # luspo: (−2 + 6) / 2
    assert result.answer_sums == [-2.0, 6.0] and result.answer_means == [-1.0, 1.0]
    assert result.losses[GRPO].token_weights == pytest.approx([1 / 4, 1 / 12])
    assert result.losses[BNPO].token_weights == result.losses[DAPO].token_weights == [1 / 8, 1 / 8]
    assert result.losses[DR_GRPO].token_weights == [1 / 16, 1 / 16]
    assert result.losses[LUSPO].token_weights == [1 / 2, 1 / 2]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_a_tokens_weight_is_its_gradient(loss_type):
    """The weights a page shows are what autograd gives: ∂loss/∂(token's term)."""
    new, old, _, adv = random_group(5)
    result = group_loss(new, old, adv, max_completion_length=10)
    width = max(result.lengths)
    terms = torch.zeros(len(new), width, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in result.lengths], dtype=torch.float64)
    aggregate(terms, mask, loss_type, 10).backward()
    for i, n in enumerate(result.lengths):
        assert terms.grad[i, :n].tolist() == pytest.approx([result.losses[loss_type].token_weights[i]] * n, rel=1e-12)
        assert terms.grad[i, n:].abs().sum() == 0


def trl_clip_counts(result, eps_low: float, eps_high: float) -> tuple[int, int]:
    """TRL's is_low_clipped and is_high_clipped (grpo_trainer.py), counted here from the ratios and advantages: per
    token, or per answer where every token of an answer shares one ratio."""
    units = [answer[:1] for answer in result.tokens] if result.level == SEQUENCE else result.tokens
    flat = [t for answer in units for t in answer]
    return (sum(t.ratio < 1 - eps_low and t.advantage < 0 for t in flat),
            sum(t.ratio > 1 + eps_high and t.advantage > 0 for t in flat))


@pytest.mark.parametrize("level", [TOKEN, SEQUENCE])
@pytest.mark.parametrize("seed", [0, 1, 2, 6])
def test_the_clipped_counts_are_trls_low_and_high(seed, level):
    new, old, _, adv = random_group(seed)
    if level == SEQUENCE:  # mean log-ratios move less than a token's: a tight clip, as GSPO's, reaches them
        new = [[n + (0.3 if a > 0 else -0.3) for n in row] for row, a in zip(new, adv)]
    result = group_loss(new, old, adv, 0.1, 0.15, level)
    low, high = trl_clip_counts(result, 0.1, 0.15)
    assert (result.clipped_low, result.clipped_high) == (low, high) and result.clipped_count == low + high > 0


def reference_gradients(result, loss_type: str, beta: float, corrected: bool) -> list[tuple[float, float]]:
    """∂loss/∂log π_θ of each token, from the published equations by hand: where the min takes r·A, the clipped
    term −w·r·A has the derivative −w·A·r (w the token's weight; at sequence level r is the answer's s and the
    n tokens' terms each add −w·A·s/n); where it takes the clipped term, 0. The KL term w·β·k3, with
    k3 = e^(ref − x) − (ref − x) − 1, has the derivative w·β·(1 − e^(ref − x)); times the ratio (TRL's
    correction) it is w·β·r·(k3 + 1 − e^(ref − x))."""
    out = []
    for answer, w in zip(result.tokens, result.losses[loss_type].token_weights):
        for t in answer:
            surrogate = 0.0 if t.takes_clipped else -w * t.advantage * t.ratio
            pull = 1 - math.exp(t.logp_ref - t.logp_new)
            kl = w * beta * (t.ratio * (t.kl + pull) if corrected else pull)
            out.append((surrogate, kl))
    return out


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level, corrected", [(TOKEN, False), (TOKEN, True), (SEQUENCE, False)])
def test_each_tokens_gradient_is_the_published_derivative(loss_type, level, corrected):
    new, old, ref, adv = random_group(7)
    result = group_loss(new, old, adv, 0.2, None, level, ref, 0.3, max_completion_length=9, loss_type=loss_type,
                        kl_bias_correction=corrected)
    shown = [(t.surrogate_gradient, t.kl_gradient) for answer in result.tokens for t in answer]
    expected = reference_gradients(result, loss_type, 0.3, corrected)
    assert [g for pair in shown for g in pair] == pytest.approx([g for pair in expected for g in pair], rel=1e-10,
                                                                 abs=1e-15)
    assert any(t.takes_clipped for answer in result.tokens for t in answer)  # the clip's zeros are tested too


def test_trls_bias_corrected_kl_is_k3_times_the_ratio():
    new, old, ref, adv = random_group(8)
    plain = group_loss(new, old, adv, logp_ref=ref, beta=0.04)
    corrected = group_loss(new, old, adv, logp_ref=ref, beta=0.04, kl_bias_correction=True)
    for a, b in zip((t for answer in plain.tokens for t in answer), (t for answer in corrected.tokens for t in answer)):
        k3 = math.exp(a.logp_ref - a.logp_new) - (a.logp_ref - a.logp_new) - 1
        assert a.weighted_kl == pytest.approx(0.04 * k3, rel=1e-12)
        assert b.weighted_kl == pytest.approx(0.04 * k3 * math.exp(a.logp_new - a.logp_old), rel=1e-12)
    assert corrected.mean_kl == pytest.approx(statistics.fmean(t.weighted_kl / 0.04 for answer in corrected.tokens
                                                               for t in answer), rel=1e-12)


def test_the_kl_and_its_gradient_are_zero_where_the_policy_is_the_reference():
    """At the first update π_θ = π_old = π_ref: the KL's gradient is 0, plain or times the ratio (a ratio with a
    gradient times k3 = 0, plus 1 times a slope of 0), so β changes nothing there."""
    _, old, _, adv = random_group(9)
    for corrected in (False, True):
        result = group_loss(old, old, adv, logp_ref=old, beta=0.5, kl_bias_correction=corrected)
        assert all(t.kl == 0.0 and t.kl_gradient == 0.0 for answer in result.tokens for t in answer)


@pytest.mark.parametrize("call", [
    lambda: group_loss([[0.0]], [[0.0], [0.0]], [1.0]),
    lambda: group_loss([[0.0, -1.0]], [[0.0]], [1.0]),
    lambda: group_loss([[]], [[]], [1.0]),
    lambda: group_loss([], [], []),
    lambda: group_loss([[math.inf]], [[0.0]], [1.0]),
    lambda: group_loss([[0.0]], [[0.0]], [1.0], epsilon_low=1.0),
    lambda: group_loss([[0.0]], [[0.0]], [1.0], epsilon_high=-0.1),
    lambda: group_loss([[0.0]], [[0.0]], [1.0], level="answer"),
    lambda: group_loss([[0.0]], [[0.0]], [1.0], beta=-1),
    lambda: group_loss([[0.0, 0.0]], [[0.0, 0.0]], [1.0], max_completion_length=1),
    lambda: aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean"),
])
def test_losses_it_cannot_compute_are_one_sentence(call):
    with pytest.raises(BadInput) as raised:
        call()
    assert one_sentence(str(raised.value))


# --- clip-higher, CISPO, the overlong penalty -----------------------------------------------------------------

@pytest.mark.parametrize("seed, count", [(0, 2), (1, 0), (6, 0)])
def test_clip_higher_releases_exactly_the_tokens_between_the_two_upper_bounds(seed, count):
    """DAPO's clip-higher: with ε_high above ε_low, a token with A > 0 and 1 + ε_low < r ≤ 1 + ε_high keeps its
    gradient; every other token is clipped as before. Counted from the ratios, as DAPO's paper defines it."""
    new, old, ref, adv = random_group(seed)
    asymmetric = group_loss(new, old, adv, 0.2, 0.28, TOKEN, ref, 0.04)
    released = released_by_clip_higher(asymmetric)
    expected = [(i, t) for i in range(len(new)) for t in range(len(new[i]))
                if adv[i] > 0 and 1.2 < math.exp(new[i][t] - old[i][t]) <= 1.28]
    assert len(expected) == count
    assert [(t.answer, t.position) for t in released] == expected
    symmetric = group_loss(new, old, adv, 0.2, 0.2, TOKEN, ref, 0.04)
    assert symmetric.clipped_high - asymmetric.clipped_high == len(expected)
    assert symmetric.clipped_low == asymmetric.clipped_low
    assert all(t.surrogate_gradient != 0 for t in released)


def test_clip_higher_uses_the_losss_own_upper_clip_or_else_dapos():
    new, old, ref, adv = random_group(0)
    symmetric = group_loss(new, old, adv, 0.2, 0.2, TOKEN, ref, 0.04)
    dapo = clip_higher(symmetric)  # what DAPO's 0.28 would release: the two tokens between 1.2 and 1.28
    assert (dapo.epsilon_high, dapo.own, len(dapo.released)) == (0.28, False, 2)
    own = clip_higher(group_loss(new, old, adv, 0.2, 0.25, TOKEN, ref, 0.04))
    assert own.epsilon_high == 0.25 and own.own
    assert [(t.answer, t.position) for t in own.released] == [
        (t.answer, t.position) for t in dapo.released if t.ratio <= 1.25]
    assert clip_higher(group_loss(new, old, adv, 0.3, 0.3, TOKEN, ref, 0.04)) is None  # already above 0.28


def test_overlong_shaping_adds_eq_13_to_each_reward_and_takes_the_advantages_of_the_sums():
    group = SimpleNamespace(max_new_tokens=12, answers=[SimpleNamespace(ids=[0] * n) for n in (5, 8, 10, 12)])
    shaped = overlong_shaped(group, [1.0, 0.0, 1.0, 1.0], 4)
    assert shaped.lengths == [5, 8, 10, 12]
    assert shaped.penalties == [dapo_equation_13(n, 12, 4) for n in (5, 8, 10, 12)] == [0.0, 0.0, -0.5, -1.0]
    assert shaped.rewards == [1.0, 0.0, 0.5, 0.0]
    assert shaped.advantages.advantages == advantages([1.0, 0.0, 0.5, 0.0], SAMPLE_STD).advantages


def test_a_symmetric_clip_releases_nothing():
    new, old, ref, adv = random_group(1)
    assert released_by_clip_higher(group_loss(new, old, adv, 0.2, None, TOKEN, ref, 0.04)) == []


@pytest.mark.parametrize("seed", [0, 2])
def test_rescoring_with_the_same_settings_gives_the_same_loss(seed):
    new, old, ref, adv = random_group(seed)
    loss = group_loss(new, old, adv, 0.2, 0.28, SEQUENCE, ref, 0.04, 12, DR_GRPO, True)
    assert rescored(loss) == loss
    other = rescored(loss, beta=0.0, level=TOKEN)
    assert other == group_loss(new, old, adv, 0.2, 0.28, TOKEN, ref, 0.0, 12, DR_GRPO, True)


@pytest.mark.parametrize("seed, epsilon_max", [(0, 5.0), (1, 1.1), (2, 0.9), (6, 1.3)])
def test_cispo_is_trls_per_token_loss_and_its_autograd(seed, epsilon_max):
    """TRL's loss_type "cispo": per_token_loss = −clamp(r, max=ε_high).detach() · A · log π_θ, summed over the
    group's tokens and divided by their count; the gradient by autograd, PPO's beside it as dapo's."""
    new, old, ref, adv = random_group(seed)
    loss = group_loss(new, old, adv, 0.2, 0.28, TOKEN, ref, 0.0, loss_type=DAPO)
    result = cispo(loss, epsilon_max)
    count = sum(len(row) for row in new)
    logp = [torch.tensor(row, dtype=torch.float64, requires_grad=True) for row in new]
    total = sum((-torch.clamp(torch.exp(lp - torch.tensor(o, dtype=torch.float64)), max=epsilon_max).detach()
                 * a * lp).sum() for lp, o, a in zip(logp, old, adv)) / count
    total.backward()
    assert result.loss == pytest.approx(total.item(), rel=1e-12, abs=1e-15)
    for row, lp, terms in zip(result.tokens, logp, loss.tokens):
        for c, g, t in zip(row, lp.grad.tolist(), terms):
            assert c.gradient == pytest.approx(g, rel=1e-12, abs=1e-15)
            assert c.ppo_gradient == pytest.approx(t.surrogate_gradient, rel=1e-12, abs=1e-15)  # dapo, β = 0
    flat = [c for row in result.tokens for c in row]
    assert result.capped == sum(c.ratio > epsilon_max and c.advantage > 0 for c in flat)  # TRL's cispo_clip_ratio
    assert result.kept_by_cispo == sum(c.ppo_clipped for c in flat) > 0  # the clip held some; CISPO pushes them all


def test_where_neither_clips_cispos_gradient_is_ppos():
    new, old, ref, adv = random_group(0)
    result = cispo(group_loss(new, old, adv, 0.2, 0.28, TOKEN, ref, 0.0, loss_type=DAPO), 5.0)
    free = [c for row in result.tokens for c in row if not c.ppo_clipped]
    assert free and all(c.gradient == pytest.approx(c.ppo_gradient, rel=1e-12) for c in free)


def dapo_equation_13(length: int, max_length: int, cache: int) -> float:
    """DAPO's paper, eq. 13, as printed: R_length(y)."""
    if length <= max_length - cache:
        return 0.0
    if length <= max_length:
        return ((max_length - cache) - length) / cache
    return -1.0


@pytest.mark.parametrize("max_length, cache", [(100, 20), (12, 4), (12, 0), (12, 12), (1, 1)])
def test_the_overlong_penalty_is_dapos_equation_13(max_length, cache):
    lengths = list(range(1, max_length + 3))
    assert overlong_penalty(lengths, max_length, cache) == [dapo_equation_13(n, max_length, cache) for n in lengths]


def test_the_overlong_penalty_of_trls_docs_example():
    assert overlong_penalty([90], 100, 20) == [-0.5]  # TRL's get_soft_overlong_punishment docstring


@pytest.mark.parametrize("call", [
    lambda: overlong_penalty([3], 0, 0), lambda: overlong_penalty([3], 10, 11), lambda: overlong_penalty([3], 10, -1),
    lambda: overlong_penalty([3], 10.5, 2), lambda: cispo(group_loss([[0.0]], [[0.0]], [1.0]), 0.0),
    lambda: cispo(group_loss([[0.0]], [[0.0]], [1.0]), math.nan),
    lambda: cispo(group_loss([[0.0]], [[0.0]], [1.0], level=SEQUENCE), 5.0),
])
def test_variants_it_cannot_compute_are_one_sentence(call):
    with pytest.raises(BadInput) as raised:
        call()
    assert one_sentence(str(raised.value))

# --- the reward model and DPO ------------------------------------------------------------------------------

@pytest.mark.parametrize("chosen, rejected", [(1.0, 0.0), (-2.5, 3.0), (40.0, -40.0), (0.3, 0.3)])
def test_bradley_terry_is_minus_logsigmoid_of_the_margin(chosen, rejected):
    result = bradley_terry(chosen, rejected)
    margin = torch.tensor(chosen - rejected, dtype=torch.float64)
    assert result.loss == pytest.approx(-F.logsigmoid(margin).item(), rel=1e-14)
    assert result.probability == pytest.approx(torch.sigmoid(margin).item(), rel=1e-14)
    if (chosen, rejected) == (1.0, 0.0):
        assert round(result.loss, 5) == 0.31326 and round(result.probability, 4) == 0.7311  # log(1 + e⁻¹), σ(1)


@pytest.mark.parametrize("logps, beta", [((-12.0, -15.0, -13.0, -14.0), 0.1), ((-3.2, -2.1, -3.0, -2.9), 0.5),
                                         ((-20.0, -20.0, -20.0, -20.0), 0.1)])
def test_dpo_is_bradley_terry_on_the_implicit_reward(logps, beta):
    ours, chat = dpo_as_bradley_terry(*logps, beta), dpo_loss(*logps, beta)
    assert ours.loss == pytest.approx(chat.loss, rel=1e-12)
    assert (ours.reward_chosen, ours.reward_rejected) == pytest.approx((chat.chosen_reward, chat.rejected_reward))
    assert ours.reward_chosen == implicit_reward(logps[0], logps[2], beta)
    if logps[0] == logps[2] and logps[1] == logps[3]:
        assert ours.loss == pytest.approx(math.log(2), rel=1e-15)  # policy = reference: training starts at ln 2


@pytest.mark.parametrize("call", [lambda: bradley_terry(math.nan, 0.0), lambda: bradley_terry("1", 0.0),
                                  lambda: implicit_reward(-1.0, -2.0, 0.0),
                                  lambda: implicit_reward(-math.inf, -2.0, 0.1)])
def test_rewards_it_cannot_use_are_one_sentence(call):
    with pytest.raises(BadInput) as raised:
        call()
    assert one_sentence(str(raised.value))


# --- with a model: the group -------------------------------------------------------------------------------

# "role: text" lines: a chat template for lmviz's tiny GPT, which has none of its own
PLAIN = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}assistant:{% endif %}")
ROOT = Path(__file__).resolve().parents[2]
STORY_PROMPT = "where did the dog go?"
ARITHMETIC = "What is 7 + 5? Reply with just the number."


@pytest.fixture(scope="module")
def tiny_plain():
    """lmviz's tiny GPT (no chat template of its own) with its tokenizer given the PLAIN template."""
    tiny = load_causal_lm(TINY_GPT)
    tokenizer = copy.deepcopy(tiny.tokenizer)
    tokenizer.chat_template = PLAIN
    return LoadedModel(tiny.model, tokenizer, "tiny GPT with a plain template", "the tests", "cpu", "float32", 0.0)


def with_stop(loaded, word: str) -> LoadedModel:
    """The same model, its tokenizer's end-of-sequence token made ``word``: answers then stop at it."""
    tokenizer = copy.deepcopy(loaded.tokenizer)
    tokenizer.eos_token = word
    return LoadedModel(loaded.model, tokenizer, loaded.name, loaded.source, "cpu", "float32", 0.0)


def reference_draws(model, prompt: list[int], size: int, temperature: float, steps: int, seed: int) -> list[list[int]]:
    """Sampling written here without the key/value cache: at each step a full forward pass over each row's whole
    text, softmax(logits / T), one torch.multinomial draw per row from a generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    rows = [list(prompt) for _ in range(size)]
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(rows)).logits[:, -1].float()
        drawn = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)[:, 0]
        rows = [row + [token] for row, token in zip(rows, drawn.tolist())]
    return [row[len(prompt):] for row in rows]


def test_the_group_is_drawn_from_softmax_over_temperature_with_its_seed(tiny_plain):
    group = sample_group(tiny_plain, STORY_PROMPT, 4, seed=3, temperature=1.3, max_new_tokens=8)
    assert stop_ids(tiny_plain) == [tiny_plain.tokenizer.eos_token_id]  # the tiny GPT's [SEP], in both configs
    assert not any(answer.finished for answer in group.answers)  # it never wrote [SEP]: no answer is cut
    assert [a.ids for a in group.answers] == reference_draws(tiny_plain.model, group.prompt_ids, 4, 1.3, 8, 3)
    expected_prompt = tiny_plain.tokenizer.apply_chat_template([{"role": "user", "content": STORY_PROMPT}],
                                                               add_generation_prompt=True)["input_ids"]
    assert group.prompt_ids == list(expected_prompt)
    assert [a.tokens for a in group.answers] == [[tiny_plain.tokenizer.decode([i]) for i in a.ids]
                                                 for a in group.answers]


def test_sampling_reports_each_token_drawn_and_the_step_each_update(tiny_plain):
    """The page's status reads these: the tokens drawn of the limit, then each update of the step."""
    said = []
    group = sample_group(tiny_plain, STORY_PROMPT, 4, seed=3, temperature=1.3, max_new_tokens=8,
                         progress=lambda fraction, words: said.append((fraction, words)))
    assert said == [(n / 8, f"{n} of at most 8 tokens drawn.") for n in range(1, 9)]  # no answer stops early
    said.clear()
    grpo_step(tiny_plain, group, [1.0, -1.0, 0.5, -0.5], updates=2,
              progress=lambda fraction, words: said.append((fraction, words)))
    assert said == [(1 / 3, "Update 1 of 2 done; the next…"), (2 / 3, "Update 2 of 2 done; scoring the group again…")]


def test_the_same_seed_gives_the_same_group_and_another_seed_another(tiny_plain):
    first, again = (sample_group(tiny_plain, STORY_PROMPT, 4, seed=0, temperature=1.5, max_new_tokens=6)
                    for _ in range(2))
    other = sample_group(tiny_plain, STORY_PROMPT, 4, seed=1, temperature=1.5, max_new_tokens=6)
    assert [a.ids for a in first.answers] == [a.ids for a in again.answers]
    assert [a.logp_old for a in first.answers] == [a.logp_old for a in again.answers]
    assert [a.ids for a in first.answers] != [a.ids for a in other.answers]


@pytest.mark.parametrize("temperature", [1.0, 1.8])
def test_pi_old_is_a_fresh_forward_pass_and_log_softmax(tiny_plain, temperature):
    """The log-probabilities the sampler drew with (with the cache) are a fresh forward pass's, within float32
    rounding; token_logprobs is F.log_softmax(logits / T) at each answer token."""
    group = sample_group(tiny_plain, STORY_PROMPT, 3, seed=5, temperature=temperature, max_new_tokens=8)
    prompt = group.prompt_ids
    for answer in group.answers:
        ours = token_logprobs(tiny_plain, prompt, answer.ids, temperature)
        with torch.no_grad():
            logits = tiny_plain.model(input_ids=torch.tensor([prompt + answer.ids])).logits[0]
        reference = F.log_softmax(logits[len(prompt) - 1:-1] / temperature, dim=-1)
        reference = reference[torch.arange(len(answer.ids)), torch.tensor(answer.ids)]
        assert (ours - reference).abs().max() < 1e-5
        assert (ours - torch.tensor(answer.logp_old)).abs().max() < 1e-4
    assert max(-x for a in group.answers for x in a.logp_old) > 1  # some draws were unlikely: the check has range


@pytest.fixture(scope="module")
def stopping(tiny_plain):
    """The tiny GPT made to stop at "the", and a group it drew: some answers stopped, some were cut at 10 tokens."""
    loaded = with_stop(tiny_plain, "the")
    return loaded, sample_group(loaded, STORY_PROMPT, 8, seed=0, temperature=1.5, max_new_tokens=10)


def test_an_answer_stops_at_its_stopping_token_and_keeps_it(tiny_plain, stopping):
    loaded, group = stopping
    stop = loaded.tokenizer.convert_tokens_to_ids("the")
    assert stop in stop_ids(loaded)
    free = sample_group(tiny_plain, STORY_PROMPT, 8, seed=0, temperature=1.5, max_new_tokens=10)
    finished = [a for a in group.answers if a.finished]
    assert finished and any(not a.finished for a in group.answers)
    for answer, drawn in zip(group.answers, free.answers):
        end = drawn.ids.index(stop) + 1 if stop in drawn.ids else len(drawn.ids)
        assert answer.ids == drawn.ids[:end] and answer.finished == (stop in drawn.ids)  # the same draws, cut
        assert len(answer.logp_old) == len(answer.ids) and answer.length == len(answer.ids) - answer.finished
        assert answer.text == loaded.tokenizer.decode(answer.ids[:answer.length])


def test_right_padding_changes_no_answers_log_probabilities(tiny_plain, stopping):
    answers = [a.ids for a in stopping[1].answers]
    assert len({len(a) for a in answers}) > 1  # answers of several lengths: padding is tested
    prompt = stopping[1].prompt_ids
    logp, mask = group_logprobs(tiny_plain, prompt, answers)
    for i, ids in enumerate(answers):
        alone = token_logprobs(tiny_plain.model, prompt, ids)
        assert (logp[i, :len(ids)] - alone).abs().max() < 1e-5
        assert mask[i].tolist() == [1] * len(ids) + [0] * (mask.shape[1] - len(ids)) and logp[i, len(ids):].eq(0).all()


def test_the_bundled_model_samples_with_its_chat_template_and_takes_a_step(bundled):
    """SmolLM2 (the one test on it: it is slow here): a group of 2 answers of 2 tokens, and one step on it."""
    group = sample_group(bundled, ARITHMETIC, 2, seed=0, temperature=1.0, max_new_tokens=2)
    tokenizer = bundled.tokenizer
    reference = tokenizer.apply_chat_template([{"role": "user", "content": ARITHMETIC}], add_generation_prompt=True,
                                              tokenize=False)
    assert tokenizer.decode(group.prompt_ids) == reference  # ends with "<|im_start|>assistant\n"
    assert stop_ids(bundled) == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    logp, _ = group_logprobs(bundled.model, group.prompt_ids, [a.ids for a in group.answers])  # a module, not loaded
    for row, answer in zip(logp, group.answers):
        assert (row[:len(answer.ids)] - torch.tensor(answer.logp_old)).abs().max() < 1e-4
    before = snapshot(bundled.model)
    step = grpo_step(bundled, group, [1.0, -1.0], lr=0.01)
    assert all(torch.equal(t, before[name]) for name, t in bundled.model.state_dict().items())
    assert step.answer_logps_after[0] > step.answer_logps_before[0]  # A > 0: its answer became likelier
    assert step.answer_logps_after[1] < step.answer_logps_before[1]  # A < 0: less likely
    assert any(t.ratio != 1.0 for answer in step.after.tokens for t in answer)


# --- the reward rules --------------------------------------------------------------------------------------

def answer_of(text: str, length: int = 3, finished: bool = True) -> Answer:
    return Answer(text=text, ids=list(range(length + finished)), tokens=[], logp_old=[], finished=finished)


@pytest.mark.parametrize("text, reward", [("It is 12.", 1.0), ("7 + 5 = 12", 1.0), ("12.0", 1.0), ("112", 0.0),
                                          ("twelve", 0.0), ("1 2", 0.0), ("-12", 0.0), ("", 0.0)])
def test_contains_number(text, reward):
    assert contains_number(12).score(answer_of(text)) == reward


@pytest.mark.parametrize("text, reward", [("It's paris!", 1.0), ("PARIS", 1.0), ("Parisian", 0.0), ("", 0.0)])
def test_contains_word(text, reward):
    assert contains_word("Paris").score(answer_of(text)) == reward


@pytest.mark.parametrize("length, finished, reward", [(3, True, 1.0), (3, False, 1.0), (4, True, 0.0)])
def test_at_most_tokens_leaves_the_stopping_token_out(length, finished, reward):
    assert at_most_tokens("3").score(answer_of("x", length, finished)) == reward


def test_a_rules_source_is_its_scoring_function(tiny_plain):
    rule = contains_number("12")
    assert rule.name == "contains_number(12)" and rule.source.startswith("def score(answer: Answer) -> float:")
    assert "NUMBER.findall(answer.text)" in rule.source
    group = sample_group(tiny_plain, STORY_PROMPT, 4, seed=0, temperature=1.0, max_new_tokens=4)
    assert rewards(group, at_most_tokens(4)) == [1.0] * 4 and rewards(group, at_most_tokens(3)) == [0.0] * 4


@pytest.mark.parametrize("call", [lambda: contains_number("twelve"), lambda: contains_number(""),
                                  lambda: contains_number("nan"), lambda: contains_number("inf"),
                                  lambda: contains_word(""), lambda: contains_word("two words"),
                                  lambda: at_most_tokens(0), lambda: at_most_tokens("x"), lambda: at_most_tokens(2.5)])
def test_a_rule_that_cannot_parse_its_parameter_is_one_sentence(call):
    with pytest.raises(BadInput) as raised:
        call()
    assert one_sentence(str(raised.value))


@pytest.mark.parametrize("settings, error", [
    (dict(prompt=""), NothingToScore), (dict(prompt="   "), NothingToScore), (dict(size=1), BadInput),
    (dict(size=17), BadInput), (dict(size=True), BadInput), (dict(size=2.0), BadInput),
    (dict(max_new_tokens=0), BadInput), (dict(max_new_tokens=65), BadInput), (dict(temperature=0), BadInput),
    (dict(temperature=-1.0), BadInput), (dict(temperature=math.nan), BadInput), (dict(temperature=3.0), BadInput),
    (dict(seed=-1), BadInput), (dict(seed="0"), BadInput)])
def test_settings_it_cannot_sample_with_are_one_sentence(tiny_plain, settings, error):
    arguments = dict(prompt=STORY_PROMPT, size=4, seed=0, temperature=1.0, max_new_tokens=4) | settings
    with pytest.raises(error) as raised:
        sample_group(tiny_plain, **arguments)
    assert one_sentence(str(raised.value))


def test_a_model_without_a_chat_template_says_so():
    with pytest.raises(NoChatTemplate) as raised:
        sample_group(load_causal_lm(TINY_GPT), STORY_PROMPT, 4)
    assert one_sentence(str(raised.value))


# --- one step ----------------------------------------------------------------------------------------------

def reference_step(model, prompt: list[int], answers: list[list[int]], adv: list[float], lr: float, loss_type: str,
                   level: str, eps: float, beta: float, temperature: float, limit: int, updates: int = 1,
                   corrected: bool = False):
    """torch.optim.SGD on an independent deep copy, ``updates`` times on the same answers, the loss written here from
    the equations answer by answer (π_old = π_ref = the model before the first update, as TRL with num_iterations
    updates per group). Returns the answers' log π after the last update and each update's gradient norm."""
    model = copy.deepcopy(model).requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def logps(answer):
        logits = model(input_ids=torch.tensor([prompt + answer])).logits[0, len(prompt) - 1:-1] / temperature
        return F.log_softmax(logits.float(), dim=-1)[torch.arange(len(answer)), torch.tensor(answer)]

    with torch.no_grad():
        olds = [logps(answer) for answer in answers]
    norms = []
    for _ in range(updates):
        terms = []
        for answer, a, old in zip(answers, adv, olds):
            new = logps(answer)
            ratio = torch.exp((new - old).mean()).expand_as(new) if level == SEQUENCE else torch.exp(new - old)
            surrogate = torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
            kl = torch.exp(old - new) - (old - new) - 1
            terms.append(-surrogate + beta * (kl * ratio if corrected else kl))
        count = sum(len(answer) for answer in answers)
        loss = {GRPO: lambda: sum(t.mean() for t in terms) / len(terms),
                BNPO: lambda: sum(t.sum() for t in terms) / count,
                DR_GRPO: lambda: sum(t.sum() for t in terms) / (len(terms) * limit),
                LUSPO: lambda: sum(t.sum() for t in terms) / len(terms)}[loss_type]()
        optimizer.zero_grad()
        loss.backward()
        norms.append(math.sqrt(sum(p.grad.double().square().sum().item() for p in model.parameters())))
        optimizer.step()
    with torch.no_grad():
        return [logps(answer).tolist() for answer in answers], norms


def snapshot(model) -> dict:
    return {name: t.clone() for name, t in model.state_dict().items()}


@pytest.mark.parametrize("loss_type, level", [(GRPO, TOKEN), (BNPO, TOKEN), (DR_GRPO, SEQUENCE)])
def test_one_step_is_torch_optim_sgd_on_a_copy_and_moves_the_ratios(tiny_plain, stopping, loss_type, level):
    loaded, group = stopping
    adv = advantages(rewards(group, at_most_tokens(5)), SAMPLE_STD).advantages
    before = snapshot(loaded.model)
    step = grpo_step(loaded, group, adv, lr=0.01, loss_type=loss_type, level=level, beta=0.04)
    assert all(torch.equal(t, before[name]) for name, t in loaded.model.state_dict().items())  # bitwise
    assert all(p.grad is None and not p.requires_grad for p in loaded.model.parameters())
    answers = [a.ids for a in group.answers]
    expected, norms = reference_step(loaded.model, group.prompt_ids, answers, adv, 0.01, loss_type, level, 0.2, 0.04,
                                     group.temperature, group.max_new_tokens)
    after = [[t.logp_new for t in answer] for answer in step.after.tokens]
    assert max(abs(x - y) for a, b in zip(after, expected) for x, y in zip(a, b)) < 1e-4
    assert step.grad_norm == pytest.approx(norms[0], rel=1e-4)
    # before the step every ratio is exactly 1 and nothing is clipped; after it, neither holds
    assert all(t.ratio == 1.0 for answer in step.before.tokens for t in answer)
    assert step.before.clip_fraction == 0.0 and step.before.mean_kl == 0.0
    assert step.after.clip_fraction > 0 and step.after.mean_kl > 0
    assert any(abs(t.ratio - 1) > 0.01 for answer in step.after.tokens for t in answer)
    assert step.answer_logps_after == pytest.approx([sum(row) for row in after], rel=1e-12)
    assert step.weights == sum(p.numel() for p in loaded.model.parameters())


# luspo sums each answer's terms where the others average them: a smaller rate moves the tiny GPT as far
@pytest.mark.parametrize("loss_type, level, corrected, lr", [(GRPO, TOKEN, True, 0.05), (LUSPO, TOKEN, False, 0.005),
                                                            (BNPO, SEQUENCE, False, 0.05)])
def test_later_updates_on_the_group_are_torch_optim_sgd_again_with_the_ratios_moved(stopping, loss_type, level,
                                                                                   corrected, lr):
    loaded, group = stopping
    adv = advantages(rewards(group, at_most_tokens(5)), SAMPLE_STD).advantages
    step = grpo_step(loaded, group, adv, lr=lr, loss_type=loss_type, level=level, epsilon_low=0.1, beta=0.2,
                     updates=3, kl_bias_correction=corrected)
    answers = [a.ids for a in group.answers]
    expected, norms = reference_step(loaded.model, group.prompt_ids, answers, adv, lr, loss_type, level, 0.1, 0.2,
                                     group.temperature, group.max_new_tokens, updates=3, corrected=corrected)
    assert [u.grad_norm for u in step.updates] == pytest.approx(norms, rel=1e-4)
    after = [[t.logp_new for t in answer] for answer in step.after.tokens]
    assert max(abs(x - y) for a, b in zip(after, expected) for x, y in zip(a, b)) < 1e-4
    assert [u.number for u in step.updates] == [1, 2, 3] and step.before is step.updates[0].start
    # each update's terms are taken at the weights the update before left, against the unchanged π_old and π_ref
    for update in step.updates[1:]:
        assert any(t.ratio != 1.0 for answer in update.start.tokens for t in answer)
        assert update.start.mean_kl > 0
        assert all(t.logp_old == t.logp_ref == first.logp_new
                   for answer, answer0 in zip(update.start.tokens, step.before.tokens)
                   for t, first in zip(answer, answer0))
    assert step.updates[1].start.clipped_count > 0  # the clip acts on the second update


def test_only_the_rate_the_loss_type_and_the_advantages_shape_the_first_update(stopping):
    """The page's sentence: ε, β, the ratio's level and the KL's weighting change nothing at the first update, where
    every ratio is 1 and π_θ is π_ref; at the second, each of them changes the gradient."""
    loaded, group = stopping
    adv = advantages(rewards(group, at_most_tokens(5)), SAMPLE_STD).advantages
    # a small rate: the ratios stay near 1, where ε decides which tokens the clip holds
    base = dict(lr=0.005, loss_type=DAPO, level=TOKEN, epsilon_low=0.2, beta=0.04, updates=2, kl_bias_correction=True)
    first = grpo_step(loaded, group, adv, **base)
    for change in (dict(epsilon_low=0.001), dict(beta=0.9), dict(level=SEQUENCE), dict(kl_bias_correction=False)):
        other = grpo_step(loaded, group, adv, **(base | change))
        assert other.updates[0].grad_norm == pytest.approx(first.updates[0].grad_norm, rel=1e-6), change
        assert other.updates[1].grad_norm != pytest.approx(first.updates[1].grad_norm, rel=1e-6), change
        assert other.updates[0].start.clipped_count == 0 and other.updates[0].start.mean_kl == 0
    assert grpo_step(loaded, group, adv, **(base | dict(epsilon_low=0.001))).updates[1].start.clipped_count > 0
    # what does shape it: the loss type its gradient, the rate how far the weights go along it
    assert grpo_step(loaded, group, adv, **(base | dict(loss_type=GRPO, updates=1))).grad_norm != pytest.approx(
        first.grad_norm, rel=1e-6)
    slower = grpo_step(loaded, group, adv, **(base | dict(lr=0.001, updates=1)))
    assert slower.grad_norm == first.grad_norm and slower.after.mean_kl < first.updates[1].start.mean_kl


def test_a_group_of_equal_rewards_gives_a_step_that_changes_nothing(stopping):
    loaded, group = stopping
    equal = advantages([1.0] * len(group.answers), SAMPLE_STD)
    step = grpo_step(loaded, group, equal.advantages, lr=0.1, beta=0.04)
    assert equal.teaches_nothing and step.loss == 0.0 and step.grad_norm == 0.0
    assert all(t.ratio == 1.0 for answer in step.after.tokens for t in answer)  # exactly: no weight moved


@pytest.mark.parametrize("settings", [dict(lr=0.0), dict(lr=2.0), dict(loss_type="mean"), dict(level="answer"),
                                      dict(advantages=[1.0]), dict(advantages=[math.nan] * 8), dict(beta=-0.1),
                                      dict(updates=0), dict(updates=MAX_UPDATES + 1), dict(loss_type="cispo")])
def test_a_step_it_cannot_take_is_one_sentence(stopping, settings):
    loaded, group = stopping
    arguments = dict(advantages=[1.0, -1.0] * 4) | settings
    with pytest.raises(BadInput) as raised:
        grpo_step(loaded, group, **arguments)
    assert one_sentence(str(raised.value))


# --- what the words say of TRL --------------------------------------------------------------------------------

# how a sentence names each of TRL's defaults (lmviz.core.trl.TRL)
TRL_FIELD_WORDS = {"loss_type": ("loss_type", "loss type"), "beta": ("beta", "β"), "epsilon": ("epsilon", "ε"),
                   "scale_rewards": ("scale_rewards",), "num_iterations": ("num_iterations",),
                   "use_bias_correction_kl": ("use_bias_correction_kl",), "learning_rate": ("learning_rate",),
                   "importance_sampling_level": ("importance_sampling_level",),
                   "mask_truncated_completions": ("mask_truncated_completions",)}


def written(value) -> tuple[str, ...]:
    if isinstance(value, bool):
        return ("on", "True", "true") if value else ("off", "False", "false")
    return (f"{value:g}",) if isinstance(value, float) else (str(value),)


def wrong_defaults(text: str) -> list[str]:
    """Each sentence (or clause) that speaks of a TRL default and names one of TRL's settings without its value."""
    wrong = []
    for sentence in re.split(r"(?<=[.;])\s+", text):
        if "TRL" not in sentence or "default" not in sentence or re.search(r"\b(?!GRPO)[A-Z]\w*Config\b", sentence):
            continue  # another trainer's setting (DPOConfig's beta) is not GRPO's
        wrong += [f"{field}: {sentence}" for field, words in TRL_FIELD_WORDS.items()
                  if any(word in sentence for word in words)
                  and not any(re.search(rf"(?<![\w.]){re.escape(form)}(?!\w|\.\d)", sentence)
                              for form in written(getattr(TRL, field)))]  # whole: 0 is not in 0.04
    return wrong


def test_the_checker_catches_a_wrong_trl_default():
    assert wrong_defaults("TRL's default loss type is grpo. Its β defaults to 0.04 in TRL.") == [
        "loss_type: TRL's default loss type is grpo.", "beta: Its β defaults to 0.04 in TRL."]
    assert wrong_defaults(f"TRL's default loss type is {TRL.loss_type}; DeepSeekMath used β = 0.04.") == []
    assert wrong_defaults("TRL's DPOConfig beta is 0.1 by default.") == []


@pytest.mark.parametrize("path", ["docs/lessons/grpo.md", "docs/reference/cli.md", "docs/lessons/gradient_step.md",
                                  "docs/teachers/index.md"])
def test_every_trl_default_the_docs_name_is_trls(path):
    assert wrong_defaults((ROOT / path).read_text()) == []


def test_every_trl_default_the_glossary_names_is_trls():
    assert wrong_defaults(" ".join(definition for _, definition in TERMS.values())) == []
