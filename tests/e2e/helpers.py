"""Steps the browser tests share. They import them from here, never from one another."""

import os
import re
from pathlib import Path

from playwright.sync_api import expect

from scripts.live_server import ROOT, SETTLED, settled_height

# where the page screenshots go: CI keeps them as artifacts; scripts/update_screenshots sets docs/screenshots
ARTIFACTS = Path(os.environ.get("LMVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
# The footer's sentence under every lesson, drawn after the page's own script has run to its end
FOOTER = "The links above keep your place"
# every Plotly chart on the page has drawn its traces (charts draw after the script run has finished)
DRAWN = "[...document.querySelectorAll('.js-plotly-plot')].every(chart => chart.querySelector('g.trace'))"
WHOLE_PAGE = {"width": 1400, "height": 2600}  # a tall tab: a whole page at once, for screenshots


def save_whole(tab, name: str) -> None:
    """The page, every chart drawn, saved as ARTIFACTS/``name``.png in a tall tab (WHOLE_PAGE): the main area scrolls
    inside the window, so a full-page screenshot of a short window would hold only its first screen."""
    tab.set_viewport_size(WHOLE_PAGE)
    settled_height(tab)
    tab.wait_for_function(DRAWN, timeout=60_000)  # the screenshot shows every chart, not a blank frame
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(tab, timeout=120_000):
    """Wait until the script run has finished and no element is still a loading placeholder."""
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout)
    tab.wait_for_function(SETTLED, timeout=timeout)


def open_folds(tab, label: str | None = None) -> int:
    """Open every folded part (st.expander) of the main area that is closed (only those whose label contains
    ``label``, when given), as a learner clicking each label does, and wait until the page has settled and stopped
    growing; return how many were opened. A page folds what a class does not need on first view (issue 39); a test
    that reads or measures what is inside opens it first."""
    summaries = tab.locator("[data-testid='stMain'] [data-testid='stExpander'] details:not([open]) > summary")
    if label is not None:
        summaries = summaries.filter(has_text=label)
    handles = summaries.element_handles()  # each found once: an opened part leaves the selector's matches
    for summary in handles:
        summary.scroll_into_view_if_needed()
        summary.click()
    expect(summaries).to_have_count(0)
    settled_height(tab)  # each part opens with an animation: nothing is measured before it has ended
    return len(handles)


def assert_no_error(tab):
    assert tab.locator("[data-testid='stException']").count() == 0
    assert tab.locator("[data-testid='stAlertContentError']").count() == 0
    assert "Traceback" not in tab.inner_text("body")


def metric(tab, label: str):
    """The value element of the st.metric labelled exactly ``label``."""
    named = tab.locator("[data-testid='stMetricLabel']", has_text=re.compile(f"^{re.escape(label)}$"))
    return tab.locator("[data-testid='stMetric']", has=named).locator("[data-testid='stMetricValue']")


# Each visible table of the main area whose content is wider than its box (a glide grid scrolls inside its
# .dvn-scroller; an st.table inside its own wrapper) or whose box runs past the window's right edge. A table in a
# closed st.expander is not seen (checkVisibility), and a glide grid laid out there measures 9 px too wide.
OVERFLOWING_TABLES = """() => [...document.querySelectorAll(
    '[data-testid=stMain] [data-testid=stDataFrame], [data-testid=stMain] [data-testid=stTable]')]
  .filter(t => t.offsetParent !== null && t.checkVisibility() && t.getBoundingClientRect().width > 0)
  .map(t => ({table: t, box: t.querySelector('.dvn-scroller') || t.querySelector('table')?.parentElement || t}))
  .filter(({table, box}) => box.scrollWidth > box.clientWidth + 1 || table.getBoundingClientRect().right > innerWidth)
  .map(({table, box}) => `${table.dataset.testid} ${box.scrollWidth} px in ${box.clientWidth} px: ` +
       table.innerText.replace(/\\s+/g, ' ').slice(0, 60))"""


def overflowing_tables(tab) -> list[str]:
    return tab.evaluate(OVERFLOWING_TABLES)


def type_the_true_next_word(tab, word: str) -> None:
    """On Next token: "If the text really continued with" → "a word I type…", then ``word`` typed and sent."""
    tab.get_by_label("If the text really continued with").click()
    tab.keyboard.type("a word I type")  # the list is long: typed, it shows that one option
    tab.get_by_role("option", name="a word I type…").click()
    box = tab.get_by_label("The word that comes next")
    box.fill(word)
    box.press("Enter")
