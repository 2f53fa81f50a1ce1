"""lmviz.core.toy and the Toy example page: the article's 0.86302, any edited table, a 0 and its ∞."""

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from lmviz.core import toy
from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt, fmt_prob
from lmviz.course.glossary import TERMS
from tests.helpers import APP, LABELS, by_hand, unescaped


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
    bad[3, 0] = -0.1
    with pytest.raises(ValueError, match="cannot be negative"):
        toy.check_probability_table(bad)
    bad = toy.probability_table()
    bad[4, 4] = float("nan")
    with pytest.raises(ValueError, match="must be a number"):
        toy.check_probability_table(bad)
    bad = toy.probability_table()
    bad[2, :2] = 1e308  # each finite, their sum is not
    with pytest.raises(ValueError, match="too large"):
        toy.check_probability_table(bad)


def test_a_zero_true_label_is_allowed_and_its_loss_is_infinite():
    zero = toy.probability_table()
    zero[0, 1] = 0.0  # the true label "I" at position 0
    fixed, rescaled = toy.check_probability_table(zero)
    assert rescaled == [0] and toy.impossible_positions(fixed) == [0]
    w = toy.walkthrough(fixed)
    assert w["impossible"] == [0]
    assert w["nll"][0] == math.inf and w["loss"] == math.inf and w["perplexity"] == math.inf
    assert F.cross_entropy(fixed.log(), toy.label_ids()).item() == math.inf  # the reference agrees
    assert w["nll"][1:] == pytest.approx([-math.log(p) for p in (0.3, 0.33, 0.45, 0.6)], abs=1e-12)
    assert not any(math.isnan(v) for v in w["nll"] + w["p_label"] + [w["loss"]])
    tiny = toy.probability_table()
    tiny[1] *= 1e300
    tiny[1, toy.VOCAB.index("love")] = 1e-30  # positive, but 0 once the row is divided by its sum
    fixed, _ = toy.check_probability_table(tiny)
    assert toy.impossible_positions(fixed) == [1] and toy.walkthrough(fixed)["loss"] == math.inf
    assert toy.impossible_positions(toy.probability_table()) == []


@pytest.mark.parametrize("position, p", [(0, 0.0004), (3, 1e-6), (4, 1e-6)])
def test_a_tiny_true_label_probability_gives_the_reference_loss(position, p):
    table = [row[:] for row in toy.PROBABILITIES]
    table[position][LABELS[position]] = p
    w = toy.walkthrough(toy.check_probability_table(np.array(table))[0])  # as the page passes it
    rescaled = torch.tensor(table, dtype=torch.float64)
    rescaled /= rescaled.sum(-1, keepdim=True)
    reference = F.cross_entropy(rescaled.log(), torch.tensor(LABELS)).item()
    assert w["loss"] == pytest.approx(reference, rel=1e-12)
    assert w["nll"][position] == pytest.approx(-math.log(p / sum(table[position])), rel=1e-12)
    assert w["impossible"] == []


# --- The page, headless (Streamlit's AppTest): every number it shows against a computation by hand.

def open_toy_page(edits: dict | None = None) -> AppTest:
    """The Toy example page, with ``edits`` ({row: {word: value}}) typed into its table."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/toy_example.py").run()
    if edits:
        at.session_state["toy_table_0"] = {"edited_rows": edits, "added_rows": [], "deleted_rows": []}
        at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at



def chart_spec(at: AppTest) -> dict:
    (chart,) = at.get("plotly_chart")
    return json.loads(chart.proto.spec)


def font_sizes(spec, inside_font: bool = False):
    """Every font size a Plotly figure sets, wherever it is set."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "size" and inside_font:
                yield value
            yield from font_sizes(value, inside_font or "font" in key)
    elif isinstance(spec, list):
        for value in spec:
            yield from font_sizes(value, inside_font)


