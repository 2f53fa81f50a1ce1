"""lmviz.bert_analysis: masked LM, next sentence and BERT's total loss, each against the model's own."""

import math

import pytest
import torch

from lmviz.bert_analysis import NothingSelected, analyse_bert_loss, analyse_mlm, analyse_nsp
from lmviz.corpus import generate_corpus
from lmviz.masking import Branch
from lmviz.models import LoadedModel
from lmviz.text import NothingToScore
from lmviz.training import build_model, train_tokenizer

TEXT = "anna and ben went to the park . anna saw a red fox near the pond ."


@pytest.fixture(scope="module")
def tiny_bert_loaded():
    corpus = generate_corpus(num_train=200, num_validation=10, seed=2)
    tokenizer = train_tokenizer([s.text for s in corpus.train])
    torch.manual_seed(0)
    model = build_model("mlm+nsp", "tiny", tokenizer).eval()
    return LoadedModel(model, tokenizer, "random tiny BERT", "built in the tests", "cpu", "float32", 0.0)


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
