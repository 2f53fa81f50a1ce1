"""lmviz.lessons.grpo against TRL's own code (TRL 1.16.0, a test requirement only): the overlong penalty against
trl.rewards.get_soft_overlong_punishment, and every loss, token gradient, clip count and mean KL the page shows
against GRPOTrainer._compute_loss, RLOO's and GSPO's one ratio per answer against RLOOTrainer._compute_loss and
GRPOTrainer's sequence level, each called on a stand-in trainer whose model forward pass
(_get_per_token_logps_and_entropies) returns the lesson's own log-probabilities. Then what the lesson, the glossary
and the questions say of TRL, read from TRL's source."""

import inspect
import math
import os
import random
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl import GRPOConfig, RLOOConfig  # noqa: E402
from trl.rewards import get_soft_overlong_punishment  # noqa: E402
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from trl.trainer.rloo_trainer import RLOOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

from lmviz.core.trl import CISPO, LUSPO  # noqa: E402
from lmviz.course.glossary import TERMS  # noqa: E402
from lmviz.course.questions import grpo as questions  # noqa: E402
from lmviz.lessons import grpo  # noqa: E402
from lmviz.lessons.grpo import (  # noqa: E402
    LOSS_TYPES,
    SEQUENCE,
    TOKEN,
    answer_ratios,
    cispo,
    group_loss,
    overlong_penalty,
)
from tests.helpers import config_default, config_field  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# the page's source, its lines joined: a sentence cut by the line's end is still found
PAGE_SOURCE = " ".join((ROOT / "app_pages" / "grpo.py").read_text().split())
LENGTHS = (3, 5, 2, 6)  # four answers of different lengths, so that the loss types differ
LIMIT = 8  # the completion length limit: dr_grpo's constant


def random_group(seed: int):
    """log π_old, log π_θ (ratios from e^−0.5 to e^0.5: some clipped) and log π_ref per answer, and advantages."""
    rng = random.Random(seed)
    old = [[math.log(rng.uniform(0.05, 0.9)) for _ in range(n)] for n in LENGTHS]
    new = [[o + rng.uniform(-0.5, 0.5) for o in row] for row in old]
    ref = [[o + rng.uniform(-0.3, 0.3) for o in row] for row in old]
    return new, old, ref, [rng.uniform(-1.5, 1.5) for _ in LENGTHS]


def padded(rows, width: int = max(LENGTHS)) -> torch.Tensor:
    # padding is −7, not 0: TRL must mask it out, as the lesson does
    return torch.tensor([row + [-7.0] * (width - len(row)) for row in rows], dtype=torch.float64)


class Accelerator:
    """One process: reduce and gather give back what they are given."""
    num_processes = 1

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather


def stand_in(trainer: type, per_token_logps: torch.Tensor, **attributes):
    """An instance of ``trainer`` made without its __init__ (no model, no dataset), holding only what _compute_loss
    reads; its forward pass returns ``per_token_logps`` (and entropies of 0)."""
    self = object.__new__(trainer)
    self.__dict__.update(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (per_token_logps,
                                                                    torch.zeros_like(per_token_logps), None),
        aux_loss_enabled=False, model=SimpleNamespace(training=True), accelerator=Accelerator(),
        _metrics={"train": defaultdict(list)}, current_gradient_accumulation_steps=1, **attributes)
    return self


def inputs_for(mask: torch.Tensor, **tensors) -> dict:
    size, width = mask.shape
    return {"prompt_ids": torch.zeros(size, 1, dtype=torch.long), "prompt_mask": torch.ones(size, 1, dtype=torch.long),
            "completion_ids": torch.zeros(size, width, dtype=torch.long), "completion_mask": mask, **tensors}


def mask_of(lengths=LENGTHS) -> torch.Tensor:
    return torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])


