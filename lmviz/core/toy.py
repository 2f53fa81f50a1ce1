"""The worked example of the loss-visualisation article, as data.

A model with a 10-word vocabulary reads "<s> I love dogs not cats". At every
position it outputs a probability for each of the 10 words; the label at
position t is the input word at t+1. The probabilities of the true labels are
0.5, 0.3, 0.33, 0.45 and 0.6, and the loss is the mean of their negative
logs, 0.86302. The article gives those five numbers and three facts about the
table (index 1 is "I", 2 is "am", 4 is "love"; greedy decoding picks "I" at
position 0 and "am" at position 1); the other cells are ours, chosen so that
each row sums to 1 and the table keeps those facts.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lmviz.core.losses import clm_loss

VOCAB = ["<s>", "I", "am", "a", "love", "dogs", "not", "cats", "and", "</s>"]
INPUT_WORDS = ["<s>", "I", "love", "dogs", "not", "cats"]

# One row per input position 0..4 (the last input word, "cats", has no next word).
# Columns follow VOCAB. The cell of the true label is the article's number.
PROBABILITIES = [
    #  <s>   I     am    a     love  dogs  not   cats  and   </s>
    [0.01, 0.50, 0.05, 0.10, 0.05, 0.05, 0.04, 0.05, 0.05, 0.10],  # <s>  -> I
    [0.01, 0.01, 0.40, 0.08, 0.30, 0.05, 0.05, 0.04, 0.03, 0.03],  # I    -> love (greedy says "am")
    [0.01, 0.04, 0.03, 0.10, 0.04, 0.33, 0.05, 0.30, 0.05, 0.05],  # love -> dogs
    [0.01, 0.03, 0.03, 0.03, 0.04, 0.02, 0.45, 0.04, 0.20, 0.15],  # dogs -> not
    [0.01, 0.03, 0.02, 0.05, 0.03, 0.20, 0.01, 0.60, 0.02, 0.03],  # not  -> cats
]


def input_ids() -> torch.Tensor:
    """(6,) the ids of "<s> I love dogs not cats"."""
    return torch.tensor([VOCAB.index(w) for w in INPUT_WORDS])


def label_ids() -> torch.Tensor:
    """(5,) the labels: the input shifted one place to the left."""
    return input_ids()[1:]


def probability_table() -> torch.Tensor:
    """(5, 10) the article's probabilities, float64 so the page shows them exactly."""
    return torch.tensor(PROBABILITIES, dtype=torch.float64)


def check_probability_table(probs) -> tuple[torch.Tensor, list[int]]:
    """Validate a (5, 10) table a learner edited and make each row sum to 1.

    Returns (table, positions whose row had to be rescaled). Raises ValueError
    with a sentence a learner can act on when the table cannot be a
    probability table. A true label with probability 0 is allowed: its -log p
    is infinite, which is a lesson in itself (see ``impossible_positions``).
    """
    # A float64 copy, whether the table comes as a tensor (tests) or a NumPy array (the page's editor).
    probs = probs.double().clone() if torch.is_tensor(probs) else torch.tensor(np.array(probs, dtype=np.float64))
    expected = (len(INPUT_WORDS) - 1, len(VOCAB))
    if probs.shape != expected:
        raise ValueError(f"The table must have {expected[0]} rows and {expected[1]} columns; "
                         f"it has shape {tuple(probs.shape)}.")
    if not bool(torch.isfinite(probs).all()):
        raise ValueError("Every cell must be a number; one is empty or not finite.")
    if bool((probs < 0).any()):
        row, col = (probs < 0).nonzero()[0].tolist()
        raise ValueError(f"Probabilities cannot be negative: position {row}, word {VOCAB[col]!r} "
                         f"is {probs[row, col]:g}.")
    sums = probs.sum(dim=-1)
    for position in range(expected[0]):
        if sums[position] == 0:
            raise ValueError(f"Position {position} has no probability anywhere; a row must sum to more than 0.")
        if not bool(torch.isfinite(sums[position])):
            raise ValueError(f"Position {position}'s numbers are too large to add up; make them smaller.")
    rescaled = [p for p in range(expected[0]) if abs(float(sums[p]) - 1.0) > 1e-9]
    return probs / sums.unsqueeze(-1), rescaled


