"""Steps the browser tests share. They import them from here, never from one another."""

import os
import re
from pathlib import Path

from lmviz.core import toy
from scripts.live_server import ROOT, SETTLED

# where the page screenshots go: CI keeps them as artifacts; scripts/update_screenshots sets docs/screenshots
ARTIFACTS = Path(os.environ.get("LMVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))


def settle(tab, timeout=120_000):
    """Wait until the script run has finished and no element is still a loading placeholder."""
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout)
    tab.wait_for_function(SETTLED, timeout=timeout)


def assert_no_error(tab):
    assert tab.locator("[data-testid='stException']").count() == 0
    assert tab.locator("[data-testid='stAlertContentError']").count() == 0
    assert "Traceback" not in tab.inner_text("body")


def type_into_editor(tab, position: int, word: str, value: str) -> None:
    """Type ``value`` into the Toy example editor's cell (position, word) as a learner does: click a
    cell of that row, go to the word's column with the keyboard, type, Enter. Each step waits until the
    grid has selected the cell it leads to: a key the grid receives before it has taken the click is
    lost (a lost Home once sent the number to the row's last column)."""
    from playwright.sync_api import expect

    editor = tab.locator("[data-testid='stDataFrame']").nth(2)

    def selected(column: int) -> None:
        expect(editor.locator(f"#glide-cell-{column}-{position}")).to_have_attribute("aria-selected", "true")

    box = editor.bounding_box()
    row_px = 35  # Streamlit's header and row height
    tab.mouse.click(box["x"] + box["width"] / 2, box["y"] + row_px * (position + 1) + row_px / 2)
    # a cell of that row, in the grid's accessible copy of its cells (id glide-cell-COLUMN-ROW)
    expect(editor.locator(f"[id^='glide-cell-'][id$='-{position}'][aria-selected='true']")).to_have_count(1)
    tab.keyboard.press("Home")  # the row's first column, its name
    selected(0)
    for column in range(1, toy.VOCAB.index(word) + 2):
        tab.keyboard.press("ArrowRight")
        selected(column)
    tab.keyboard.press("Enter")  # open the cell's editor
    box = tab.locator("#portal input.gdg-input")
    expect(box).to_be_focused()  # keys sent before it has the focus are lost
    box.press("Control+A")
    box.press_sequentially(value, delay=50)
    expect(box).to_have_value(value)
    box.press("Enter")


def metric(tab, label: str):
    """The value element of the st.metric labelled exactly ``label``."""
    named = tab.locator("[data-testid='stMetricLabel']", has_text=re.compile(f"^{re.escape(label)}$"))
    return tab.locator("[data-testid='stMetric']", has=named).locator("[data-testid='stMetricValue']")


# Each visible table of the main area whose content is wider than its box (a glide grid scrolls inside its
# .dvn-scroller; an st.table inside its own wrapper) or whose box runs past the window's right edge.
OVERFLOWING_TABLES = """() => [...document.querySelectorAll(
    '[data-testid=stMain] [data-testid=stDataFrame], [data-testid=stMain] [data-testid=stTable]')]
  .filter(t => t.offsetParent !== null && t.getBoundingClientRect().width > 0)
  .map(t => ({table: t, box: t.querySelector('.dvn-scroller') || t.querySelector('table')?.parentElement || t}))
  .filter(({table, box}) => box.scrollWidth > box.clientWidth + 1 || table.getBoundingClientRect().right > innerWidth)
  .map(({table, box}) => `${table.dataset.testid} ${box.scrollWidth} px in ${box.clientWidth} px: ` +
       table.innerText.replace(/\\s+/g, ' ').slice(0, 60))"""


def overflowing_tables(tab) -> list[str]:
    return tab.evaluate(OVERFLOWING_TABLES)
