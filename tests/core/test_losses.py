"""lmviz.core.losses against torch's cross-entropy and Hugging Face models' own loss."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.labels import IGNORE_INDEX, IS_NEXT_FLIPPED, IS_NEXT_HF
from lmviz.core.losses import bert_loss, clm_loss, flip_nsp_labels, mlm_loss, nsp_loss
from lmviz.core.masking import create_mlm_mask
from tests.helpers import TINY_VOCAB


def random_batch(batch=3, seq_len=7, vocab=TINY_VOCAB, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, seq_len, vocab, generator=gen) * 3
    input_ids = torch.randint(vocab, (batch, seq_len), generator=gen)
    return logits, input_ids


def test_clm_loss_equals_cross_entropy_on_shifted_labels():
    logits, input_ids = random_batch()
    loss, info = clm_loss(logits, input_ids)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, TINY_VOCAB), input_ids[:, 1:].reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert info["perplexity"] == pytest.approx(math.exp(expected.item()), rel=1e-6)
    # every position but the last predicts the next input token
    assert torch.equal(info["target_ids"][:, :-1], input_ids[:, 1:])
    assert (info["target_ids"][:, -1] == IGNORE_INDEX).all()
    assert info["num_tokens"] == 3 * 6
    # per-position detail: nll = -log p and the mean of the counted nll is the loss
    counted = info["counted"]
    assert torch.allclose(info["nll"][counted], -info["target_probs"][counted].log(), atol=1e-6)
    assert info["nll"][counted].mean().item() == pytest.approx(loss.item(), abs=1e-6)
    assert (info["nll"][~counted] == 0).all()


def test_clm_loss_ignores_padding_given_by_attention_mask():
    logits, input_ids = random_batch()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 4:] = 0  # right padding in row 0
    loss, info = clm_loss(logits, input_ids, attention_mask=attention_mask)
    labels = input_ids.masked_fill(attention_mask == 0, -100)[:, 1:]
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, TINY_VOCAB), labels.reshape(-1), ignore_index=-100)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert not info["counted"][0, 3:].any()  # position 3 would predict the first pad
    assert info["num_tokens"] == 3 * 6 - 3


def test_clm_loss_matches_gpt2_own_loss_with_padding(tiny_gpt2):
    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(TINY_VOCAB, (2, 9), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    hf_labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.no_grad():
        out = tiny_gpt2(input_ids=input_ids, attention_mask=attention_mask, labels=hf_labels)
    loss, _ = clm_loss(out.logits, input_ids, attention_mask=attention_mask)
    assert loss.item() == pytest.approx(out.loss.item(), abs=1e-5)
    loss_from_labels, _ = clm_loss(out.logits, input_ids, labels=hf_labels)
    assert loss_from_labels.item() == pytest.approx(out.loss.item(), abs=1e-5)


def test_clm_loss_upcasts_half_precision_and_is_differentiable():
    logits, input_ids = random_batch()
    half = logits.bfloat16()
    loss, info = clm_loss(half, input_ids)
    assert loss.dtype == torch.float32
    reference = F.cross_entropy(half[:, :-1].float().reshape(-1, TINY_VOCAB), input_ids[:, 1:].reshape(-1))
    assert loss.item() == pytest.approx(reference.item(), abs=1e-6)
    leaf = logits.clone().requires_grad_()
    clm_loss(leaf, input_ids)[0].backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()


def test_left_padding_never_predicts_from_a_pad(tiny_gpt2):
    gen = torch.Generator().manual_seed(4)
    input_ids = torch.randint(TINY_VOCAB, (2, 8), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0  # left padding in row 1
    with torch.no_grad():
        logits = tiny_gpt2(input_ids=input_ids, attention_mask=attention_mask).logits
    loss, info = clm_loss(logits, input_ids, attention_mask=attention_mask)
    # by hand: targets are the next real tokens, predicted from real positions only
    labels = torch.full_like(input_ids, -100)
    labels[0, :-1] = input_ids[0, 1:]
    labels[1, 3:-1] = input_ids[1, 4:]
    expected = F.cross_entropy(logits.reshape(-1, TINY_VOCAB), labels.reshape(-1), ignore_index=-100)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert not info["counted"][1, :3].any() and info["num_tokens"] == 7 + 4
    # Hugging Face's own loss also scores position 2 (a pad) predicting the first real token
    hf = tiny_gpt2(input_ids=input_ids, attention_mask=attention_mask,
                   labels=input_ids.masked_fill(attention_mask == 0, -100)).loss
    labels[1, 2] = input_ids[1, 3]
    with_pad = F.cross_entropy(logits.reshape(-1, TINY_VOCAB), labels.reshape(-1), ignore_index=-100)
    assert hf.item() == pytest.approx(with_pad.item(), abs=1e-5) and abs(hf.item() - loss.item()) > 1e-4


def test_clm_loss_is_finite_for_extreme_logits():
    logits, input_ids = random_batch()
    logits[0, 0, :] = -1e4
    logits[0, 0, input_ids[0, 1]] = 1e4  # a certain prediction
    logits[1, 2, input_ids[1, 3]] = -1e4  # an almost impossible target
    loss, info = clm_loss(logits, input_ids)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, TINY_VOCAB), input_ids[:, 1:].reshape(-1))
    assert math.isfinite(loss.item())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert info["nll"][1, 2].item() > 1e3  # softmax().log() would give inf here


def test_clm_loss_without_shift_takes_labels_as_aligned():
    logits, input_ids = random_batch()
    loss, _ = clm_loss(logits, input_ids, shift_labels=False)
    expected = F.cross_entropy(logits.reshape(-1, TINY_VOCAB), input_ids.reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_clm_loss_with_one_token_says_there_is_nothing_to_predict():
    logits, input_ids = random_batch(batch=1, seq_len=1)
    with pytest.raises(ValueError, match="no next token"):
        clm_loss(logits, input_ids)


@pytest.mark.parametrize(
    "logits_shape, ids_shape",
    [((2, 5, TINY_VOCAB), (2, 4)), ((2, 5), (2, 5)), ((1, 5, TINY_VOCAB), (2, 5))],
)
def test_shape_mismatch_names_the_shapes(logits_shape, ids_shape):
    logits = torch.zeros(logits_shape)
    input_ids = torch.zeros(ids_shape, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\(2, 5"):
        clm_loss(logits, input_ids)
    masked = torch.ones(ids_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match="got shape|does not match"):
        mlm_loss(logits, input_ids, masked)


def test_mlm_loss_counts_only_masked_positions():
    logits, input_ids = random_batch()
    masked = torch.zeros_like(input_ids, dtype=torch.bool)
    masked[0, 1] = masked[2, 5] = masked[2, 6] = True
    loss, info = mlm_loss(logits, input_ids, masked)
    expected = F.cross_entropy(logits[masked], input_ids[masked])
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert info["num_masked"] == 3
    assert info["masking_rate"] == pytest.approx(3 / 21)
    assert torch.equal(info["counted"], masked)
    # Hugging Face style: labels with -100 and no explicit mask give the same loss
    hf_labels = input_ids.masked_fill(~masked, -100)
    assert mlm_loss(logits, input_ids, None, labels=hf_labels)[0].item() == pytest.approx(loss.item(), abs=1e-7)


def test_mlm_loss_equals_bert_masked_lm_own_loss():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=32)).eval()
    gen = torch.Generator().manual_seed(6)
    input_ids = torch.randint(5, TINY_VOCAB, (3, 10), generator=gen)
    mask = create_mlm_mask(input_ids, mask_token_id=4, vocab_size=TINY_VOCAB, mask_prob=0.3,
                           special_token_ids=[0, 1, 2, 3, 4], seed=1)
    with torch.no_grad():
        out = model(input_ids=mask.masked_input_ids, labels=mask.labels)
    loss, _ = mlm_loss(out.logits, input_ids, mask.masked_positions)
    assert loss.item() == pytest.approx(out.loss.item(), abs=1e-5)


@pytest.mark.parametrize("make_call, message", [
    (lambda logits, i: mlm_loss(logits, i, None), "Say which positions"),
    (lambda logits, i: mlm_loss(logits, i, torch.ones_like(i, dtype=torch.bool), labels=i[:1]), r"labels \(1, 7\)"),
    (lambda logits, i: clm_loss(logits, i, labels=i - 100), "between 0 and"),
    (lambda logits, i: clm_loss(logits, i, labels=i.float()), "integer token ids"),
    (lambda logits, i: bert_loss(logits, torch.zeros(5, 2), i, torch.ones_like(i, dtype=torch.bool),
                                 torch.zeros(5).long()),
     "3 sequences but the NSP batch has 5"),
    (lambda logits, i: nsp_loss(torch.zeros(3, 2), torch.tensor([0.0, 1.0, 1.0])), "integers 0 or 1"),
])
def test_bad_arguments_raise_a_value_error_that_says_what(make_call, message):
    logits, input_ids = random_batch()
    with pytest.raises(ValueError, match=message):
        make_call(logits, input_ids)


def test_mlm_loss_with_nothing_masked_raises_instead_of_nan():
    logits, input_ids = random_batch()
    with pytest.raises(ValueError, match="No position is masked"):
        mlm_loss(logits, input_ids, torch.zeros_like(input_ids, dtype=torch.bool))


def test_nsp_loss_two_logits_and_one_logit_agree_with_torch():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(6, 2, generator=gen) * 2
    labels = torch.tensor([0, 1, 1, 0, 0, 1])
    loss, info = nsp_loss(logits, labels)
    assert loss.item() == pytest.approx(F.cross_entropy(logits, labels).item(), abs=1e-6)
    # a single logit for label 1, equal to the difference of the two, gives the same loss
    single = (logits[:, 1] - logits[:, 0]).unsqueeze(-1)
    loss_single, info_single = nsp_loss(single, labels)
    bce = F.binary_cross_entropy_with_logits(single.squeeze(-1), labels.float())
    assert loss_single.item() == pytest.approx(bce.item(), abs=1e-6)
    assert loss_single.item() == pytest.approx(loss.item(), abs=1e-6)
    assert torch.allclose(info["probs"], info_single["probs"], atol=1e-6)
    assert torch.allclose(info["probs"].sum(-1), torch.ones(6))


def test_nsp_label_conventions():
    labels_flipped = torch.tensor([1, 1, 0])  # the flipped convention: 1 = B follows A
    labels_hf = flip_nsp_labels(labels_flipped)
    assert labels_hf.tolist() == [0, 0, 1]
    assert flip_nsp_labels(labels_hf).tolist() == labels_flipped.tolist()
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.0], [-3.0, 1.0]])  # Hugging Face head: column 0 = is next
    _, info = nsp_loss(logits, labels_hf, is_next_label=IS_NEXT_HF)
    assert info["num_positive"] == 2 and info["num_negative"] == 1
    assert torch.allclose(info["p_is_next"], torch.softmax(logits, -1)[:, 0])
    _, info_flipped = nsp_loss(logits.flip(-1), labels_flipped, is_next_label=IS_NEXT_FLIPPED)
    assert info_flipped["num_positive"] == 2
    assert torch.allclose(info_flipped["p_is_next"], info["p_is_next"])


def test_nsp_loss_rejects_bad_labels_and_shapes():
    with pytest.raises(ValueError, match="0 or 1"):
        nsp_loss(torch.zeros(2, 2), torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        nsp_loss(torch.zeros(2, 3), torch.tensor([0, 1]))


def test_bert_loss_equals_bert_for_pretraining_loss(tiny_bert):
    gen = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, TINY_VOCAB, (4, 12), generator=gen)
    input_ids[:, 0] = 2  # a [CLS]-like special token
    mask = create_mlm_mask(input_ids, mask_token_id=4, vocab_size=TINY_VOCAB, mask_prob=0.3,
                           special_token_ids=[0, 1, 2, 3, 4], seed=5)
    nsp_labels = torch.tensor([0, 1, 0, 1])
    token_type_ids = (torch.arange(12) >= 6).long().expand(4, 12)
    with torch.no_grad():
        out = tiny_bert(input_ids=mask.masked_input_ids, token_type_ids=token_type_ids,
                        labels=mask.labels, next_sentence_label=nsp_labels)
    total, info = bert_loss(out.prediction_logits, out.seq_relationship_logits, input_ids,
                            mask.masked_positions, nsp_labels)
    assert total.item() == pytest.approx(out.loss.item(), abs=1e-5)
    mlm_reference = F.cross_entropy(out.prediction_logits.reshape(-1, TINY_VOCAB), mask.labels.reshape(-1))
    assert info["mlm_info"]["loss"] == pytest.approx(mlm_reference.item(), abs=1e-5)
    assert info["nsp_info"]["loss"] == pytest.approx(
        F.cross_entropy(out.seq_relationship_logits, nsp_labels).item(), abs=1e-6)
    weighted, _ = bert_loss(out.prediction_logits, out.seq_relationship_logits, input_ids,
                            mask.masked_positions, nsp_labels, mlm_weight=0.5, nsp_weight=2.0)
    expected = 0.5 * info["mlm_info"]["loss"] + 2.0 * info["nsp_info"]["loss"]
    assert weighted.item() == pytest.approx(expected, abs=1e-5)
