"""lmviz.core.masking: BERT's 15 % and 80/10/10, measured on a large seeded batch."""

import pytest
import torch

from lmviz.core.labels import IGNORE_INDEX, Branch
from lmviz.core.masking import create_mlm_mask, create_nsp_pairs, replacement_pool

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL = [PAD, CLS, SEP, MASK]
VOCAB = 1000


def large_batch():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (200, 512), generator=gen)
    ids[:, 0], ids[:, 255] = CLS, SEP
    attention_mask = torch.ones_like(ids)
    attention_mask[:100, 400:] = 0  # half the rows padded at the end
    ids[attention_mask == 0] = PAD
    return ids, attention_mask


def test_selection_and_branch_rates_match_bert():
    ids, attention_mask = large_batch()
    m = create_mlm_mask(ids, MASK, VOCAB, special_token_ids=SPECIAL, attention_mask=attention_mask, seed=1)
    eligible = attention_mask.bool() & ~torch.isin(ids, torch.tensor(SPECIAL))
    selected = m.masked_positions
    assert abs(selected.sum() / eligible.sum() - 0.15) < 0.01
    n = selected.sum()
    assert abs((m.branch == Branch.MASKED).sum() / n - 0.80) < 0.02
    assert abs((m.branch == Branch.RANDOM).sum() / n - 0.10) < 0.02
    assert abs((m.branch == Branch.KEPT).sum() / n - 0.10) < 0.02
    assert ((m.branch != Branch.NOT_SELECTED) == selected).all()


def test_special_and_padding_tokens_are_never_selected_or_drawn():
    ids, attention_mask = large_batch()
    m = create_mlm_mask(ids, MASK, VOCAB, mask_prob=0.9, special_token_ids=SPECIAL,
                        attention_mask=attention_mask, seed=2)
    assert not m.masked_positions[torch.isin(ids, torch.tensor(SPECIAL))].any()
    assert not m.masked_positions[attention_mask == 0].any()
    random_ids = m.masked_input_ids[m.branch == Branch.RANDOM]
    assert not torch.isin(random_ids, torch.tensor(SPECIAL)).any()


def test_special_and_padding_tokens_are_safe_only_when_the_caller_names_them():
    """What the docstring and the README say: with the defaults every position but [MASK] is eligible."""
    row = torch.tensor([[CLS, 7, 8, SEP, PAD, PAD]])
    defaults = create_mlm_mask(row, MASK, VOCAB, mask_prob=1.0, seed=0)
    assert defaults.masked_positions.all()
    named = create_mlm_mask(row, MASK, VOCAB, mask_prob=1.0, special_token_ids=[CLS, SEP],
                            attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]), seed=0)
    assert named.masked_positions.tolist() == [[False, True, True, False, False, False]]
    assert replacement_pool(VOCAB, MASK, SPECIAL).tolist() == list(range(4, VOCAB))


def test_mask_token_is_never_a_random_replacement_even_if_not_listed():
    ids, attention_mask = large_batch()
    m = create_mlm_mask(ids, MASK, VOCAB, mask_prob=0.5, random_replace_prob=1.0, keep_original_prob=0.0,
                        special_token_ids=[PAD, CLS, SEP], attention_mask=attention_mask, seed=9)
    assert (m.branch[m.masked_positions] == Branch.RANDOM).all()
    assert not (m.masked_input_ids[m.branch == Branch.RANDOM] == MASK).any()


def test_each_branch_does_what_it_says():
    ids, attention_mask = large_batch()
    m = create_mlm_mask(ids, MASK, VOCAB, special_token_ids=SPECIAL, attention_mask=attention_mask, seed=3)
    assert (m.masked_input_ids[m.branch == Branch.MASKED] == MASK).all()
    assert torch.equal(m.masked_input_ids[m.branch == Branch.KEPT], ids[m.branch == Branch.KEPT])
    assert torch.equal(m.masked_input_ids[m.branch == Branch.NOT_SELECTED], ids[m.branch == Branch.NOT_SELECTED])
    # random replacements are (almost always) a different token than the original
    assert (m.masked_input_ids[m.branch == Branch.RANDOM] != ids[m.branch == Branch.RANDOM]).float().mean() > 0.99
    assert torch.equal(m.labels, ids.masked_fill(~m.masked_positions, IGNORE_INDEX))


