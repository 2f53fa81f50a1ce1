"""The Toy example in a real browser: probabilities typed into the editor reach the loss, and the
chart's labels never overlap, at a phone's width and a projector's."""

import math

import pytest

from lmviz.core import toy
from lmviz.core.numbers import fmt
from lmviz.figures import plots
from scripts.live_server import LOSS_METRIC, SETTLED, type_into_editor
from tests.helpers import LABELS, by_hand


@pytest.mark.parametrize("position, word, typed, value", [(0, "I", "0.0004", 0.0004), (3, "not", "0.000001", 1e-6),
                                                          (0, "I", "0", 0.0)])
def test_a_typed_probability_reaches_the_loss_in_a_browser(browser, server, position, word, typed, value):
    from playwright.sync_api import expect

    expected = by_hand({position: {word: value}})
    tab = browser.new_page(viewport={"width": 1280, "height": 2400})
    tab.goto(f"{server}/toy")
    tab.wait_for_selector(".js-plotly-plot g.trace", state="attached", timeout=120_000)  # folded: not visible
    tab.wait_for_function(SETTLED, timeout=120_000)
    type_into_editor(tab, position, word, typed)
    cell = f"#glide-cell-{toy.VOCAB.index(word) + 1}-{position}"  # the editor's accessible copy of the cell
    expect(tab.locator("[data-testid='stDataFrame']").nth(2).locator(cell)).to_have_text(typed)  # shown as typed
    expect(tab.locator(LOSS_METRIC)).to_have_text(fmt(expected["loss"]), timeout=60_000)
    tab.wait_for_function(SETTLED, timeout=60_000)
    main = tab.inner_text("[data-testid='stMain']")
    assert f"/ 5 = {fmt(expected['loss'])}" in main and "Traceback" not in main
    assert tab.locator("[data-testid='stException'], [data-testid='stAlertContentError']").count() == 0
    # the chart stays, even for a 0 (a stale copy may linger a moment)
    expect(tab.locator(".js-plotly-plot")).to_have_count(1)
    tab.close()


CHART_CASES = {"article": {}, "1e-6": {1: {"love": 1e-6}}, "zero": {0: {"I": 0.0}},
               "all the same": {t: {w: 1.0 for w in toy.VOCAB} for t in range(5)},
               "all certain": {t: {w: float(w == toy.VOCAB[LABELS[t]]) for w in toy.VOCAB} for t in range(5)},
               "all zero": {t: {toy.VOCAB[LABELS[t]]: 0.0} for t in range(5)}}
MEASURE = """() => {
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const texts = [...document.querySelectorAll('text')].filter(e => e.textContent.trim());
  return {labels: [...document.querySelectorAll('g.annotation-text-g')].map(e => [e.textContent, box(e)]),
          legend: [...document.querySelectorAll('g.legend g.traces')].map(box),
          plot: box(document.querySelector('.nsewdrag')),
          sizes: texts.map(e => [e.textContent, parseFloat(getComputedStyle(e).fontSize)])};
}"""


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.fixture(scope="module")
def chromium_tab(browser):
    tab = browser.new_page()
    yield tab
    tab.close()


@pytest.mark.parametrize("width", [420, 1280])
def test_chart_labels_never_overlap_and_text_is_at_least_14_px(chromium_tab, width):
    chromium_tab.set_viewport_size({"width": width, "height": 700})
    for name, edits in CHART_CASES.items():
        expected = by_hand(edits)
        names = [f"{t}: {toy.VOCAB[i]}" for t, i in enumerate(LABELS)]
        figure = plots.nll_curve(expected["p_label"], names, expected["loss"], math.log(10))
        figure.update_layout(width=width - 40)
        chromium_tab.set_content(figure.to_html(include_plotlyjs=True))  # plotly.js inline: no network
        chromium_tab.wait_for_selector("g.annotation-text-g")
        drawn = chromium_tab.evaluate(MEASURE)
        labels = [box for _, box in drawn["labels"]]
        assert len(labels) == 5, name
        assert not [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:] if overlap(a, b)], name
        assert not [(a, b) for a in labels for b in drawn["legend"] if overlap(a, b)], name
        left, top, right, bottom = drawn["plot"]
        inside = [left - 1 <= a[0] and a[2] <= right + 1 and top - 1 <= a[1] and a[3] <= bottom + 1 for a in labels]
        assert all(inside), name
        assert min(size for _, size in drawn["sizes"]) >= 14, (name, drawn["sizes"])


def test_edits_in_a_row_at_1280x720_on_a_page_drawn_for_the_first_time_each_reach_the_loss(browser, server):
    """The first drawing's progress keeps its place on every run: when a rerun left it out, every element after it
    moved up one place and was drawn anew, and the grid lost the cell the learner was typing into."""
    from playwright.sync_api import expect

    tab = browser.new_page(viewport={"width": 1280, "height": 720})
    tab.goto(f"{server}/toy")  # a new session: the page's first drawing
    tab.wait_for_selector(".js-plotly-plot g.trace", state="attached", timeout=120_000)  # folded: not visible
    tab.wait_for_function(SETTLED, timeout=120_000)
    edits = {}
    for typed in ("0.004", "0.002", "0.003"):
        type_into_editor(tab, 0, "I", typed)
        edits = {0: {"I": float(typed)}}
        expect(tab.locator(LOSS_METRIC)).to_have_text(fmt(by_hand(edits)["loss"]), timeout=60_000)
        tab.wait_for_function(SETTLED, timeout=60_000)
    tab.close()
