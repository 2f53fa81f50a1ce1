"""What TRL's GRPOTrainer does, by name and by default: the one place lmviz states TRL's choices.

Torch-free, so that the glossary and the questions (lmviz.course) can say them too. Read from TRL 1.16.0's
trl/trainer/grpo_config.py and grpo_trainer.py. tests/lessons/test_grpo.py fails when a page, the glossary or a
docs page names a TRL default these fields do not hold.
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
    epsilon: float = 0.2  # epsilon_high defaults to epsilon: a symmetric clip
    scale_rewards: str = "group"  # ÷ the group's sample std (nanstd: Bessel's correction), + std_eps
    std_eps: float = 1e-4  # added to the std before dividing: (r − mean) / (std + 1e-4)
    num_iterations: int = 1  # μ, updates per generated batch: with 1, every ratio the loss sees is exactly 1
    importance_sampling_level: str = TOKEN
    use_bias_correction_kl: bool = True  # k3 multiplied by the ratio (DeepSeek-V3.2)
    learning_rate: float = 1e-6  # GRPOConfig's, in place of TrainingArguments' 5e-5; AdamW
    mask_truncated_completions: bool = False


TRL = TrlGrpo()