def trl_grpo(new, old, ref, adv, loss_type: str, level: str, epsilon_low: float, epsilon_high: float, beta: float,
             corrected: bool):
    """GRPOTrainer._compute_loss on these log-probabilities: its loss, the gradient with respect to each token's
    log π_θ, and the metrics it logs."""
    logps = padded(new).requires_grad_(True)
    mask = mask_of()
    trainer = stand_in(
        GRPOTrainer, logps, top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level,
        beta=beta, loss_type=loss_type, epsilon_low=epsilon_low, epsilon_high=epsilon_high, use_vllm=False,
        vllm_importance_sampling_correction=False, max_completion_length=LIMIT, _entropy_bonus_enabled=False,
        args=SimpleNamespace(use_bias_correction_kl=corrected, delta=None, steps_per_generation=1))
    loss = GRPOTrainer._compute_loss(trainer, None, inputs_for(
        mask, advantages=torch.tensor(adv, dtype=torch.float64), old_per_token_logps=padded(old),
        ref_per_token_logps=padded(ref), num_items_in_batch=mask.sum()))
    loss.backward()
    gradients = [row[:n] for row, n in zip(logps.grad.tolist(), LENGTHS)]
    return loss.item(), gradients, {name: values[-1] for name, values in trainer._metrics["train"].items()}


SETTINGS = [(0, 0.2, 0.2, 0.0, False), (1, 0.2, 0.28, 0.04, True), (2, 0.1, 0.3, 0.5, False),
            (3, 0.2, 0.2, 0.04, True)]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", [TOKEN, SEQUENCE])
@pytest.mark.parametrize("seed, epsilon_low, epsilon_high, beta, corrected", SETTINGS)
def test_each_loss_its_token_gradients_and_its_logged_metrics_are_grpotrainers(loss_type, level, seed, epsilon_low,
                                                                               epsilon_high, beta, corrected):
    new, old, ref, adv = random_group(seed)
    ours = group_loss(new, old, adv, epsilon_low, epsilon_high, level, ref, beta, LIMIT, loss_type, corrected)
    loss, gradients, logged = trl_grpo(new, old, ref, adv, loss_type, level, epsilon_low, epsilon_high, beta,
                                       corrected)
    assert ours.losses[loss_type].loss == pytest.approx(loss, rel=1e-12, abs=1e-15)
    for row, theirs in zip(ours.tokens, gradients):  # the page's ∂ clip and ∂ KL columns add up to TRL's gradient
        assert [t.surrogate_gradient + t.kl_gradient for t in row] == pytest.approx(theirs, rel=1e-10, abs=1e-15)
    assert ours.clipped_low / ours.clip_total == pytest.approx(logged["clip_ratio/low_mean"], rel=1e-12)
    assert ours.clipped_high / ours.clip_total == pytest.approx(logged["clip_ratio/high_mean"], rel=1e-12)
    assert ours.clip_fraction == pytest.approx(logged["clip_ratio/region_mean"], rel=1e-12)
    if beta:
        assert ours.mean_kl == pytest.approx(logged["kl"], rel=1e-12)


def test_the_random_groups_reach_the_clip_on_both_sides():
    """Not vacuous: every setting above clips tokens at the token level, some below and some above, and some
    clip answers at the sequence level."""
    low = high = answers = 0
    for seed, epsilon_low, epsilon_high, *_ in SETTINGS:
        new, old, _, adv = random_group(seed)
        tokens = group_loss(new, old, adv, epsilon_low, epsilon_high, TOKEN)
        assert tokens.clipped_count > 0
        low, high = low + tokens.clipped_low, high + tokens.clipped_high
        answers += group_loss(new, old, adv, epsilon_low, epsilon_high, SEQUENCE).clipped_count
    assert low > 0 and high > 0 and answers > 0


@pytest.mark.parametrize("seed, epsilon_max, binds", [(0, 5.0, False), (1, 1.1, True), (2, 0.9, True)])
def test_cispo_is_grpotrainers_cispo(seed, epsilon_max, binds):
    """TRL's loss_type "cispo" reads ε_max from epsilon_high; its loss, each token's gradient and the share of
    tokens it caps (cispo_clip_ratio). The lesson computes CISPO at the token level, β = 0."""
    new, old, ref, adv = random_group(seed)
    ours = cispo(group_loss(new, old, adv, level=TOKEN), epsilon_max)
    loss, gradients, logged = trl_grpo(new, old, ref, adv, CISPO, TOKEN, 0.2, epsilon_max, 0.0, False)
    assert ours.loss == pytest.approx(loss, rel=1e-12)
    for row, theirs in zip(ours.tokens, gradients):
        assert [c.gradient for c in row] == pytest.approx(theirs, rel=1e-12, abs=1e-15)
    assert ours.capped / sum(LENGTHS) == pytest.approx(logged["cispo_clip_ratio"], rel=1e-12)
    assert (ours.capped > 0) == binds  # ratios reach e^0.5 = 1.65: a cap of 5 never binds, one near 1 does


