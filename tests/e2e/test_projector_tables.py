"""On a 1280×720 projector, in the default mode (sidebar open) and in presentation mode (sidebar folded), every
table of the Batches, Toy example, Chat fine-tuning loss and Next token pages fits its container: no number hides
behind a horizontal scroll, and presenting, Chat fine-tuning loss's and Next token's are at the body text's size.
Left padding's grid shows the short sentences' real tokens, and a click on the Toy editor's header leaves its
rows in order."""

import re

import pytest
from playwright.sync_api import expect

from lmviz.core import toy
from lmviz.core.text import readable_token
from lmviz.lessons.batches import encode_sentences
from tests.e2e.helpers import BODY_TEXT_PX, assert_no_error, next_frames, open_folds, settle, wait_until_still

MODES = {"default": "", "presentation": "?present=1"}
TABLES = "[data-testid='stMain'] [data-testid='stDataFrame'], [data-testid='stMain'] [data-testid='stTable']"
VISIBLE_TABLES = ("[data-testid='stMain'] [data-testid='stDataFrame']:visible, "
                  "[data-testid='stMain'] [data-testid='stTable']:visible")
# Each visible table's overflow (one in a closed st.expander is not visible): a glide grid (st.dataframe,
# st.data_editor) scrolls in its .dvn-scroller, an st.table in the element around its <table>; neither may be wider
# than it shows, nor reach past the viewport.
OVERFLOW = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stDataFrame], '
                                                + '[data-testid=stMain] [data-testid=stTable]')]
  .filter(t => t.offsetParent !== null && t.checkVisibility() && t.getBoundingClientRect().width > 0)
  .map(t => {
    const table = t.querySelector('table'), scroller = t.querySelector('.dvn-scroller') || table.parentElement;
    const box = t.getBoundingClientRect(), inner = (table || scroller).getBoundingClientRect();
    return {kind: t.dataset.testid, scroll: scroller.scrollWidth, client: scroller.clientWidth,
            right: Math.max(box.right, inner.right), inner_right: inner.right, box_right: box.right};
  })"""


def overflowing(tab) -> list[dict]:
    return [t for t in tab.evaluate(OVERFLOW)
            if t["scroll"] > t["client"] + 1 or t["right"] > 1280 or t["inner_right"] > t["box_right"] + 1]


def open_page(tab, server, page: str, mode: str) -> None:
    tab.goto(f"{server}/{page}{MODES[mode]}")
    settle(tab)
    wait_until_still(tab, "[data-testid='stSidebar']")  # presentation mode folds the sidebar: nothing is measured
    # before its animation has ended
    assert_no_error(tab)


def chooser(tab):
    """Section 2 of Batches: the radio that chooses which grid of the padded batch it shows (the page's other
    radios are check-yourself answers)."""
    label = tab.locator("[data-testid='stWidgetLabel']", has_text=re.compile("^Show$"))
    return tab.locator("[data-testid='stRadio']", has=label).locator("[role='radiogroup'] label")


def show(tab, view: str) -> None:
    chooser(tab).filter(has_text=re.compile(f"^{re.escape(view)}$")).click()
    settle(tab)


def views(tab) -> list[str]:
    return [label.strip() for label in chooser(tab).all_inner_texts()]


# Every glide grid shown has drawn its cells: it keeps a copy of them for screen readers (id glide-cell-COLUMN-ROW,
# the header's row -1), which it fills only once it has measured itself.
GRIDS_DRAWN = """tables => [...document.querySelectorAll(tables)]
  .filter(t => t.dataset.testid === 'stDataFrame' && t.checkVisibility())
  .every(t => t.querySelector('[id^=glide-cell-]'))"""


def select_tab(tab, name) -> None:
    """Click the tab ``name`` (a locator, or its label), and wait until it is the selected one and the tables it
    shows are laid out: each grid shown has drawn its cells, and every table shown, all inside it, is still over a
    few frames. A grid in a tab is measured, and then drawn in several steps, only once its tab is shown: a 1280 px
    window drew the last of them half a second after the click."""
    label = tab.get_by_role("tab", name=name) if isinstance(name, str) else name
    label.click()
    expect(label).to_have_attribute("aria-selected", "true")
    tab.wait_for_function(GRIDS_DRAWN, arg=TABLES, timeout=30_000)
    wait_until_still(tab, TABLES, deep=True)


@pytest.mark.parametrize("mode", MODES)
def test_every_batches_table_fits_a_projector(projector, server, mode):
    open_page(projector, server, "batches", mode)
    assert open_folds(projector) >= 3  # sections 3, 4 and 5 fold a table each (issue 39); they stay open
    tabs = projector.locator("[data-testid='stMain'] [role='tab']")
    assert tabs.count() == 2  # Right padding, Left padding
    for view in views(projector) or [None]:  # before the grids' chooser, there was one view: all of them at once
        if view:
            show(projector, view)
        for n in range(tabs.count()):
            select_tab(projector, tabs.nth(n))
            assert projector.locator(VISIBLE_TABLES).count() >= 4
            assert overflowing(projector) == [], (mode, view, tabs.nth(n).inner_text())


@pytest.mark.parametrize("mode", MODES)
def test_every_toy_table_fits_a_projector(projector, server, mode):
    open_page(projector, server, "toy", mode)
    assert open_folds(projector) >= 1  # the gradient's table is folded (issue 39)
    # vocabulary, labels, editor, steps 1-2, step 3, the gradient, one step, a trainer's options
    assert projector.locator(VISIBLE_TABLES).count() == 8
    assert overflowing(projector) == []


def grid_cells(tab, table) -> list[list[str]]:
    """A visible table's body, row by row, index first: an st.table read as HTML, a glide grid from the copy of
    its cells it keeps for screen readers (id glide-cell-COLUMN-ROW), which holds only the cells it draws."""
    if table.get_attribute("data-testid") == "stTable":
        return [[cell.strip() for cell in row.locator("th, td").all_inner_texts()]
                for row in table.locator("tbody tr").all()]
    return table.evaluate("""t => { const rows = {};
        t.querySelectorAll('[id^=glide-cell-]').forEach(c => { const [col, row] = c.id.split('-').slice(2).map(Number);
          if (row >= 0) (rows[row] ||= [])[col] = c.innerText.trim(); });
        return Object.keys(rows).map(Number).sort((a, b) => a - b).map(r => rows[r]); }""")


@pytest.mark.parametrize("mode", MODES)
def test_left_padding_shows_the_short_sentences_tokens(projector, server, bundled, mode):
    open_page(projector, server, "batches", mode)
    text = projector.get_by_label("Sentences, one per line (at most 8)").input_value()
    sequences = encode_sentences(bundled.tokenizer, text.splitlines())
    width = max(map(len, sequences))
    assert min(map(len, sequences)) < width  # there are short sentences to see
    if views(projector):  # before the chooser, every grid was shown at once, the tokens' first
        show(projector, "tokens")
    select_tab(projector, "Left padding")
    grid = projector.locator(VISIBLE_TABLES).nth(1)  # section 1's table, then section 2's grid
    grid.scroll_into_view_if_needed()
    if grid.get_attribute("data-testid") == "stDataFrame":  # the whole grid drawn: nothing scrolls inside it
        scroller = grid.locator(".dvn-scroller").evaluate("s => [s.scrollWidth, s.clientWidth, s.scrollHeight, "
                                                         "s.clientHeight]")
        assert scroller[0] <= scroller[1] + 1 and scroller[2] <= scroller[3] + 1, scroller
    rows = grid_cells(projector, grid)
    assert [row[0] for row in rows] == [str(t) for t in range(width)]  # one row per position, every one
    for column, ids in enumerate(sequences, 1):
        shown = [row[column] for row in rows[width - len(ids):]]  # left padding: the real tokens end the column
        assert shown == [readable_token(bundled.tokenizer, i) for i in ids], column


def editor_row_names(editor) -> list[str]:
    return editor.evaluate("e => [...Array(5).keys()].map(r => e.querySelector('#glide-cell-0-' + r)?.innerText)")


# The editor's rows as it draws them: a digest of its canvas's pixels below the header row (5 rows and the header, a
# sixth of its height each). A grid draws a sort the frame after the click on its header; its copy of the cells for
# screen readers (editor_row_names) follows 200 ms after any change (a debounce of the grid's own).
DRAWN_ROWS = """e => {
  const canvas = e.querySelector('canvas[data-testid=data-grid-canvas]'), top = Math.ceil(canvas.height / 6) + 2;
  const pixels = canvas.getContext('2d').getImageData(0, top, canvas.width, canvas.height - top).data;
  let digest = 0;
  for (let i = 0; i < pixels.length; i += 4)
    digest = (digest * 31 + pixels[i] + 7 * pixels[i + 1] + 13 * pixels[i + 2]) | 0;
  return digest;
}"""


@pytest.mark.parametrize("mode", MODES)
def test_a_click_on_the_toy_editors_header_keeps_its_rows_in_order(projector, server, mode):
    open_page(projector, server, "toy", mode)
    editor = projector.locator("[data-testid='stDataFrame']").nth(2)
    editor.scroll_into_view_if_needed()
    # its cells are drawn a moment after it scrolls into view: a busy machine once read them all as missing
    projector.wait_for_function("e => e.querySelector('#glide-cell-0-4') !== null", arg=editor.element_handle(),
                                timeout=30_000)
    before = editor_row_names(editor)
    labels = toy.label_ids().tolist()
    assert before == [f"{t}: {toy.INPUT_WORDS[t]} → {toy.VOCAB[labels[t]]}" for t in range(5)]
    box = editor.locator("[data-testid='stDataFrameResizable']").bounding_box()
    header_y = box["y"] + 10  # inside the header row, whatever the mode's row height
    drawn = editor.evaluate(DRAWN_ROWS)
    for fraction in (0.3, 0.3, 0.6, 0.9):  # a column clicked twice (ascending, then descending), then others
        projector.mouse.click(box["x"] + box["width"] * fraction, header_y)
        next_frames(projector)  # a sort the click started (in the page: no run) is drawn by then
        assert editor.evaluate(DRAWN_ROWS) == drawn, fraction
        assert editor_row_names(editor) == before, fraction
    # the cells under the header still take a click: the first row's cell is selected
    projector.mouse.click(box["x"] + box["width"] * 0.3, header_y + box["height"] / 6)
    expect(editor.locator("[id^='glide-cell-'][id$='-0'][aria-selected='true']")).to_have_count(1)
    assert editor_row_names(editor) == before  # the copy for screen readers, refreshed since every click: in order


# Each visible table of the main area: where its rightmost cell ends (an st.table's th/td as laid out; a glide
# grid's columns as wide as its .dvn-scroller scrolls, from the scroller's left edge), the main column's content
# edge, and an st.table's smallest cell text.
TABLE_EDGES = """() => {
  const block = document.querySelector('[data-testid=stMainBlockContainer]');
  const edge = block.getBoundingClientRect().right - parseFloat(getComputedStyle(block).paddingRight);
  return [...document.querySelectorAll('[data-testid=stMain] [data-testid=stDataFrame], '
                                       + '[data-testid=stMain] [data-testid=stTable]')]
    .filter(t => t.offsetParent !== null && t.checkVisibility() && t.getBoundingClientRect().width > 0)
    .map(t => {
      const cells = [...t.querySelectorAll('th, td')], scroller = t.querySelector('.dvn-scroller');
      const right = scroller ? scroller.getBoundingClientRect().left + scroller.scrollWidth
                             : Math.max(...cells.map(c => c.getBoundingClientRect().right));
      return {kind: t.dataset.testid, right: Math.round(right), edge: Math.round(edge),
              font_px: scroller ? null : Math.min(...cells.map(c => parseFloat(getComputedStyle(c).fontSize))),
              head: t.innerText.replace(/\\s+/g, ' ').slice(0, 40)};
    });
}"""


def table_edges(tab) -> list[dict]:
    return tab.evaluate(TABLE_EDGES)


def assert_tables_fit(tab, mode: str, at_least: int) -> list[dict]:
    """Every visible table's cells end inside the main column (and so inside 1280 px), nothing scrolls sideways;
    in presentation mode each is an st.table whose text is at least the body text's size."""
    sidebar = tab.locator("[data-testid='stSidebar']").bounding_box()["width"]
    assert sidebar >= 250 if mode == "default" else sidebar == 0, (mode, sidebar)  # open, or folded
    tables = table_edges(tab)
    assert len(tables) >= at_least, tables
    assert overflowing(tab) == [], (mode, overflowing(tab))
    for table in tables:
        assert table["right"] <= min(table["edge"], 1280) + 1, (mode, table)
    if mode == "presentation":
        body = tab.evaluate(BODY_TEXT_PX)
        for table in tables:
            assert table["kind"] == "stTable" and table["font_px"] >= body >= 24, (table, body)
    return tables


@pytest.mark.parametrize("mode", MODES)
def test_chat_loss_tables_fit_a_projector(projector, server, mode):
    """Chat fine-tuning loss: section 2's labels, section 3's losses (with who uses each labelling, the long
    text) and section 4's two answers, each whole within 1280 px, at the body text's size when presenting."""
    open_page(projector, server, "chat-loss", mode)
    for header in ("input token", "mean of the table's -log p", "tokens counted"):  # sections 2, 3, 4
        table = projector.locator(VISIBLE_TABLES, has_text=header)
        expect(table).to_have_count(1, timeout=120_000)
    settle(projector)
    assert_tables_fit(projector, mode, at_least=3)


@pytest.mark.parametrize("mode", MODES)
def test_next_tokens_table_fits_a_projector(projector, server, mode):
    open_page(projector, server, "next-token", mode)
    expect(projector.locator(VISIBLE_TABLES, has_text="logit z")).to_have_count(1, timeout=120_000)
    assert_tables_fit(projector, mode, at_least=1)