def options_fold(rows: list[list[float]]) -> dict[str, str]:
    """The fold "A trainer's options" at its defaults (ε = 0.1, PaLM's z-loss, no shift, no cap), by
    PyTorch: the table's logits are log p, so log Z = 0 and the z-loss 0."""
    z = torch.tensor(rows, dtype=torch.float64)
    z = (z / z.sum(-1, keepdim=True)).log()
    smoothed = F.cross_entropy(z, torch.tensor(LABELS), label_smoothing=0.1).item()
    return {"Plain loss": fmt(F.cross_entropy(z, torch.tensor(LABELS)).item()),
            "Cross-entropy with these options": fmt(smoothed), "z-loss": fmt(0.0),
            "Trainer's loss: the sum": fmt(smoothed)}


def assert_page_shows(at: AppTest, expected: dict) -> None:
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Loss: mean(-log p)": fmt(expected["loss"]),
                       "Perplexity: exp(loss)": fmt(math.exp(expected["loss"]), PERPLEXITY_DIGITS),
                       "Uniform guess: ln 10": fmt(math.log(10)),
                       "Loss before": fmt(expected["loss"]),  # section 4, at the default rate, 1
                       "Loss after one step": fmt(sgd_step(torch.tensor(expected["rows"], dtype=torch.float64),
                                                           1.0)["loss"]),
                       **options_fold(expected["rows"])}
    sum_line = f"**loss** = ({' + '.join(fmt(v) for v in expected['nll'])}) / 5 = **{fmt(expected['loss'])}**"
    assert sum_line in [m.value for m in at.markdown]
    steps = next(d.value for d in at.dataframe if "-log p(label)" in d.value.columns)
    assert steps["p(label)"].tolist() == [fmt_prob(p) for p in expected["p_label"]]
    assert steps["-log p(label)"].tolist() == [fmt(v) for v in expected["nll"]]
    # Step 1 and 2's table: a row per word, a column per position (the gradient table has a sum row too)
    marked = next(d.value for d in at.dataframe if d.value.index.tolist() == toy.VOCAB)
    for t, row in enumerate(expected["rows"]):
        for c, p in enumerate(row):
            marks = ("✓ " if c == LABELS[t] else "") + ("★ " if c == expected["greedy"][t] else "")
            assert marked.iloc[c, t] == marks + fmt_prob(p), (t, toy.VOCAB[c])
    warnings = " ".join(w.value for w in at.warning)
    for t, g in enumerate(expected["greedy"]):
        if g != LABELS[t]:
            pick = f'pick "{toy.VOCAB[g]}" (p = {fmt_prob(expected["rows"][t][g])})'
            truth = f'the true next word is "{toy.VOCAB[LABELS[t]]}" (p = {fmt_prob(expected["p_label"][t])})'
            assert f"Position {t}: greedy decoding would {pick}, but {truth}" in warnings
    markers = chart_spec(at)["data"][1]
    shown = [t for t, p in enumerate(expected["p_label"]) if p > 0]
    assert markers["x"] == pytest.approx([expected["p_label"][t] for t in shown], rel=1e-12)
    assert markers["y"] == pytest.approx([expected["nll"][t] for t in shown], rel=1e-12)
    assert markers["customdata"] == [[fmt_prob(expected["p_label"][t]), fmt(expected["nll"][t])] for t in shown]


@pytest.mark.parametrize("edits", [{}, {0: {"I": 0.0004}}, {0: {"I": 1e-6}}, {3: {"not": 1e-6}},
                                   {1: {"love": 1e-6}, 4: {"cats": 0.0004, "dogs": 0.9}}])
def test_the_page_shows_the_loss_a_hand_computation_gives(edits):
    at = open_toy_page(edits)
    expected = by_hand(edits)
    assert_page_shows(at, expected)
    assert math.isfinite(expected["loss"]) and not any("∞" in w.value for w in at.warning)
    if edits:
        assert fmt(expected["loss"]) != "0.86302"