def one_ratio(trainer_loss, size: int) -> list[float]:
    """Each answer's one ratio, read back from a trainer's loss: with no clip in reach, β = 0 and the advantages
    one-hot (A = 1 for answer j, 0 for the others), the loss is −ratio_j / G."""
    ratios = []
    for j in range(size):
        ratios.append(-size * trainer_loss([1.0 if i == j else 0.0 for i in range(size)]))
    return ratios


NO_CLIP = 1e6  # clip(r, 1 − ε, 1 + ε) = r for every ratio here


def test_rloos_ratio_is_rlootrainers_product_and_gspos_is_grpotrainers_geometric_mean():
    new, old, _, _ = random_group(5)
    mask = mask_of()

    def rloo(adv):
        trainer = stand_in(RLOOTrainer, padded(new), epsilon_low=NO_CLIP, epsilon_high=NO_CLIP)
        old_logps = (padded(old) * mask).sum(1)  # RLOOTrainer's old_logps: each answer's sum
        return RLOOTrainer._compute_loss(trainer, None, inputs_for(
            mask, advantages=torch.tensor(adv, dtype=torch.float64), old_logps=old_logps)).item()

    def gspo(adv):
        return trl_grpo(new, old, old, adv, "grpo", SEQUENCE, NO_CLIP, NO_CLIP, 0.0, False)[0]

    ours = answer_ratios(group_loss(new, old, [0.0] * len(LENGTHS)))
    assert [a.rloo for a in ours] == pytest.approx(one_ratio(rloo, len(LENGTHS)), rel=1e-12)
    assert [a.gspo for a in ours] == pytest.approx(one_ratio(gspo, len(LENGTHS)), rel=1e-12)
    for answer, n in zip(ours, LENGTHS):  # not the same number: RLOO's is GSPO's to the power of the length
        assert answer.rloo == pytest.approx(answer.gspo ** n, rel=1e-12) and answer.rloo != pytest.approx(answer.gspo)
    # and the lesson's sequence-level ratio, which the page's toggle takes, is GSPO's
    sequence = group_loss(new, old, [0.0] * len(LENGTHS), level=SEQUENCE)
    assert [row[0].ratio for row in sequence.tokens] == pytest.approx([a.gspo for a in ours], rel=1e-14)


@pytest.mark.parametrize("max_length, cache", [(100, 20), (12, 4), (12, 0), (12, 12), (1, 1), (20, 7)])
def test_the_overlong_penalty_is_trls_get_soft_overlong_punishment(max_length, cache):
    lengths = list(range(0, max_length + 3))
    theirs = get_soft_overlong_punishment(max_length, cache)([[1] * n for n in lengths])
    assert overlong_penalty(lengths, max_length, cache) == pytest.approx(theirs, rel=1e-15, abs=0)


# --- what the words say of TRL ----------------------------------------------------------------------------------

def test_scale_rewards_has_the_three_values_the_lesson_names_and_divides_as_it_says():
    """GRPOTrainer refuses any scale_rewards but "batch", "group" and "none"; "group" and "none" take the group's
    std, "batch" the std of every reward; only "none" leaves the division out."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "Must be one of 'batch', 'group', or 'none'" in source
    assert 'if self.scale_rewards in ["group", "none"]:' in source and 'elif self.scale_rewards == "batch":' in source
    assert "std_rewards = nanstd(rewards).expand_as(rewards)" in source  # batch: one std over every reward
    assert "advantages = rewards - mean_grouped_rewards" in source  # whatever the scaling: the group's mean
    assert 'if self.scale_rewards != "none":' in source and "advantages / (std_rewards + 1e-4)" in source
    default = config_default(GRPOConfig, "multi_objective_aggregation")
    assert default == "sum_then_normalize"
    words = " ".join(grpo.__doc__.split())
    for value in ("\"group\"", "\"batch\"", "\"none\"", "sum_then_normalize", "Bessel's correction", "nanstd"):
        assert value in words
    assert 'scale_rewards=\\"batch\\" divides by the sample std of every reward of the batch' in PAGE_SOURCE


def test_nanstd_is_torch_std_with_bessels_correction():
    """To float32's precision: nanstd's correction count / (count − 1) divides two integer tensors, in float32."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert nanstd(rewards).item() == pytest.approx(rewards.std().item(), rel=1e-7)
    assert nanstd(rewards).item() != pytest.approx(rewards.std(correction=0).item(), rel=1e-3)


