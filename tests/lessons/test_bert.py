"""lmviz.lessons.bert: masked LM, next sentence and BERT's total loss, each against the model's own."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.labels import Branch
from lmviz.errors import NothingToScore
from lmviz.lessons.bert import (
    NothingSelected,
    NotMaskable,
    analyse_bert_loss,
    analyse_mlm,
    analyse_mlm_at,
    analyse_nsp,
    maskable_positions,
)
from tests.helpers import one_sentence

TEXT = "anna and ben went to the park . anna saw a red fox near the pond ."


def test_mlm_loss_equals_the_models_own_and_rows_show_the_work(tiny_bert_loaded):
    result = analyse_mlm(tiny_bert_loaded, TEXT, seed=3, mask_prob=0.3)
    assert result.loss == pytest.approx(result.loss_model, abs=1e-5)
    selected = [r for r in result.rows if r.branch != Branch.NOT_SELECTED]
    assert len(selected) == result.num_selected > 0
    assert result.loss == pytest.approx(sum(r.nll for r in selected) / len(selected), abs=1e-6)
    for row in result.rows:
        if row.branch == Branch.NOT_SELECTED:
            assert row.label == -100 and row.prob is None and row.shown == row.token
        else:
            assert row.label == row.token_id and row.nll == pytest.approx(-math.log(row.prob), abs=1e-5)
            assert (row.shown == "[MASK]") == (row.branch == Branch.MASKED)
    assert result.rows[0].token == "[CLS]" and result.rows[0].branch == Branch.NOT_SELECTED
    assert result.num_eligible == len(TEXT.split())


def test_mlm_same_seed_same_mask_and_reroll_changes_it(tiny_bert_loaded):
    a = analyse_mlm(tiny_bert_loaded, TEXT, seed=5, mask_prob=0.3)
    b = analyse_mlm(tiny_bert_loaded, TEXT, seed=5, mask_prob=0.3)
    c = analyse_mlm(tiny_bert_loaded, TEXT, seed=6, mask_prob=0.3)
    assert [r.branch for r in a.rows] == [r.branch for r in b.rows] and a.loss == b.loss
    assert [r.branch for r in a.rows] != [r.branch for r in c.rows]


def test_mlm_with_nothing_selected_says_so_and_can_mask_one(tiny_bert_loaded):
    with pytest.raises(NothingSelected, match="No position was selected"):
        analyse_mlm(tiny_bert_loaded, "anna", seed=0, mask_prob=0.0)
    one = analyse_mlm(tiny_bert_loaded, "anna", seed=0, mask_prob=0.0, min_selected=1)
    assert one.num_selected == 1 and math.isfinite(one.loss)
    with pytest.raises(NothingToScore, match="nothing to mask"):
        analyse_mlm(tiny_bert_loaded, "   ")
    with pytest.raises(NothingToScore, match="besides BERT's special tokens"):
        analyse_mlm(tiny_bert_loaded, "[CLS] [SEP]")


def test_mlm_reports_unknown_words(tiny_bert_loaded):
    result = analyse_mlm(tiny_bert_loaded, "anna saw a 🦄 unicorn", min_selected=1)
    assert "🦄" in result.unknown_tokens
    assert any(r.token == "[UNK]" for r in result.rows)


def test_nsp_two_logits_one_logit_model_and_torch_agree(tiny_bert_loaded):
    for follows in (True, False):
        result = analyse_nsp(tiny_bert_loaded, "anna and ben went to the park .", "anna felt happy .", follows)
        assert result.label == (0 if follows else 1)
        for value in (result.loss_one_logit, result.loss_model, result.loss_torch):
            assert value == pytest.approx(result.loss_two_logits, abs=1e-5)
        assert result.loss_two_logits == pytest.approx(-math.log(result.probs[result.label]), abs=1e-5)
        assert result.probs == pytest.approx(torch.softmax(torch.tensor(result.logits), -1).tolist(), abs=1e-6)
    tokens, segments = result.tokens, result.segment_ids
    first_sep = tokens.index("[SEP]")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert segments == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)


def test_nsp_needs_two_sentences(tiny_bert_loaded):
    with pytest.raises(NothingToScore, match="needs two sentences"):
        analyse_nsp(tiny_bert_loaded, "anna went to the park .", " ")


def test_bert_total_equals_bert_for_pretraining_loss(tiny_bert_loaded):
    a, b = "anna and ben went to the park .", "anna felt happy ."
    result = analyse_bert_loss(tiny_bert_loaded, a, b, b_follows_a=False, seed=1)
    assert result.total == pytest.approx(result.total_model, abs=1e-5)
    assert result.total == pytest.approx(result.mlm_loss + result.nsp_loss, abs=1e-6)
    assert result.nsp_loss == pytest.approx(-math.log(1 - result.p_is_next), abs=1e-5)  # label 1: not next
    weighted = analyse_bert_loss(tiny_bert_loaded, a, b, b_follows_a=False, seed=1, mlm_weight=0.5, nsp_weight=2.0)
    assert weighted.total == pytest.approx(0.5 * result.mlm_loss + 2.0 * result.nsp_loss, abs=1e-5)
    assert weighted.total_model == pytest.approx(result.total_model)


# Click a word to mask it: [MASK] exactly at the chosen positions, the loss over those alone.

def reference_mlm(model, tokenizer, text: str, positions: list[int]):
    """Hugging Face's BertForMaskedLM with the same weights, loaded from the state dict (not lmviz's
    _heads), on the text with [MASK] at ``positions`` and labels -100 everywhere else: (loss, logits, ids)."""
    from transformers import BertForMaskedLM

    reference = BertForMaskedLM(model.config).eval()
    missing, _ = reference.load_state_dict(model.state_dict(), strict=False)  # the NSP head and pooler are left out
    assert not missing
    enc = tokenizer(text, return_tensors="pt")
    ids = enc["input_ids"]
    masked, labels = ids.clone(), torch.full_like(ids, -100)
    masked[0, positions], labels[0, positions] = tokenizer.mask_token_id, ids[0, positions]
    with torch.no_grad():
        out = reference(input_ids=masked, attention_mask=enc["attention_mask"], token_type_ids=enc["token_type_ids"],
                        labels=labels)
    return out.loss.item(), out.logits, ids


def test_mlm_at_chosen_positions_equals_bert_for_masked_lm_and_cross_entropy(tiny_bert_loaded):
    positions = [2, 5, 9]
    result = analyse_mlm_at(tiny_bert_loaded, TEXT, positions)
    loss, logits, ids = reference_mlm(tiny_bert_loaded.model, tiny_bert_loaded.tokenizer, TEXT, positions)
    assert result.loss == pytest.approx(loss, abs=1e-5) and result.loss_model == pytest.approx(loss, abs=1e-5)
    by_torch = F.cross_entropy(logits[0, positions], ids[0, positions]).item()
    assert result.loss == pytest.approx(by_torch, abs=1e-5)
    assert result.num_selected == 3
    for row in result.rows:
        chosen = row.position in positions
        assert row.branch == (Branch.MASKED if chosen else Branch.NOT_SELECTED)
        assert row.shown == ("[MASK]" if chosen else row.token)
        assert row.label == (row.token_id if chosen else -100) and (row.nll is not None) == chosen


def test_mlm_at_refuses_special_tokens_and_positions_past_the_end(tiny_bert_loaded):
    tokenizer = tiny_bert_loaded.tokenizer
    ids = tokenizer(TEXT)["input_ids"]
    assert list(maskable_positions(tokenizer, TEXT)) == list(range(1, len(ids) - 1))  # not [CLS], not [SEP]
    for position in (0, len(ids) - 1, len(ids) + 3):
        with pytest.raises(NotMaskable) as problem:
            analyse_mlm_at(tiny_bert_loaded, TEXT, [1, position])
        assert one_sentence(str(problem.value)) and f"Position {position} cannot be masked" in str(problem.value)
    with pytest.raises(NothingToScore, match="No position is chosen"):
        analyse_mlm_at(tiny_bert_loaded, TEXT, [])
    with pytest.raises(NothingToScore, match="besides BERT's special tokens"):
        analyse_mlm_at(tiny_bert_loaded, "[CLS] [SEP]", [1])