def test_a_zero_true_label_keeps_the_page_and_says_why_the_loss_is_infinite():
    at = open_toy_page({0: {"I": 0.0}})
    expected = by_hand({0: {"I": 0.0}})
    assert expected["loss"] == math.inf
    assert_page_shows(at, expected)  # every number that can be computed is still there
    steps = next(d.value for d in at.dataframe if "-log p(label)" in d.value.columns)
    assert steps["-log p(label)"].tolist()[0] == "∞"
    assert steps["why"].tolist() == ["p = 0, and -log 0 = ∞"] + [""] * 4  # said beside the ∞
    assert any('The true word "I" at position 0 has probability 0. -log 0 = ∞' in w.value
               and "infinitely surprised by something it said could not happen" in w.value for w in at.warning)
    spec = chart_spec(at)
    labels = [a["text"] for a in spec["layout"]["annotations"]]
    assert labels == ["1: love", "2: dogs", "3: not", "4: cats", "0: I — p = 0, so -log p = ∞"]
    assert any(trace.get("name") == "mean of -log p = loss = ∞ (off the chart)" for trace in spec["data"])
    assert not any("nan" in json.dumps(v).lower() for v in spec["data"])


def test_the_table_marks_its_two_kinds_of_cell_without_colour():
    at = open_toy_page()
    caption = " ".join(c.value for c in at.caption)
    assert "✓ marks the true label's probability" in caption
    assert "★ marks the model's favourite word" in caption
    assert "underline" not in caption  # st.dataframe draws no underline, so the page must not promise one


def test_the_chart_text_is_at_least_14_px():
    spec = chart_spec(open_toy_page())
    assert spec["layout"]["font"]["size"] >= 14
    sizes = list(font_sizes(spec))
    assert len(sizes) > 5 and min(sizes) >= 14


def test_the_editor_keeps_six_decimals():
    """The browser's editor keeps only as many decimals as the column's step has (a step of
    0.001 turned a typed 0.0004 into 0); "plain" shows each number as typed."""
    at = open_toy_page()
    editor = next(d for d in at.dataframe if d.proto.editing_mode)
    columns = json.loads(editor.proto.columns)
    assert [columns[w]["type_config"]["step"] for w in toy.VOCAB] == [1e-6] * 10
    assert [columns[w]["type_config"]["format"] for w in toy.VOCAB] == ["plain"] * 10


# --- The gradient of the loss with respect to the logits, and one step of gradient descent on them.

RATES = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0]  # the page's choices; any positive rate must do
# tables with a 0 off the true labels (a logit of -∞), a tiny true label, and rows to rescale
EDITS = [{}, {0: {"am": 0.0, "a": 0.0}}, {1: {"love": 1e-6}}, {2: {"dogs": 5.0}, 4: {"cats": 0.999}}]


def rescaled(edits: dict) -> torch.Tensor:
    return torch.tensor(by_hand(edits)["rows"], dtype=torch.float64)


def autograd_gradient(probs: torch.Tensor) -> torch.Tensor:
    """PyTorch's own: d F.cross_entropy (the mean over the 5 labels) / d logits, by backpropagation."""
    z = probs.log().requires_grad_()
    F.cross_entropy(z, torch.tensor(LABELS)).backward()
    return z.grad


@pytest.mark.parametrize("edits", EDITS)
def test_the_gradient_is_autograds(edits):
    probs = rescaled(edits)
    gradient = toy.loss_gradient(probs)
    assert gradient.shape == (5, 10)
    assert (gradient - autograd_gradient(probs)).abs().max().item() < 1e-15
    assert toy.logits(probs).tolist() == [[math.log(p) if p > 0 else -math.inf for p in row] for row in probs.tolist()]
    assert torch.allclose(torch.softmax(toy.logits(probs), -1), probs, rtol=0, atol=1e-15)  # softmax(log p) = p
    assert gradient.sum(-1).abs().max().item() < 1e-15  # each row sums to 0


def test_one_row_of_the_gradient_by_hand():
    """Row 0, "<s>" -> "I": the true label's entry (0.5 - 1)/5, every other p/5, in plain Python."""
    row = toy.loss_gradient()[0].tolist()
    for word, p in zip(toy.VOCAB, toy.PROBABILITIES[0]):
        expected = (p - 1) / 5 if word == "I" else p / 5
        assert row[toy.VOCAB.index(word)] == pytest.approx(expected, abs=1e-16), word
    assert row[toy.VOCAB.index("I")] == pytest.approx(-0.1, abs=1e-16) and min(row) < 0 < min(row[:1] + row[2:])
    assert sum(row) == pytest.approx(0, abs=1e-16)


