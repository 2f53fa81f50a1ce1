"""What TRL's trainers do, by name and by default: the one place lmviz states TRL's choices.

Torch-free, so that the glossary and the questions (lmviz.course) can say them too. Read from TRL 1.16.0's
trl/trainer/grpo_config.py and grpo_trainer.py, dpo_config.py, kto_config.py, and the CPO and ORPO configs under
trl/experimental. tests/lessons/test_grpo.py fails when a page, the glossary or a docs page names a TRL GRPO default
these fields do not hold.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN, SEQUENCE = "token", "sequence"  # TRL's importance_sampling_level
# TRL's loss_type values. The first five differ only in how they average PPO's clipped per-token term; the
# last three replace that term itself
GRPO, BNPO, DR_GRPO, DAPO, LUSPO = "grpo", "bnpo", "dr_grpo", "dapo", "luspo"
CISPO, SAPO, VESPO = "cispo", "sapo", "vespo"


@dataclass(frozen=True)
class TrlGrpo:
    """GRPOConfig's defaults, and the loss types GRPOTrainer accepts."""
    version: str = "1.16.0"
    loss_type: str = DAPO  # GRPOConfig.loss_type; its docs call "grpo" "not recommended due to length bias"
    loss_types: tuple[str, ...] = (GRPO, DR_GRPO, DAPO, BNPO, CISPO, SAPO, LUSPO, VESPO)  # as its docs list them
    beta: float = 0.0  # no KL term and no reference model at all
    epsilon: float = 0.2  # the clip's lower bound, 1 − ε; and its upper one, 1 + ε, while epsilon_high is None
    epsilon_high: float | None = None  # None: epsilon, a symmetric clip
    # R − the group's mean, then "group": ÷ (the group's std + std_eps), the std nanstd's, with Bessel's correction;
    # "batch": ÷ (the std of every reward of the batch + std_eps); "none": no division (GRPOTrainer's three values)
    scale_rewards: str = "group"
    std_eps: float = 1e-4  # added to the std before dividing: (r − mean) / (std + 1e-4)
    num_iterations: int = 1  # μ, updates per generated batch: with 1, every ratio the loss sees is exactly 1
    importance_sampling_level: str = TOKEN
    use_bias_correction_kl: bool = True  # k3 multiplied by the ratio (DeepSeek-V3.2)
    learning_rate: float = 1e-6  # GRPOConfig's, in place of TrainingArguments' 5e-5; AdamW
    mask_truncated_completions: bool = False


TRL = TrlGrpo()

# GRPOConfig's docs recommend these for epsilon_high: DAPO's clip-higher (Yu et al. 2025) with loss types that clip
# r to [1 − ε, 1 + ε_high]; with loss_type "cispo" epsilon_high is ScaleRL's ε_max, a cap on r itself, not on r − 1
DAPO_EPSILON_HIGH = 0.28
CISPO_EPSILON_MAX = 5.0


@dataclass(frozen=True)
class TrlPreference:
    """The defaults of TRL's preference trainers that the chat page's losses use."""
    version: str = "1.16.0"
    dpo_beta: float = 0.1  # DPOConfig.beta
    cpo_beta: float = 0.1  # CPOConfig.beta: SimPO's β with loss_type="simpo"
    simpo_gamma: float = 0.5  # CPOConfig.simpo_gamma: SimPO's margin γ
    cpo_alpha: float = 1.0  # CPOConfig.cpo_alpha: the weight of the chosen answer's NLL, added by default
    orpo_beta: float = 0.1  # ORPOConfig.beta: the paper's λ, the weight of the odds-ratio term
    kto_beta: float = 0.1  # KTOConfig.beta
    kto_desirable_weight: float = 1.0  # KTOConfig.desirable_weight
    kto_undesirable_weight: float = 1.0  # KTOConfig.undesirable_weight


PREFERENCE = TrlPreference()


@dataclass(frozen=True)
class TrlDistillation:
    """The distillation trainers' β and τ: DistillationConfig (trl/trainer/distillation_config.py) and the
    experimental GKDConfig (trl/experimental/gkd/gkd_config.py). Both trainers' β picks the divergence as TRL's
    generalized_jsd_loss does: 0 the forward KL, 1 the reverse KL, between them the generalized JSD."""
    version: str = "1.16.0"
    beta: float = 1.0  # DistillationConfig.beta: DistillationTrainer's loss is the reverse KL by default
    temperature: float = 1.0  # DistillationConfig.temperature: for sampling and for the loss alike
    gkd_beta: float = 0.5  # GKDConfig.beta (trl.experimental.gkd), as generalized_jsd_loss's own default


DISTILLATION = TrlDistillation()
