"""Your sentence and Next token on a 1280×720 projector, as the teacher's rehearsal used them: the answer to
Predict first on screen with the row it names, the pinned numbers whole with the sidebar open, and a true next
word that does not outlive the text it was chosen for."""

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from lmviz.core.numbers import fmt
from lmviz.lessons.causal_lm import analyse_clm
from tests.e2e.helpers import ARTIFACTS, assert_no_error, metric, settle, type_the_true_next_word, wait_until_still

MODES = {"default": "", "presentation": "&present=1"}
ROW_PX = 35  # st.dataframe's header and row height (default mode: the key table is a glide grid)


def edge(element, which: str) -> float:
    return element.evaluate(f"e => e.getBoundingClientRect().{which}")


@pytest.mark.parametrize("mode", MODES)
def test_predict_firsts_answer_comes_under_the_panel_with_the_costliest_row(projector, server, bundled, mode):
    """"Show the answer" reran the page with the losses shown, and the view was thrown to the bottom of the page, or
    to the table's last rows with the costliest label's under the pinned panel. The answer now comes up to just
    under the panel, and the costliest label's row is on screen below it."""
    projector.goto(f"{server}/sentence?sentence_predict=1{MODES[mode]}")
    settle(projector)
    button = projector.get_by_role("button", name="Show the answer").first
    button.scroll_into_view_if_needed()
    button.click()
    answer = projector.locator(".st-key-sentence-prediction [data-testid='stAlert']")
    expect(answer).to_contain_text("The answer: ", timeout=120_000)
    settle(projector)
    projector.wait_for_function("window.lmvizAnswerBrought === true")  # the page's last try to bring it up, made
    wait_until_still(projector, "[data-testid='stMain']")
    panel = projector.locator(".st-key-result-panel")
    below_panel = edge(panel, "bottom")
    assert 0 <= edge(answer, "top") - below_panel <= 40, "the answer is not just under the pinned panel"
    expected = analyse_clm(bundled, "The capital of France is Paris.")
    costliest = max(range(len(expected.rows)), key=lambda t: expected.rows[t].nll)
    table = projector.locator("[data-testid='stMain'] [data-testid='stDataFrame'], "
                              "[data-testid='stMain'] [data-testid='stTable']").first
    if mode == "presentation":  # an HTML table: the row itself
        row = table.locator("tbody tr").nth(costliest)
        expect(row).to_contain_text(fmt(expected.rows[costliest].nll))
        row_top, row_bottom = edge(row, "top"), edge(row, "bottom")
    else:  # a canvas: the row's place in it
        row_top = edge(table, "top") + ROW_PX * (costliest + 1)
        row_bottom = row_top + ROW_PX
    assert below_panel <= row_top and row_bottom <= 720, (row_top, row_bottom, below_panel)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    projector.screenshot(path=str(ARTIFACTS / f"sentence-predict-first-answered-{mode}.png"))
    assert_no_error(projector)


# Each label and number of the pinned panel that is cut: wider than its box, or past the window's right edge.
CUT_IN_PANEL = """() => [...document.querySelectorAll(
    '.st-key-result-panel [data-testid=stMetricLabel] *, .st-key-result-panel [data-testid=stMetricValue] *')]
  .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > innerWidth)
  .map(e => e.innerText)"""
NONSENSE = "zq xv plorb wug fnord kitt"  # a perplexity in the tens of thousands


def test_your_sentences_large_perplexity_is_whole_with_the_sidebar_open(projector, server, bundled):
    """With the sidebar open (818 px left for the page at 1280), a perplexity of four digits or more before the point
    was cut ("1919.68…") in a fifth of the row."""
    assert analyse_clm(bundled, NONSENSE).perplexity >= 10_000
    projector.goto(f"{server}/sentence?text={quote(NONSENSE)}")
    settle(projector)
    expect(projector.locator("[data-testid='stSidebar']")).to_be_visible()
    expect(metric(projector, "Perplexity: exp(loss)")).to_have_text(re.compile(r"^\d{5,}\.\d{4}$"))
    assert projector.evaluate(CUT_IN_PANEL) == []
    assert_no_error(projector)


def test_next_tokens_pinned_labels_are_whole_with_the_sidebar_open(projector, server):
    """With the sidebar open, "Loss if the true next token is …" read "Loss if the true next token i…"; a long true
    next token lengthens the other two labels."""
    projector.goto(f"{server}/next-token")
    settle(projector)
    expect(projector.locator("[data-testid='stSidebar']")).to_be_visible()
    expect(metric(projector, "Loss if the true next token is …")).to_have_text("choose one")
    assert projector.evaluate(CUT_IN_PANEL) == []
    type_the_true_next_word(projector, " understanding")
    expect(projector.locator(".st-key-result-panel [data-testid='stMetric']", has_text="Rank of")).to_have_count(
        1, timeout=120_000)
    settle(projector)
    assert projector.evaluate(CUT_IN_PANEL) == []
    assert_no_error(projector)
