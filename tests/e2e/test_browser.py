"""Pages in a real browser: home and the glossary load, the numbers and charts appear, user text stays text (each
lesson is loaded to its end in test_projector_screen.py)."""

from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from lmviz.lessons.causal_lm import analyse_clm
from scripts.live_server import ROOT, running_server, sentence_page_at_once
from tests.e2e.helpers import FOOTER, assert_no_error, open_folds, save_whole, settle

CHART = ".js-plotly-plot g.trace"  # a chart has drawn its first trace
HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "**bold**", "$x^2$"]


def open_page(tab, server, path, ready="[data-testid='stMain'] h1"):
    tab.goto(f"{server}/{path}")
    tab.wait_for_selector(ready, timeout=120_000)
    settle(tab)


def wait_for_points(tab, at_least: int, chart_index=0, trace_index=-1) -> int:
    """Wait until one trace of a Plotly chart has drawn at least ``at_least`` bars or markers (a chart
    draws after the script run, and a stale copy can linger a moment after a rerun); return how many.
    A chart that still has fewer after a minute fails the test."""
    return tab.wait_for_function(
        """([c, t, least]) => {
            const chart = document.querySelectorAll('.js-plotly-plot')[c];
            const traces = chart ? chart.querySelectorAll('g.trace') : [];
            const trace = traces[t < 0 ? traces.length + t : t];
            const n = trace ? trace.querySelectorAll('.point').length : 0;
            return n >= least && n;
        }""", arg=[chart_index, trace_index, at_least], timeout=60_000).json_value()


@pytest.mark.parametrize(("name", "path", "ready"), [("home", "", "[data-testid='stPageLink']"),
                                                    ("glossary", "glossary", "[data-testid='stMain'] h1")])
def test_home_and_glossary_load_and_are_saved_as_screenshots(page, server, name, path, ready):
    """The two pages that are not lessons; each lesson is loaded to its end and saved by test_projector_screen.py's
    visit in default mode."""
    open_page(page, server, path, ready)
    assert_no_error(page)
    save_whole(page, name)


def test_a_link_to_a_page_works_as_the_first_visit_after_the_server_starts(new_tab):
    """A teacher starts the server and shares a link: the first student must get the page, with
    no "Page not found" over it (see app.py for why the pages are not in a folder named pages/)."""
    with running_server(ROOT / "artifacts" / "first-visit.log") as url:
        _, tab = new_tab()
        open_page(tab, url, "toy", f"text={FOOTER}")
        expect(tab.locator("[data-testid='stMain']")).to_contain_text("0.86302")
        # the server says "page not found" before it runs any page: once the page's own number is on
        # screen, that dialog would be too
        assert "Page not found" not in tab.inner_text("body")


def test_toy_page_shows_the_articles_loss_and_its_chart(page, server):
    open_page(page, server, "toy", f"text={FOOTER}")
    expect(page.locator("[data-testid='stMain']")).to_contain_text("0.86302")
    open_folds(page)  # the chart is folded (issue 39)
    assert wait_for_points(page, 5, 0, 1) == 5  # one marker per position
    expect(page.locator(".js-plotly-plot")).to_have_count(1)


def test_typing_a_sentence_updates_the_chart(page, server):
    open_page(page, server, "sentence", f"text={FOOTER}")
    before = wait_for_points(page, 1)
    box = page.get_by_label("Your text")
    box.fill("A much longer sentence than the first one, with many more tokens in it to score.")
    box.press("Control+Enter")
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot g.trace .point').length > {before}",
                           timeout=60_000)
    settle(page)
    assert_no_error(page)
    expect(page.locator("[data-testid='stMain']")).to_contain_text("␣longer")


def test_a_shared_link_opens_with_its_sentence(page, server):
    open_page(page, server, "sentence?text=" + quote("Paris is lovely in spring."), CHART)
    expect(page.get_by_label("Your text")).to_have_value("Paris is lovely in spring.")
    expect(page.locator("[data-testid='stMain']")).to_contain_text("lovely")
    wait_for_points(page, 4)  # more than 3: one marker per token scored


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_shown_literally(page, server, text):
    open_page(page, server, "sentence?text=" + quote(f"Look: {text} end"), CHART)
    assert_no_error(page)
    expect(page.get_by_label("Your text")).to_have_value(f"Look: {text} end")
    for piece in ("**", "$", "<", "alert"):
        if piece in text:  # drawn as characters, not interpreted
            expect(page.locator("[data-testid='stMain']")).to_contain_text(piece)
    assert page.locator("[data-testid='stMain'] img[src='x']").count() == 0
    assert page.locator("[data-testid='stMain'] .katex").count() == 0
    assert page.locator("[data-testid='stMain'] strong:text('bold')").count() == 0
    # the page fixture fails the test if any dialog (alert) fired


def test_training_draws_a_falling_loss_curve(page, server):
    open_page(page, server, "train", f"text={FOOTER}")
    page.get_by_label("Steps").fill("20")
    page.get_by_role("button", name="Train", exact=True).click()
    page.wait_for_selector("text=20 steps in", timeout=180_000)
    settle(page)
    assert_no_error(page)
    # validation points along the way, on the copy of the curve on top (app_pages/train.py draws two, see draw)
    wait_for_points(page, 3, 1, 1)


def test_several_browsers_at_once_each_get_their_own_sentence(server, chromium_path, bundled):
    texts = ["Our teacher explains the loss of a language model.", "Bananas are yellow and sweet.",
             "The train to Lyon leaves at nine, said the guard."]
    sessions = sentence_page_at_once(server, chromium_path, texts)
    assert [s.text_shown for s in sessions] == texts
    assert len({s.loss_shown for s in sessions}) == len(texts)  # so that a mix-up could not go unseen
    for session in sessions:  # each page shows its own sentence's loss (batched with the others: float rounding)
        assert float(session.loss_shown) == pytest.approx(analyse_clm(bundled, session.text).loss, abs=5e-5)
