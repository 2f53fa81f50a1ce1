"""The three BERT pages on a 1280×720 projector with the tiny BERT, the one they use offline: the pinned panel
stays short, with one line on what the model can do (the rest below it), every table fits the screen, in
default mode with the sidebar open and in presentation mode, and the Next-sentence buttons draw pairs as the
model's training pairs were drawn."""

import pytest
from playwright.sync_api import expect

from lmviz.core.corpus import generate_corpus
from lmviz.core.numbers import fmt_prob
from lmviz.lessons.bert import analyse_nsp, draw_nsp_pair, panel_note, unknown_words
from lmviz.models.loading import TINY_BERT, load_bert
from tests.e2e.helpers import ARTIFACTS, assert_no_error, metric, settle

PANEL_PX = 150  # the headline numbers and one line: under a quarter of a 720-pixel screen
ENGLISH, ENGLISH_B = "The capital of France is Paris.", "It is a beautiful city."
STORY = generate_corpus(num_train=0, num_validation=1, seed=0).validation[0].sentences  # what each page opens on
# page -> (the boxes a teacher types English into, what the page opens with in them)
PAGES = {"masked-lm": (["Text"], [" ".join(STORY)]), "nsp": (["Sentence A", "Sentence B"], STORY[:2]),
         "bert-loss": (["Sentence A", "Sentence B"], STORY[:2])}
MODES = {"default": "", "presentation": "?present=1"}

# Each table of the main column: what it holds, how wide its content is and how wide it is shown. A glide grid
# (st.dataframe) scrolls inside its .dvn-scroller; an HTML table (st.table) inside the element around it.
TABLES = """() => [...document.querySelectorAll(
    "[data-testid='stMain'] [data-testid='stDataFrame'], [data-testid='stMain'] [data-testid='stTable']")].map(t => {
  const scroller = t.querySelector('.dvn-scroller') || t.querySelector('table').parentElement;
  return {kind: t.dataset.testid, columns: t.querySelector('table')?.rows[0]?.innerText.slice(0, 60) ?? '',
          scroll: scroller.scrollWidth, client: scroller.clientWidth,
          right: t.getBoundingClientRect().right, viewport: window.innerWidth};
})"""
# The pinned panel's height, and its one line of text: the caption's paragraph, its height and its line height.
PANEL = """() => {
  const panel = document.querySelector('.st-key-result-panel');
  const note = panel.querySelector("[data-testid='stCaptionContainer'] p");
  return {height: panel.getBoundingClientRect().height, note: note ? note.innerText.trim() : null,
          note_px: note ? note.getBoundingClientRect().height : 0,
          line_px: note ? parseFloat(getComputedStyle(note).lineHeight) : 0};
}"""


@pytest.fixture(scope="module")
def tiny():
    return load_bert(TINY_BERT)


def open_page(tab, server, path: str, mode: str) -> None:
    tab.goto(f"{server}/{path}{MODES[mode]}")
    settle(tab)
    expect(tab.get_by_text(f"Model: {TINY_BERT},")).to_have_count(1)  # these checks are of the tiny BERT's page


def type_english(tab, boxes: list[str]) -> None:
    for box, text in zip(boxes, [ENGLISH, ENGLISH_B]):
        field = tab.get_by_label(box, exact=True)
        field.fill(text)
        field.press("Control+Enter" if box == "Text" else "Enter")  # a text area takes Ctrl+Enter, an input Enter
        settle(tab)


def assert_short_panel_with_its_line(tab, expected_line: str, where: str) -> None:
    panel = tab.evaluate(PANEL)
    assert panel["note"] == expected_line, (where, panel)
    assert panel["note_px"] < 1.5 * panel["line_px"], (where, panel)  # one line, not two
    assert panel["height"] <= PANEL_PX, (where, panel)


def assert_tables_fit(tab, where: str) -> None:
    tables = tab.evaluate(TABLES)
    assert tables, where
    for table in tables:
        assert table["scroll"] <= table["client"] + 1, (where, table)  # nothing cut off to the right
        assert table["right"] <= table["viewport"], (where, table)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("path", list(PAGES))
def test_a_short_panel_with_one_line_and_tables_that_fit(projector, server, tiny, path, mode):
    """On the page's own story and on English (where the warning used to grow the panel to 270–394 px)."""
    boxes, opened_with = PAGES[path]
    open_page(projector, server, path, mode)
    where = f"{path} {mode}"
    assert_short_panel_with_its_line(projector, panel_note(tiny, unknown_words(tiny.tokenizer, *opened_with),
                                                           next_sentence=path == "nsp"), where)
    assert_tables_fit(projector, where)
    type_english(projector, boxes)
    english = unknown_words(tiny.tokenizer, *[ENGLISH, ENGLISH_B][:len(boxes)])
    assert english.most
    expect(projector.get_by_text("does not know most of these words")).to_have_count(1, timeout=60_000)  # below
    settle(projector)
    assert_short_panel_with_its_line(projector, panel_note(tiny, english), f"{where}, English")
    assert_tables_fit(projector, f"{where}, English")
    projector.screenshot(path=str(ARTIFACTS / f"projector-{path}-{mode}-english.png"))
    assert_no_error(projector)


def test_next_sentence_buttons_draw_pairs_as_in_training_and_show_their_score(projector, server, tiny):
    """Each click is the next draw of lmviz.lessons.bert.draw_nsp_pair, the pair that the training code makes of
    two held-out stories (tests/lessons/test_bert_nsp_pairs.py checks that against make_batch)."""
    open_page(projector, server, "nsp", "default")
    for draw, (button, follows) in enumerate([("A true continuation from the corpus", True),
                                              ("A sentence from another story", False),
                                              ("A true continuation from the corpus", True)], start=1):
        projector.get_by_role("button", name=button).click()
        a, b = draw_nsp_pair(follows, draw)
        expect(projector.get_by_label("Sentence A", exact=True)).to_have_value(a, timeout=60_000)
        expect(projector.get_by_label("Sentence B", exact=True)).to_have_value(b)
        settle(projector)
        expect(metric(projector, "p(B follows A)")).to_have_text(fmt_prob(analyse_nsp(tiny, a, b, follows).probs[0]))
        expect(metric(projector, "Label (next_sentence_label)")).to_have_text("0: B follows A" if follows else
                                                                              "1: B does not follow A")
    assert_no_error(projector)
