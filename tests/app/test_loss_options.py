"""The fold "A trainer's options" on the Toy example and Next token: its numbers against PyTorch's
cross_entropy (label smoothing), a logsumexp by hand (the z-loss) and tanh (the soft-cap) on the page's own logits,
and its sentences against those numbers."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lmviz.app.loss_options import LABEL
from lmviz.core import toy
from lmviz.core.numbers import fmt
from tests.helpers import APP, open_page


def fold(at):
    return next(e for e in at.expander if e.label == LABEL)


def fold_metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in fold(at).metric}


def fold_text(at) -> str:
    return "\n".join(m.value for m in fold(at).markdown)


def references(logits, labels, epsilon, coefficient, cap, shift):
    """The trainer's numbers from PyTorch's own functions: (plain, cross-entropy, z-loss)."""
    moved = logits + shift
    if cap:
        moved = cap * torch.tanh(moved / cap)
    cross_entropy = F.cross_entropy(moved, labels, label_smoothing=epsilon).item()
    z = coefficient * (torch.logsumexp(moved, dim=-1) ** 2).mean().item()
    return F.cross_entropy(logits, labels).item(), cross_entropy, z


def test_the_toys_fold_opens_on_the_references_smoothed_loss():
    at = open_page("app_pages/toy_example.py")
    assert not at.exception, at.exception
    shown = fold_metrics(at)
    assert shown["Plain loss"] == "0.86302" and shown["Cross-entropy with these options"] == "1.07429"
    assert shown["z-loss"] == "0.00000"  # the toy's logits are log p: log Z = 0
    said = fold_text(at)
    assert "ε/C = 0.010000 on each of the other 9 (C = 10" in said
    assert "(1 − 0.1) × 0.69315 + 0.1 × 2.81010 = **0.90484**" in said  # position 0 by hand: −ln 0.5 and its row
    row = toy.PROBABILITIES[0]
    assert fmt(-sum(math.log(p) for p in row) / 10) == "2.81010"
    assert fmt(0.9 * -math.log(0.5) + 0.1 * -sum(math.log(p) for p in row) / 10) == "0.90484"
    assert "paid less than it expected at all 5 positions" in said  # each −log p(label) is below its row's H


@pytest.mark.parametrize("epsilon, coefficient, shift, cap", [(0.2, 1e-3, 10.0, 0.0), (0.0, 1e-2, -5.0, 2.0),
                                                              (0.5, 1e-4, 20.0, 1.0)])
def test_the_toys_fold_agrees_with_pytorch_for_any_setting(epsilon, coefficient, shift, cap):
    at = open_page("app_pages/toy_example.py")
    for key, value in (("toy_smoothing", epsilon), ("toy_z_loss", coefficient), ("toy_shift", shift),
                       ("toy_soft_cap", cap)):
        at.select_slider(key=key).set_value(value)
    at.run()
    assert not at.exception, at.exception
    plain, cross_entropy, z = references(toy.logits(), toy.label_ids(), epsilon, coefficient, cap, shift)
    shown = fold_metrics(at)
    assert shown["Plain loss"] == fmt(plain)
    assert shown["Cross-entropy with these options"] == fmt(cross_entropy)
    assert shown["z-loss"] == fmt(z)
    assert shown["Trainer's loss: the sum"] == fmt(cross_entropy + z)
    said = fold_text(at)
    unshifted = references(toy.logits(), toy.label_ids(), epsilon, coefficient, cap, 0.0)[1]
    if cap:  # the cap bends the shifted logits, so the probabilities move: the page says so, with both numbers
        assert f"changed too, from {fmt(unshifted)} to {fmt(cross_entropy)}" in said
        assert f"between −{cap:g} and {cap:g}" in said
    else:  # without a cap a shift changes no probability
        assert f"the cross-entropy is the same, {fmt(cross_entropy)}" in said and fmt(unshifted) == fmt(cross_entropy)


def test_next_tokens_fold_is_pytorchs_on_the_models_own_logits(bundled):
    at = open_page("app_pages/next_token.py")
    at.selectbox(key="next_true").select_index(1).run()  # the model's favourite, as the true next token
    assert not at.exception, at.exception
    at.select_slider(key="next_shift").set_value(-20.0)
    at.select_slider(key="next_soft_cap").set_value(15.0)
    at.run()
    assert not at.exception, at.exception

    text = at.text_area(key="next_text").value
    ids = bundled.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = bundled.model(ids).logits[0, -1:].double()  # (1, V)
    label = logits.argmax(dim=-1)
    plain, cross_entropy, z = references(logits, label, 0.1, 1e-4, 15.0, -20.0)
    shown = fold_metrics(at)
    # the page's forward and this one may round float32 differently in the last bits: 5 decimals agree
    assert shown["Plain loss"] == fmt(plain)
    assert shown["Cross-entropy with these options"] == fmt(cross_entropy)
    assert shown["z-loss"] == fmt(z)
    said = fold_text(at)
    assert f"(C = {logits.shape[-1]:,}, the whole vocabulary)" in said
    assert f"ln C = {fmt(math.log(logits.shape[-1]))}" in said
    log_z = torch.logsumexp(15 * torch.tanh((logits - 20) / 15), -1).item()
    assert f"({fmt(log_z)})²" in said and log_z < 0  # a negative log Z is squared in brackets


def test_next_tokens_docs_give_the_bundled_models_numbers(bundled):
    """docs/lessons/next_token.md quotes this page's default numbers, rounded: they are recomputed here."""
    from lmviz.lessons.next_token import next_token_logits
    docs = (Path(APP).parent / "docs/lessons/next_token.md").read_text()
    result = next_token_logits(bundled, "The capital of France is")
    logits = result.logits.double().unsqueeze(0)
    label = logits.argmax(dim=-1)
    assert bundled.tokenizer.decode(label) == " Paris"
    plain, smoothed, z = references(logits, label, 0.1, 1e-4, 0.0, 0.0)
    mean_over_all = (-torch.log_softmax(logits, -1).mean()).item()
    said = (f"$\\log Z$ is about {torch.logsumexp(logits, -1).item():.1f}", f"adds about {z:.3f}",
            f"is about {mean_over_all:.1f}", f"from {fmt(plain)} to about {smoothed:.2f}")
    for words in said:
        assert words in " ".join(docs.split()), words
