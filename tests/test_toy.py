"""lmviz.toy: the article's example reproduces 0.86302 and keeps its facts."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz import toy


def test_toy_loss_is_the_articles_number():
    hand = sum(-math.log(p) for p in (0.5, 0.3, 0.33, 0.45, 0.6)) / 5
    loss, info = toy.toy_loss()
    assert loss.item() == pytest.approx(0.8630232, abs=1e-6)
    assert loss.item() == pytest.approx(hand, abs=1e-12)
    assert round(loss.item(), 5) == 0.86302  # as the article prints it
    probs = toy.probability_table()
    assert F.cross_entropy(probs.log(), toy.label_ids()).item() == pytest.approx(hand, abs=1e-12)


def test_table_keeps_the_articles_facts():
    probs = toy.probability_table()
    assert torch.allclose(probs.sum(-1), torch.ones(5, dtype=torch.float64))
    assert toy.VOCAB[1] == "I" and toy.VOCAB[2] == "am" and toy.VOCAB[4] == "love"
    gathered = probs[torch.arange(5), toy.label_ids()].tolist()
    assert gathered == pytest.approx([0.5, 0.3, 0.33, 0.45, 0.6])
    w = toy.walkthrough()
    assert w["greedy"][:2] == ["I", "am"] and w["labels"][:2] == ["I", "love"]
    assert w["labels"] == ["I", "love", "dogs", "not", "cats"]
    assert w["uniform_loss"] == pytest.approx(2.302585, abs=1e-6)
    assert w["perplexity"] == pytest.approx(math.exp(0.8630232), abs=1e-5)
    assert w["nll"] == pytest.approx([-math.log(p) for p in (0.5, 0.3, 0.33, 0.45, 0.6)])


def test_check_probability_table_renormalises_or_explains():
    probs = toy.probability_table()
    probs[2] *= 3
    fixed, rescaled = toy.check_probability_table(probs)
    assert rescaled == [2]
    assert torch.allclose(fixed, toy.probability_table())
    bad = toy.probability_table()
    bad[0, 1] = 0.0  # the true label "I" at position 0
    with pytest.raises(ValueError, match="true label 'I' has probability 0"):
        toy.check_probability_table(bad)
    bad = toy.probability_table()
    bad[3, 0] = -0.1
    with pytest.raises(ValueError, match="cannot be negative"):
        toy.check_probability_table(bad)
    tiny = toy.probability_table()
    tiny[1] *= 1e300
    tiny[1, toy.VOCAB.index("love")] = 1e-30  # positive, but 0 once the row is divided by its sum
    with pytest.raises(ValueError, match="true label 'love' has probability 0"):
        toy.check_probability_table(tiny)
    bad = toy.probability_table()
    bad[4, 4] = float("nan")
    with pytest.raises(ValueError, match="must be a number"):
        toy.check_probability_table(bad)
