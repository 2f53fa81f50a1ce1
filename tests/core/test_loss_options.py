"""The cross-entropy's options against PyTorch's own implementations, the published formulas, and the toy's numbers
worked by hand."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import Gemma2Config, Gemma2ForCausalLM

from lmviz.core import toy
from lmviz.core.loss_options import (
    PALM_Z_LOSS,
    BadOption,
    LossOptions,
    check_options,
    entropy,
    smoothed_cross_entropy,
    soft_cap,
    with_options,
    z_loss,
)


def random_case(seed=0, n=7, v=13):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=generator, dtype=torch.float64) * 3
    labels = torch.randint(0, v, (n,), generator=generator)
    labels[2] = -100
    return logits, labels


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.1, 0.5, 1.0])
def test_label_smoothing_is_pytorchs(epsilon):
    logits, labels = random_case()
    loss, _ = smoothed_cross_entropy(logits, labels, epsilon)
    expected = F.cross_entropy(logits, labels, label_smoothing=epsilon, ignore_index=-100)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)


def test_the_toys_smoothed_loss_is_the_references():
    result = with_options(toy.logits(), toy.label_ids(), LossOptions(label_smoothing=0.1))
    assert round(result.plain, 6) == 0.863023
    assert round(result.cross_entropy, 6) == 1.074286
    # by hand: 0.9 × the plain loss + 0.1 × the mean over the five rows of (1/10)·Σ_c −ln p_c
    uniform = sum(-sum(math.log(p) for p in row) / 10 for row in toy.PROBABILITIES) / 5
    assert result.cross_entropy == pytest.approx(0.9 * 0.8630225 + 0.1 * uniform, abs=1e-6)


def test_the_toys_entropies_are_the_references():
    result = with_options(toy.logits(), toy.label_ids(), LossOptions())
    assert [round(r.entropy, 5) for r in result.rows] == [1.73083, 1.66059, 1.81543, 1.66318, 1.34234]
    by_hand = [-sum(p * math.log(p) for p in row) for row in toy.PROBABILITIES]
    assert [r.entropy for r in result.rows] == pytest.approx(by_hand, abs=1e-12)


def test_entropy_is_torch_distributions():
    logits, _ = random_case(1)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(entropy(logits), expected, atol=1e-12)
    # a class with p = 0 adds 0, not 0·∞
    with_zero = torch.tensor([[0.0, -math.inf, math.log(3.0)]], dtype=torch.float64)
    assert entropy(with_zero).item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_the_z_loss_is_palms_and_sees_a_shift_the_cross_entropy_does_not():
    logits, labels = random_case(2)
    terms, log_z = z_loss(logits, PALM_Z_LOSS)
    by_hand = [math.log(sum(math.exp(z) for z in row)) for row in logits.tolist()]
    assert log_z.tolist() == pytest.approx(by_hand, abs=1e-12)
    assert terms.tolist() == pytest.approx([1e-4 * v * v for v in by_hand], abs=1e-15)
    before = with_options(logits, labels, LossOptions(z_loss=PALM_Z_LOSS))
    after = with_options(logits, labels, LossOptions(z_loss=PALM_Z_LOSS, shift=5.0))
    assert after.cross_entropy == pytest.approx(before.cross_entropy, abs=1e-12)
    assert after.z_loss != pytest.approx(before.z_loss)
    assert [r.log_z for r in after.rows] == pytest.approx([r.log_z + 5 for r in before.rows], abs=1e-12)


def test_the_toys_z_loss_is_zero_until_its_logits_move():
    """The toy's logits are log p with each row summing to 1, so log Z = 0: the z-loss is 0, and a shift s makes it
    1e-4·s² at every position."""
    unshifted = with_options(toy.logits(), toy.label_ids(), LossOptions(z_loss=PALM_Z_LOSS))
    assert unshifted.z_loss == pytest.approx(0.0, abs=1e-15)
    shifted = with_options(toy.logits(), toy.label_ids(), LossOptions(z_loss=PALM_Z_LOSS, shift=10.0))
    assert shifted.z_loss == pytest.approx(1e-4 * 100, abs=1e-12)
    assert shifted.total == pytest.approx(0.863023 + 0.01, abs=1e-6)


def test_the_soft_cap_is_gemma_2s():
    """transformers' Gemma 2 applies final_logit_softcapping to its output: a tiny one built from a config gives the
    same logits with the cap as lmviz's soft_cap of its logits without it."""
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=None)
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(200)  # logits of tens, which the cap visibly bends
        ids = torch.tensor([[1, 5, 9, 12]])
        raw = model(ids).logits
        model.config.final_logit_softcapping = 3.0
        capped = model(ids).logits
    assert raw.abs().max() > 6
    assert torch.allclose(capped, soft_cap(raw, 3.0), atol=1e-5)
    assert capped.abs().max() <= 3.0


def test_soft_capped_loss_is_the_cross_entropy_of_the_capped_logits():
    logits, labels = random_case(3)
    result = with_options(logits, labels, LossOptions(soft_cap=2.0))
    expected = F.cross_entropy(2.0 * torch.tanh(logits / 2.0), labels, ignore_index=-100)
    assert result.cross_entropy == pytest.approx(expected.item(), abs=1e-12)
    assert max(abs(r.largest_logit) for r in result.rows) <= 2.0
    assert soft_cap(logits, None) is logits


def test_all_options_together_are_the_sum_of_their_references():
    logits, labels = random_case(4)
    options = LossOptions(label_smoothing=0.1, z_loss=1e-3, soft_cap=4.0, shift=-2.0)
    result = with_options(logits, labels, options)
    moved = 4.0 * torch.tanh((logits - 2.0) / 4.0)
    counted = labels != -100
    expected = (F.cross_entropy(moved, labels, label_smoothing=0.1, ignore_index=-100)
                + 1e-3 * (torch.logsumexp(moved, -1)[counted] ** 2).mean())
    assert result.total == pytest.approx(expected.item(), abs=1e-12)
    assert result.plain == pytest.approx(F.cross_entropy(logits, labels, ignore_index=-100).item(), abs=1e-12)
    assert len(result.rows) == int(counted.sum()) and result.classes == 13


def test_float32_logits_agree_with_pytorch_in_float32():
    logits, labels = random_case(5)
    result = with_options(logits.float(), labels, LossOptions(label_smoothing=0.2))
    expected = F.cross_entropy(logits.float(), labels, label_smoothing=0.2, ignore_index=-100)
    assert result.cross_entropy == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("options, words", [
    (LossOptions(label_smoothing=-0.1), "between 0 and 1"), (LossOptions(label_smoothing=1.5), "between 0 and 1"),
    (LossOptions(z_loss=-1.0), "0 or more"), (LossOptions(z_loss=math.nan), "0 or more"),
    (LossOptions(soft_cap=0.0), "above 0"), (LossOptions(soft_cap=math.inf), "above 0"),
    (LossOptions(shift=math.inf), "finite"),
])
def test_settings_no_trainer_accepts_get_a_sentence(options, words):
    with pytest.raises(BadOption, match=words):
        check_options(options)


def test_every_label_ignored_gets_a_sentence():
    logits, _ = random_case()
    with pytest.raises(ValueError, match="No position counts"):
        with_options(logits, torch.full((7,), -100), LossOptions())
