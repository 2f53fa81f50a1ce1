"""lmviz.core.toy and the Toy example page: the article's 0.86302, any edited table, a 0 and its ∞."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from lmviz.core import toy
from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt, fmt_prob
from tests.helpers import APP, LABELS, by_hand


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


def assert_page_shows(at: AppTest, expected: dict) -> None:
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Loss: mean(-log p)": fmt(expected["loss"]),
                       "Perplexity: exp(loss)": fmt(math.exp(expected["loss"]), PERPLEXITY_DIGITS),
                       "Uniform guess: ln 10": fmt(math.log(10))}
    sum_line = f"**loss** = ({' + '.join(fmt(v) for v in expected['nll'])}) / 5 = **{fmt(expected['loss'])}**"
    assert sum_line in [m.value for m in at.markdown]
    steps = next(d.value for d in at.dataframe if "-log p(label)" in d.value.columns)
    assert steps["p(label)"].tolist() == [fmt_prob(p) for p in expected["p_label"]]
    assert steps["-log p(label)"].tolist() == [fmt(v) for v in expected["nll"]]
    marked = next(d.value for d in at.dataframe  # the marked table, not the editor (numbers, not text)
                  if d.value.index.tolist()[0] == "0: <s> → I" and isinstance(d.value.iloc[0, 0], str))
    for t, row in enumerate(expected["rows"]):
        for c, p in enumerate(row):
            marks = ("✓ " if c == LABELS[t] else "") + ("★ " if c == expected["greedy"][t] else "")
            assert marked.iloc[t, c] == marks + fmt_prob(p), (t, toy.VOCAB[c])
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