def sgd_step(probs: torch.Tensor, rate: float) -> dict:
    """torch.optim.SGD's step on the logits log p as the weights, and F.cross_entropy after it."""
    z = probs.log().requires_grad_()
    optimizer = torch.optim.SGD([z], lr=rate)
    F.cross_entropy(z, torch.tensor(LABELS)).backward()
    optimizer.step()
    with torch.no_grad():
        nll = F.cross_entropy(z, torch.tensor(LABELS), reduction="none")
        return {"logits": z.detach(), "nll": nll.tolist(), "loss": nll.mean().item(),
                "p_label": torch.softmax(z, -1)[range(5), LABELS].tolist()}


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("edits", EDITS)
def test_one_step_is_torchs_sgd_step_on_the_logits(edits, rate):
    """Against torch.optim.SGD on the logits as the weights, the loss recomputed by F.cross_entropy."""
    probs = rescaled(edits)
    step, reference = toy.one_step(probs, rate), sgd_step(probs, rate)
    after = torch.tensor(step["logits_after"], dtype=torch.float64)
    torch.testing.assert_close(after, reference["logits"], rtol=0, atol=1e-14)
    assert step["loss_after"] == pytest.approx(reference["loss"], rel=1e-12)
    assert step["nll_after"] == pytest.approx(reference["nll"], rel=1e-12)
    assert step["p_label_after"] == pytest.approx(reference["p_label"], rel=1e-12)
    assert step["exp_sums_after"] == pytest.approx(reference["logits"].exp().sum(-1).tolist(), rel=1e-12)
    before = by_hand(edits)
    assert all(new > old for new, old in zip(step["p_label_after"], before["p_label"]))  # every p(label) rises
    assert step["loss_after"] < before["loss"]


def test_one_rows_step_by_hand():
    """Row 0 at rate 1: the true label's logit ln 0.5 + 1 × 0.1, and its share of Σ p·e^(-g) over the row."""
    step = toy.one_step(None, 1.0)
    row = toy.PROBABILITIES[0]
    gradient = [(p - (w == "I")) / 5 for w, p in zip(toy.VOCAB, row)]
    assert step["logits_after"][0][1] == pytest.approx(math.log(0.5) + 0.1, abs=1e-15)
    total = sum(p * math.exp(-g) for p, g in zip(row, gradient))
    assert step["exp_sums_after"][0] == pytest.approx(total, rel=1e-14)
    assert step["p_label_after"][0] == pytest.approx(0.5 * math.exp(0.1) / total, rel=1e-14)


def test_a_step_cannot_move_a_zero_or_a_certain_true_label():
    zero = toy.check_probability_table(rescaled({0: {"I": 0.0}}))[0]
    step = toy.one_step(zero, 30.0)
    assert step["logits_after"][0][1] == -math.inf and step["p_label_after"][0] == 0
    assert step["loss_after"] == math.inf and not any(math.isnan(v) for v in step["nll_after"] + step["row_sums"])
    assert step["gradient"][0][1] == pytest.approx(-0.2)  # (0 - 1)/5: the largest push the mean can give
    certain = rescaled({t: {w: float(w == toy.VOCAB[LABELS[t]]) for w in toy.VOCAB} for t in range(5)})
    step = toy.one_step(certain, 30.0)
    assert toy.loss_gradient(certain).abs().max().item() == 0 and step["loss_after"] == 0
    assert step["p_label_after"] == [1.0] * 5


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf])
def test_a_learning_rate_that_is_not_above_0_is_refused_with_a_sentence(rate):
    with pytest.raises(ValueError, match="The learning rate must be a number above 0"):
        toy.one_step(None, rate)


# --- The glossary entries section 4 links: true of the formula above and of PyTorch's optimizers.

def defaults(optimizer) -> dict:
    return {name: parameter.default for name, parameter in inspect.signature(optimizer).parameters.items()}


def written(value: float) -> str:
    """1e-3 as the entries write it (Python writes 0.001)."""
    return f"{value:.0e}".replace("e-0", "e-")


