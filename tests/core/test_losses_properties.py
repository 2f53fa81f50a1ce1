"""Property tests: for random shapes, vocabularies, paddings and extreme logits,
lmviz's losses equal torch's and masking keeps its promises."""

import math

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from lmviz.core.labels import Branch
from lmviz.core.losses import clm_loss, mlm_loss
from lmviz.core.masking import create_mlm_mask
from lmviz.lessons.causal_lm import Request
from lmviz.serving.scoring import analyse_batch

EXTREMES = st.sampled_from([0.0, 1e4, -1e4, 30.0, -30.0])


@st.composite
def batches(draw):
    """Logits (B, T, V) with some extreme and some banned (-inf) entries, ids, and a padding mask."""
    batch, seq_len, vocab = draw(st.integers(1, 3)), draw(st.integers(2, 9)), draw(st.integers(2, 40))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, seq_len, vocab, generator=gen) * draw(st.sampled_from([0.1, 1.0, 10.0]))
    for _ in range(draw(st.integers(0, 4))):
        logits[draw(st.integers(0, batch - 1)), draw(st.integers(0, seq_len - 1)), draw(st.integers(0, vocab - 1))] = \
            draw(EXTREMES)
    input_ids = torch.randint(vocab, (batch, seq_len), generator=gen)
    lengths = [draw(st.integers(2, seq_len)) for _ in range(batch)]
    attention_mask = (torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]).long()
    if draw(st.booleans()):  # a banned token: -inf everywhere except where it is the target
        banned = draw(st.integers(0, vocab - 1))
        logits[..., banned] = -math.inf
        input_ids[input_ids == banned] = (banned + 1) % vocab
    return logits, input_ids, attention_mask


@settings(max_examples=200, deadline=None)
@given(batches())
def test_clm_loss_equals_torch_cross_entropy_with_the_same_ignore_rules(batch):
    logits, input_ids, attention_mask = batch
    loss, info = clm_loss(logits, input_ids, attention_mask=attention_mask)
    labels = input_ids.masked_fill(attention_mask == 0, -100)[:, 1:]
    labels = labels.masked_fill(attention_mask[:, :-1] == 0, -100)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    assert math.isfinite(loss.item())
    assert abs(loss.item() - expected.item()) <= 1e-5 * max(1.0, abs(expected.item()))
    counted = info["counted"]
    assert torch.isfinite(info["nll"][counted]).all()
    assert abs(info["nll"][counted].mean().item() - loss.item()) <= 1e-5 * max(1.0, loss.item())


@settings(max_examples=100, deadline=None)
@given(batches(), st.integers(0, 1000))
def test_mlm_loss_equals_torch_on_any_selection(batch, seed):
    logits, input_ids, attention_mask = batch
    masked = (torch.rand(input_ids.shape, generator=torch.Generator().manual_seed(seed)) < 0.5) & attention_mask.bool()
    masked[0, 0] = True
    loss, _ = mlm_loss(logits, input_ids, masked)
    expected = F.cross_entropy(logits[masked], input_ids[masked])
    assert abs(loss.item() - expected.item()) <= 1e-5 * max(1.0, abs(expected.item()))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 30), st.floats(0, 1), st.floats(0, 0.5), st.floats(0, 0.5),
       st.integers(0, 10_000))
def test_masking_never_selects_special_or_padding_and_branches_add_up(batch, seq_len, rate, rnd, keep, seed):
    vocab, specials = 50, [0, 1, 2, 3]  # pad, cls, sep, mask
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (batch, seq_len), generator=gen)
    attention_mask = (torch.rand(batch, seq_len, generator=gen) < 0.8).long()
    m = create_mlm_mask(ids, 3, vocab, rate, rnd, keep, special_token_ids=specials, attention_mask=attention_mask,
                        seed=seed)
    assert not m.masked_positions[torch.isin(ids, torch.tensor(specials)) | (attention_mask == 0)].any()
    counts = [int((m.branch == b).sum()) for b in (Branch.NOT_SELECTED, Branch.MASKED, Branch.RANDOM, Branch.KEPT)]
    assert sum(counts) == ids.numel() and sum(counts[1:]) == int(m.masked_positions.sum())
    assert not torch.isin(m.masked_input_ids[m.branch == Branch.RANDOM], torch.tensor(specials)).any()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.integers(2, 49), min_size=2, max_size=12), min_size=1, max_size=5))
def test_batched_analysis_equals_one_at_a_time(tiny_loaded, texts_ids):
    requests = [Request("", ids, None, False) for ids in texts_ids]
    together = analyse_batch(tiny_loaded, requests)
    for request, result in zip(requests, together):
        alone = analyse_batch(tiny_loaded, [request])[0]
        assert max(abs(a.nll - b.nll) for a, b in zip(result.rows, alone.rows)) < 1e-5
        assert abs(result.loss_model - alone.loss_model) < 1e-5