def impossible_positions(probs: torch.Tensor) -> list[int]:
    """Positions whose true label has probability 0 (after rescaling: a tiny p can round
    to 0 there). Their -log p is -log 0 = infinity, and so is the mean, the loss."""
    labels = label_ids()
    return [t for t in range(len(labels)) if probs[t, labels[t]] == 0]


def logits(probs: torch.Tensor | None = None) -> torch.Tensor:
    """(5, 10) the logits the table implies: z = log p, because softmax(log p) = p / sum(p) = p when each row
    sums to 1. A p of 0 gives z = -∞, which softmax turns back into 0."""
    return torch.log(probability_table() if probs is None else probs)


def logits_loss(z: torch.Tensor):
    """The toy's loss for (5, 10) logits ``z``, by lmviz's own ``clm_loss``: (loss, info), the labels already
    aligned, so no shift."""
    return clm_loss(z.unsqueeze(0), label_ids().unsqueeze(0), shift_labels=False)


def toy_loss(probs: torch.Tensor | None = None):
    """The article's loss, computed by lmviz's own ``clm_loss``.

    The table holds probabilities, while ``clm_loss`` takes logits: log(p) is
    a valid logit vector, because softmax(log p) = p / sum(p) = p.
    Returns (loss, info) from ``clm_loss`` (labels already aligned, so no shift).
    """
    return logits_loss(logits(probs))


def loss_gradient(probs: torch.Tensor | None = None) -> torch.Tensor:
    """(5, 10) the gradient of the loss, the mean over the N = 5 labels, with respect to each logit:
    (p - y) / N, where p = softmax(z) is the table and y is 1 on the true label, 0 elsewhere.

    So the true label's entry is (p - 1) / N, negative: raising that logit lowers the loss. Every other entry
    is p / N, positive or 0, and each row sums to (1 - 1) / N = 0.
    """
    probs = probability_table() if probs is None else probs
    labels = label_ids()
    one_hot = torch.nn.functional.one_hot(labels, len(VOCAB)).to(probs.dtype)
    return (probs - one_hot) / len(labels)


def one_step(probs: torch.Tensor | None, learning_rate: float) -> dict:
    """One step of gradient descent on the logits of ``probs`` (None: the article's table),
    z' = z - learning_rate * gradient, and what it does.

    The true label's logit rises by learning_rate * (1 - p) / N and every other falls by learning_rate * p / N,
    so no p(label) can fall: each row has logits of its own here. A logit of -∞ (p = 0) stays -∞.
    """
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"The learning rate must be a number above 0, not {learning_rate}.")
    probs = probability_table() if probs is None else probs
    z, gradient = logits(probs), loss_gradient(probs)
    after = z - learning_rate * gradient
    loss, info = logits_loss(after)
    return {
        "learning_rate": learning_rate,
        "logits": z.tolist(),
        "gradient": gradient.tolist(),
        "row_sums": gradient.sum(dim=-1).tolist(),
        "logits_after": after.tolist(),
        "exp_sums_after": torch.logsumexp(after, dim=-1).exp().tolist(),  # softmax's denominators, sum of e^z'
        "p_label_after": info["target_probs"][0].tolist(),
        "nll_after": info["nll"][0].tolist(),
        "loss_after": loss.item(),
    }


def walkthrough(probs: torch.Tensor | None = None) -> dict:
    """Every intermediate number of the article's three steps, for the page."""
    probs = probability_table() if probs is None else probs
    loss, info = toy_loss(probs)
    labels = label_ids().tolist()
    return {
        "positions": list(range(len(labels))),
        "inputs": INPUT_WORDS[:-1],
        "labels": [VOCAB[i] for i in labels],
        "label_ids": labels,
        "greedy": [VOCAB[i] for i in info["predictions"][0].tolist()],
        "p_label": info["target_probs"][0].tolist(),
        "nll": info["nll"][0].tolist(),
        "loss": loss.item(),
        "perplexity": info["perplexity"],
        "vocab_size": len(VOCAB),
        "uniform_loss": math.log(len(VOCAB)),
        "impossible": impossible_positions(probs),  # p(label) = 0: -log p and the loss are infinite
        # each row's mean -log p over all 10 words, label smoothing's other term: ∞ where a word has p = 0
        "mean_nll_all": (-probs.log().mean(dim=-1)).tolist(),
    }