def test_the_optimizer_entries_give_pytorchs_defaults():
    adamw, sgd = defaults(torch.optim.AdamW), defaults(torch.optim.SGD)
    assert (adamw["lr"], adamw["betas"], adamw["eps"], adamw["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-8, 1e-2)
    assert (f"torch.optim.AdamW's defaults: lr {written(adamw['lr'])}, betas {adamw['betas']}, "
            f"eps {written(adamw['eps'])}, weight_decay {written(adamw['weight_decay'])}.") in TERMS["AdamW"][1]
    assert sgd["momentum"] == 0 and f"lr = {written(sgd['lr'])} and no momentum by default" in TERMS["SGD"][1]
    assert sgd["lr"] == adamw["lr"] and f"both default to {written(sgd['lr'])}" in TERMS["learning rate"][1]


def test_adamws_first_step_is_about_the_rate_times_the_sign_after_the_weight_decay():
    """The AdamW entry: the weight shrinks by 1 − η·λ, then moves by η × about the sign of its gradient."""
    weights = torch.tensor([0.5, -2.0, 3.0, 1.0], dtype=torch.float64, requires_grad=True)
    gradient = torch.tensor([1e-3, -5.0, 100.0, 0.0], dtype=torch.float64)  # very different sizes, and none
    optimizer = torch.optim.AdamW([weights], lr=0.01)  # the default weight decay, 1e-2
    weights.grad = gradient.clone()
    start = weights.detach().clone()
    optimizer.step()
    lr, decay = 0.01, defaults(torch.optim.AdamW)["weight_decay"]
    shrunk = start * (1 - lr * decay)
    moved = (shrunk - weights.detach()) / lr
    assert moved.tolist() == pytest.approx(gradient.sign().tolist(), abs=1e-5)  # 1e-3 and 100 move alike
    assert weights[3].item() == pytest.approx(shrunk[3].item(), rel=1e-15)  # no gradient: only the decay
    assert "about η × the sign of g" in TERMS["AdamW"][1] and "1 − η·λ" in TERMS["AdamW"][1]
    # and far below ε the move is about η × g / ε, proportional to g, as the entry says
    tiny = torch.tensor([1e-11, 2e-11], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.AdamW([tiny], lr=0.01, weight_decay=0.0)
    tiny.grad = tiny.detach().clone()
    optimizer.step()
    eps = defaults(torch.optim.AdamW)["eps"]
    assert ((torch.tensor([1e-11, 2e-11], dtype=torch.float64) - tiny.detach()) / 0.01).tolist() == pytest.approx(
        [1e-11 / eps, 2e-11 / eps], rel=1e-2)
    assert "about η × g / ε, proportional to g, where |g| is far below ε" in TERMS["AdamW"][1]


def test_the_gradient_and_sgd_entries_are_the_formula_and_the_step_above():
    assert "(p − y)/N" in TERMS["gradient"][1] and "they add up to 0" in TERMS["gradient"][1]
    assert "w ← w − η × ∂loss/∂w" in TERMS["SGD"][1]  # what test_one_step_is_torchs_sgd_step_on_the_logits checks


# --- Section 4 on the page, headless: the step at each rate against torch's SGD, and what it says of the loss.

def section_4(at: AppTest) -> dict:
    metrics = {m.label: m.value for m in at.metric}
    texts = [m.value for m in at.markdown]
    return {"before": metrics["Loss before"], "after": metrics["Loss after one step"],
            "table": next(d.value for d in at.dataframe if d.value.index.tolist()[0] == "p(label) before"),
            "change": next(t for t in texts if t.startswith("The step raised each true word's logit")),
            "by hand": next((t for t in texts if t.startswith("By hand, row")), None)}


@pytest.mark.parametrize("rate", [1.0, 0.1, 10.0, 30.0])
def test_section_4_shows_torchs_sgd_step_at_the_chosen_rate(rate):
    at = open_toy_page()
    if rate != 1.0:  # 1 is the page's default
        at.select_slider(key="toy_learning_rate").set_value(rate).run()
    assert not at.exception
    expected, reference = by_hand({}), sgd_step(toy.probability_table(), rate)
    shown = section_4(at)
    assert shown["before"] == fmt(expected["loss"]) and shown["after"] == fmt(reference["loss"])
    assert shown["table"].loc["p(label) before"].tolist() == [fmt_prob(p) for p in expected["p_label"]]
    assert shown["table"].loc["p(label) after"].tolist() == [fmt_prob(p) for p in reference["p_label"]]
    assert shown["table"].loc["-log p after"].tolist() == [fmt(v) for v in reference["nll"]]
    assert shown["change"].endswith(f"The loss fell by {fmt(expected['loss'] - reference['loss'])}. In a real model "
                                    "the logits come from weights that every position shares, and a step too large "
                                    "can make the loss rise.")
    # row 0 by hand: z = ln 0.5, g = (0.5 − 1)/5, z' = z − η·g, and p' = e^z' / Σ p·e^(−η·g) over the row
    z, g = math.log(0.5), (0.5 - 1) / 5
    total = sum(p * math.exp(-rate * ((p - (w == "I")) / 5)) for w, p in zip(toy.VOCAB, toy.PROBABILITIES[0]))
    assert shown["by hand"] == (
        f"By hand, row 0\\: \\<s\\> → I: the true word's logit is z = ln 0.500000 = {fmt(z)} and its gradient "
        f"(0.500000 − 1)/5 = -0.100000, so z' = {fmt(z)} − {rate:g} × (-0.100000) = {fmt(z - rate * g)}. Every "
        f"other logit becomes z' = ln p − {rate:g} × p/5. Then p(label) after = e^z' / Σ e^z' = "
        f"{fmt(math.exp(z - rate * g))} / {fmt(total)} = {fmt_prob(reference['p_label'][0])}.")


def test_section_4_says_why_the_loss_does_not_fall_when_it_cannot():
    shown = section_4(open_toy_page({0: {"I": 0.0}}))
    assert shown["before"] == shown["after"] == "∞"
    assert shown["table"].loc["p(label) after"].tolist()[0] == fmt_prob(0.0)
    assert shown["change"].endswith("The loss stays ∞: a true word with p = 0 has the logit log 0 = −∞, and a step "
                                    "of any finite size leaves it at −∞, so its p stays 0.")
    assert shown["by hand"].startswith("By hand, row 1\\: I → love")  # row 0's ln 0 = −∞ is no arithmetic to show
    certain = {t: {w: float(w == toy.VOCAB[LABELS[t]]) for w in toy.VOCAB} for t in range(5)}
    shown = section_4(open_toy_page(certain))
    assert shown["before"] == shown["after"] == fmt(0.0)
    assert shown["change"].endswith("The loss did not fall: every true word already has p = 1, or so nearly 1 "
                                    "that the step's change is too small for float64 to hold.")


def test_in_presentation_mode_section_4s_tables_are_html_tables_with_the_same_numbers():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["present"] = "1"
    at.run()
    at.switch_page("app_pages/toy_example.py").run()
    assert not at.exception
    # an HTML table's cells and labels are escaped Markdown (chrome.text_table): read as the text they show
    def text(value):
        return unescaped(value) if isinstance(value, str) else value

    shown = [t.value.rename(index=text, columns=text).map(text) for t in at.table]
    tables = {table.index.tolist()[0]: table for table in shown}
    assert tables["<s>"].loc["I"].tolist()[0] == "✓ -0.100000"  # the gradient table
    assert tables["p(label) before"].loc["p(label) after"].tolist() == [
        fmt_prob(p) for p in sgd_step(toy.probability_table(), 1.0)["p_label"]]


def test_the_lessons_docs_page_gives_the_librarys_step_of_row_0():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "lessons" / "toy_example.md").read_text()
    step = toy.one_step(None, 1.0)
    shown = [fmt(step["logits"][0][1]), fmt(step["logits_after"][0][1]), fmt(math.exp(step["logits_after"][0][1])),
             fmt(step["exp_sums_after"][0]), fmt(step["p_label_after"][0]), fmt(step["loss_after"])]
    assert f"$z = \\ln 0.5 = {shown[0]}$, $g = (0.5 - 1)/5 = -0.1$, $z' = {shown[1]}$" in docs
    assert f"= \\frac{{{shown[2]}}}{{{shown[3]}}} = {shown[4]};$$" in docs
    assert f"the loss goes from 0.86302 to {shown[5]}." in docs
