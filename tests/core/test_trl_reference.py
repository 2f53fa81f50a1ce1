"""TRL read by the tests: the defaults lmviz quotes (lmviz.core.trl) are TRL's own, and the losses lmviz computes
agree with TRL's own code to float precision.

TRL 1.16.0 is a test requirement only (requirements-dev.txt): the app never imports it
(tests/test_architecture.py). A default that moves in a later TRL fails here, not in front of a class.
"""

import dataclasses
import inspect
import os
import re

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # trl.experimental warns on import, once per process

import trl  # noqa: E402
from trl import DPOConfig, GRPOConfig, KTOConfig, SFTConfig  # noqa: E402
from trl.experimental.cpo import CPOConfig  # noqa: E402
from trl.experimental.gkd import GKDTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig  # noqa: E402
from trl.trainer import grpo_trainer  # noqa: E402

from lmviz.core import trl as house  # noqa: E402
from lmviz.lessons import distillation  # noqa: E402
from tests.helpers import config_default  # noqa: E402


def test_the_trl_lmviz_quotes_is_the_one_installed():
    assert house.TRL.version == house.PREFERENCE.version == trl.__version__


# the TrlGrpo fields that are not GRPOConfig fields: what lmviz reads from GRPOTrainer's code or docs instead
NOT_CONFIG_FIELDS = {"version", "loss_types", "std_eps"}


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(house.TrlGrpo)
                                   if f.name not in NOT_CONFIG_FIELDS])
def test_each_grpo_default_lmviz_quotes_is_grpoconfigs(field):
    assert getattr(house.TRL, field) == config_default(GRPOConfig, field)


def test_the_grpo_loss_types_are_those_grpoconfig_documents():
    help_text = GRPOConfig.__doc__.split("loss_type (`str`", 1)[1].split("mask_truncated_completions", 1)[0]
    documented = re.findall(r"- `\"(\w+)\"`", help_text)
    assert tuple(documented) == house.TRL.loss_types


def test_the_std_eps_is_the_one_grpotrainer_adds():
    """GRPOTrainer divides by (std + 1e-4) written in its code, not a config field: read it from the source."""
    added = set(re.findall(r"/ \(std_\w+ \+ ([0-9.e-]+)\)", inspect.getsource(grpo_trainer)))
    assert added and {float(x) for x in added} == {house.TRL.std_eps}


def test_the_clip_higher_values_lmviz_quotes_are_those_grpoconfig_recommends():
    help_text = GRPOConfig.__doc__.split("epsilon_high (`float`", 1)[1].split("sapo_temperature_neg", 1)[0]
    recommended = [float(x) for x in re.findall(r"recommend\w* (?:value is )?`([0-9.]+)`", help_text)]
    assert recommended == [house.DAPO_EPSILON_HIGH, house.CISPO_EPSILON_MAX]


PREFERENCE_FIELDS = {"dpo_beta": (DPOConfig, "beta"), "cpo_beta": (CPOConfig, "beta"),
                     "simpo_gamma": (CPOConfig, "simpo_gamma"), "cpo_alpha": (CPOConfig, "cpo_alpha"),
                     "orpo_beta": (ORPOConfig, "beta"), "kto_beta": (KTOConfig, "beta"),
                     "kto_desirable_weight": (KTOConfig, "desirable_weight"),
                     "kto_undesirable_weight": (KTOConfig, "undesirable_weight")}


def test_every_preference_default_is_read_here():
    assert set(PREFERENCE_FIELDS) == {f.name for f in dataclasses.fields(house.TrlPreference)} - {"version"}


@pytest.mark.parametrize("field", sorted(PREFERENCE_FIELDS))
def test_each_preference_default_lmviz_quotes_is_trls(field):
    config, name = PREFERENCE_FIELDS[field]
    assert getattr(house.PREFERENCE, field) == config_default(config, name)


def test_sft_does_not_pack_by_default_as_the_glossary_says():
    from lmviz.course.glossary import TERMS
    assert config_default(SFTConfig, "packing") is False
    assert "SFTConfig's packing is False by default" in TERMS["packing"][1]


# --- the distillation loss against TRL's code ---------------------------------------------------------------

def logits_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A student's and a teacher's logits: 6 answer positions over a 40-token vocabulary, float64."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(6, 40, generator=generator, dtype=torch.float64) * 2,
            torch.randn(6, 40, generator=generator, dtype=torch.float64) * 2)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_the_distillation_loss_is_gkds_generalized_jsd_loss(beta, temperature):
    """GKDTrainer.generalized_jsd_loss (a static method) with every position a label: the mean over positions."""
    student, teacher = logits_pair(0)
    theirs = GKDTrainer.generalized_jsd_loss(student[None], teacher[None], labels=torch.zeros(1, 6, dtype=torch.long),
                                             beta=beta, temperature=temperature)
    ours = distillation.distillation_loss(student, teacher, beta=beta, temperature=temperature)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_the_distillation_loss_is_distillation_trainers_chunked_loss(beta, temperature):
    """DistillationTrainer's loss (_chunked_divergence_loss) projects hidden states through each model's lm_head:
    with the identity for a head, the hidden states are the logits. Its kernel works in float32 whatever the
    inputs' type (trl/kernels/chunked_divergence.py), so it agrees to float32's precision, not float64's. At τ = 2
    it is lmviz's loss without the τ² factor, as the page and the glossary say of TRL's trainers."""
    from trl.trainer.distillation_trainer import _chunked_divergence_loss
    student, teacher = logits_pair(1)
    head = torch.eye(40, dtype=torch.float64)
    loss, _, positions = _chunked_divergence_loss(student[None], teacher[None], head, head,
                                                  torch.ones(1, 6, dtype=torch.long), beta, temperature=temperature)
    assert positions.item() == 6
    ours = distillation.distillation_loss(student, teacher, beta=beta, temperature=temperature)
    assert ours.item() == pytest.approx(loss.item(), rel=1e-6)
    if temperature != 1.0:
        scaled = distillation.distillation_loss(student, teacher, beta=beta, temperature=temperature,
                                                t_squared=True)
        assert scaled.item() != pytest.approx(loss.item(), rel=1e-3)