def test_random_and_keep_probabilities_are_honoured():
    ids, attention_mask = large_batch()
    m = create_mlm_mask(ids, MASK, VOCAB, random_replace_prob=0.5, keep_original_prob=0.3,
                        special_token_ids=SPECIAL, attention_mask=attention_mask, seed=4)
    n = m.masked_positions.sum()
    assert abs((m.branch == Branch.MASKED).sum() / n - 0.2) < 0.02
    assert abs((m.branch == Branch.RANDOM).sum() / n - 0.5) < 0.02
    assert abs((m.branch == Branch.KEPT).sum() / n - 0.3) < 0.02


def test_same_seed_same_mask_and_unpacks_like_the_seed():
    ids, _ = large_batch()
    a = create_mlm_mask(ids, MASK, VOCAB, special_token_ids=SPECIAL, seed=7)
    b = create_mlm_mask(ids, MASK, VOCAB, special_token_ids=SPECIAL, seed=7)
    c = create_mlm_mask(ids, MASK, VOCAB, special_token_ids=SPECIAL, seed=8)
    assert torch.equal(a.masked_input_ids, b.masked_input_ids) and torch.equal(a.branch, b.branch)
    assert not torch.equal(a.branch, c.branch)
    masked_input_ids, masked_positions = a
    assert torch.equal(masked_input_ids, a.masked_input_ids) and torch.equal(masked_positions, a.masked_positions)


@pytest.mark.parametrize("kwargs, message", [
    ({"mask_prob": 1.5}, "mask_prob"),
    ({"random_replace_prob": -0.1}, "random_replace_prob"),
    ({"random_replace_prob": 0.7, "keep_original_prob": 0.4}, "at most 1"),
])
def test_invalid_probabilities_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        create_mlm_mask(torch.ones(1, 5, dtype=torch.long), MASK, VOCAB, **kwargs)


def test_nsp_pairs_layout_segments_and_real_negatives():
    sentences = [[10, 11], [12], [13, 14, 15], [16], [17, 18], [19]]
    doc_ids = [0, 0, 1, 1, 2, 2]
    pairs = create_nsp_pairs(sentences, cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD,
                             doc_ids=doc_ids, seed=0)
    assert pairs.labels.tolist() == [0, 1, 0, 1, 0, 1]  # Hugging Face: 0 = B follows A
    # the true pair: [CLS] A [SEP] B [SEP], segment 0 up to the first [SEP], then 1
    assert pairs.input_ids[0].tolist()[:6] == [CLS, 10, 11, SEP, 12, SEP]
    assert pairs.segment_ids[0].tolist()[:6] == [0, 0, 0, 0, 1, 1]
    assert pairs.attention_mask[0].tolist() == [1] * 6 + [0] * (pairs.input_ids.shape[1] - 6)
    for k in range(len(pairs.labels)):
        a, b = pairs.sentence_a[k], pairs.sentence_b[k]
        if pairs.labels[k] == 0:
            assert b == a + 1
        else:
            assert doc_ids[b] != doc_ids[a]  # a real sentence, from another document
            assert b % 2 == 1  # from a B place, so it looks like a true B (see _negative_candidates)
        length = int(pairs.attention_mask[k].sum())
        row = pairs.input_ids[k, :length].tolist()
        assert row == [CLS, *sentences[a], SEP, *sentences[b], SEP]
    input_ids, segment_ids, labels = pairs
    assert input_ids is pairs.input_ids and labels is pairs.labels


def test_nsp_pairs_need_two_sentences():
    with pytest.raises(ValueError, match="two sentences"):
        create_nsp_pairs([[5, 6]], CLS, SEP, PAD)


def test_min_selected_adds_eligible_positions_only_where_needed():
    ids = torch.tensor([[CLS, 10, 11, 12, SEP, PAD], [CLS] + list(range(10, 15))])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1] * 6])
    m = create_mlm_mask(ids, MASK, VOCAB, mask_prob=0.0, special_token_ids=SPECIAL, attention_mask=attention_mask,
                        seed=0, min_selected=1)
    assert m.masked_positions.sum(-1).tolist() == [1, 1]
    assert not m.masked_positions[torch.isin(ids, torch.tensor(SPECIAL))].any()
    assert create_mlm_mask(ids, MASK, VOCAB, mask_prob=0.0, special_token_ids=SPECIAL, seed=0,
                           min_selected=1).masked_positions.sum() == 2
    full = create_mlm_mask(ids, MASK, VOCAB, mask_prob=1.0, special_token_ids=SPECIAL, attention_mask=attention_mask,
                           seed=0, min_selected=1)
    assert full.masked_positions.sum(-1).tolist() == [3, 5]  # already enough: nothing added