def test_the_ratio_leaves_1_where_trl_computes_pi_olds_log_probabilities():
    """GRPOTrainer computes old_per_token_logps (else the ratio is exactly 1: per_token_logps.detach()) when
    gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0, and GRPOConfig's
    steps_per_generation defaults to gradient_accumulation_steps. The question, the glossary and the page say so."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in source
    assert "if self.args.gradient_accumulation_steps % generate_every != 0 or (" in source
    assert "per_token_logps.detach() if old_per_token_logps is None" in inspect.getsource(GRPOTrainer._compute_loss)
    help_text = config_field(GRPOConfig, "steps_per_generation").metadata["help"]
    assert "If `None`, it defaults to `gradient_accumulation_steps`" in help_text
    condition = "gradient_accumulation_steps is not a multiple of steps_per_generation × num_iterations"
    assert condition in questions.SPLIT_GENERATION and "defaults to gradient_accumulation_steps" in \
        questions.SPLIT_GENERATION
    assert condition in TERMS["ratio"][1] and "defaults to gradient_accumulation_steps" in TERMS["ratio"][1]
    assert "one generation is split over several optimizer steps" in TERMS["ratio"][1]
    # and with vLLM's sampler, whose correction is on by default
    assert "self.use_vllm and self.vllm_importance_sampling_correction" in source
    assert config_default(GRPOConfig, "vllm_importance_sampling_correction") is True
    assert "vllm_importance_sampling_correction is True by default" in questions.SPLIT_GENERATION
    assert "whenever vLLM samples the answers" in TERMS["ratio"][1]
    assert "only when the same answers" not in TERMS["ratio"][1]


def test_rloo_puts_its_kl_penalty_into_the_reward_as_the_page_says():
    """RLOOTrainer subtracts β × the answer's summed KL estimate from its reward before the leave-one-out baseline;
    GRPOTrainer adds its KL term to the per-token loss instead."""
    source = inspect.getsource(RLOOTrainer)
    assert "rewards = rewards - self.beta * kl" in source
    assert source.index("rewards = rewards - self.beta * kl") < source.index("grouped_rewards = rewards.view(")
    assert "RLOO also puts its KL penalty into the" in PAGE_SOURCE  # "reward" is in the next string


def test_rloo_takes_no_std_by_default_as_the_page_says():
    default = config_default(RLOOConfig, "normalize_advantages")
    assert default is False
    assert "RLOOConfig's normalize_advantages, False by default" in PAGE_SOURCE


def test_trls_cispo_cap_is_scalerls_as_its_help_cites():
    """GRPOConfig's epsilon_high help: with loss_type "cispo" it is ScaleRL's ε_max (arXiv 2510.13786), a cap
    on the ratio alone; the lesson and the page name ScaleRL's form and the paper's two-sided clip."""
    help_text = config_field(GRPOConfig, "epsilon_high").metadata["help"]
    assert "loss_type='cispo'" in help_text and "ScaleRL paper](https://huggingface.co/papers/2510.13786)" in help_text
    assert "clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()" in inspect.getsource(
        GRPOTrainer._compute_loss)  # one-sided: no lower bound
    assert "ScaleRL" in grpo.TRL_OTHER_LOSS_TYPES[CISPO] and "both sides" in grpo.TRL_OTHER_LOSS_TYPES[CISPO]
    assert 'SCALERL = "ScaleRL (arXiv 2510.13786)"' in PAGE_SOURCE
    assert "MiniMax-M1's paper writes the weight clipped on both sides" in PAGE_SOURCE
    from lmviz.course.glossary import TERMS

    entry = TERMS["CISPO"][1]  # the glossary says the same as the page
    assert "ScaleRL's form, which TRL's help cites and computes" in entry
    assert "MiniMax-M1's paper writes the weight clipped on both sides" in entry


def test_the_loss_types_the_lesson_computes_are_those_grpotrainer_averages_the_clipped_term_for():
    source = inspect.getsource(GRPOTrainer._compute_loss)
    assert 'elif self.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]:' in source
    assert set(LOSS_TYPES) == {"grpo", "bnpo", "dr_grpo", "dapo", LUSPO}

