"""While the numbers are hidden (the teacher is about to ask the room), no lesson page shows the answer to one of
its own check-yourself questions anywhere: not in a sentence, a caption, a table, a chart or an expander.

The style folds away what a page writes below its pinned panel (lmviz.app.chrome.HIDDEN_NUMBERS_CSS), the headline
metrics read "hidden", and the questions, the headings and the controls stay. Here each page is run headless with
?hide=1, the questions it builds are caught on their way to check_yourself, and the text of every element that
stays on screen is searched for each numeric answer as the page writes it; tests/e2e/test_hidden_numbers.py reads
a real browser's screen, so that the style and this account of it cannot drift apart.
"""

import re

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.app import chrome, path
from lmviz.core.numbers import fmt
from lmviz.course.quiz import COUNT_DIGITS, Question
from lmviz.course.registry import PATH
from tests.helpers import APP

LESSON_PAGES = [step.page for step in PATH]
# pages whose working below the panel writes an answer out (the two examples)
WRITES_ITS_ANSWERS = {"app_pages/bits_per_byte.py", "app_pages/grpo.py"}
# The elements the style folds below the panel (chrome.WRITTEN, as AppTest names them), the controls it keeps
# (chrome.CONTROLS), and the containers it keeps whole
WRITTEN = {"markdown", "caption", "text", "dataframe", "table", "plotly_chart", "arrow_vega_lite_chart", "info",
           "warning", "success", "error", "exception", "code", "json", "image", "download_button", "latex"}
CONTROLS = {"Slider", "SelectSlider", "Selectbox", "NumberInput", "TextInput", "TextArea", "Checkbox", "Toggle",
            "Radio", "Multiselect", "Button"}
KEPT = (chrome.CHECK_YOURSELF, chrome.SHOWN_WHILE_HIDDEN, chrome.LESSON_FOOTER)


def key_of(block) -> str:
    """A keyed container's key: Streamlit writes it at the end of the block's id."""
    return getattr(getattr(block, "proto", None), "id", "")


def on_screen(at: AppTest):
    """The elements a hidden page keeps on screen: all above the pinned panel, and below it all but what the style
    folds (written elements, and the folds that hold no control), the questions' containers, the tables a learner
    sets and the footer kept whole."""
    def visit(node, below_panel: bool, kept: bool):
        kind = type(node).__name__
        if kind == "Expander" and below_panel and not kept and not any(
                type(inner).__name__ in CONTROLS for inner in walk(node)):
            return
        kept = kept or any(f"-{k}" in key_of(node) for k in KEPT)
        if not hasattr(node, "children") or kind in ("Metric",):
            if not (below_panel and not kept and getattr(node, "type", "") in WRITTEN):
                yield node
            return
        if kind not in ("ElementTree", "SpecialBlock"):
            yield node
        for child in node.children.values():
            yield from visit(child, below_panel, kept)

    below = False
    for child in at.main.children.values():
        yield from visit(child, below, False)
        below = below or key_of(child).endswith(chrome.RESULT_PANEL)


def cell_text(value) -> str:
    return fmt(value) if isinstance(value, float) else str(value)


def shown_text(at: AppTest) -> list[str]:
    """What a hidden page keeps on screen, element by element, as text: tables cell by cell, a chart as its JSON,
    every other element as its message. A metric's value is left out (the style writes "hidden" over it). The
    questions' own words are searched too: one question's numbers may be another's answer."""
    texts = []
    for node in on_screen(at):
        kind = type(node).__name__
        if kind in ("Dataframe", "Table"):
            frame = node.value
            texts.append(" | ".join(map(str, [*frame.columns, *frame.index])))
            texts += [" | ".join(cell_text(v) for v in row) for row in frame.itertuples(index=False)]
        elif kind == "Metric":  # its label, and its help, which shows on hover
            texts += [node.label, node.proto.help]
        elif kind not in ("Block", "Column", "Tab", "Form"):
            texts.append(str(node.proto))
    return texts


def written(question: Question) -> list[str]:
    """How a page writes the answer: with the question's own digits, and with the house's five."""
    return sorted({question.shown_answer, fmt(question.answer)})


def answers_shown(texts: list[str], questions: list[Question]) -> list[str]:
    """Each numeric answer found in the texts, with the text it was found in. A count is searched as the pages write
    a count of a whole, "3 of 95" (RL fine-tuning's clipped tokens in its update table): a small whole number alone
    is in every page's prose."""
    found = []
    for question in questions:
        if question.choices:
            continue
        for form in written(question):
            pattern = re.compile(rf"(?<![\d.,]){re.escape(form)} of \d" if question.is_count
                                 else rf"(?<![\d.]){re.escape(form)}(?!\d)")
            found += [f"{question.key} = {form}: …{text[max(0, m.start() - 80):m.end() + 40]}…"
                      for text in texts for m in pattern.finditer(text)]
    return found


def test_the_search_finds_an_answer_in_a_sentence_and_in_a_table_but_not_inside_a_longer_number():
    question = Question("q", "What is it?", 1.342661, reason="r", hint="h")
    assert answers_shown(["the page's bits per byte = 1.34266."], [question])
    assert answers_shown(["model | 1.34266"], [question])
    assert not answers_shown(["1.342661", "21.34266", "1.342662 and 11.34266"], [question])
    count = Question("c", "How many are clipped?", 3, reason="r", hint="h", digits=COUNT_DIGITS)
    assert count.is_count and answers_shown(["update | 3 of 95 tokens"], [count])
    assert not answers_shown(["3 updates", "13 of 95 tokens", "3 tokens"], [count])


@pytest.mark.parametrize("page", LESSON_PAGES)
def test_a_page_with_its_numbers_hidden_shows_none_of_its_questions_answers(page, monkeypatch):
    caught: list[Question] = []
    check_yourself = path.check_yourself

    def catching(step_name, questions, *args, **kwargs):
        caught.extend(questions)
        return check_yourself(step_name, questions, *args, **kwargs)

    monkeypatch.setattr(path, "check_yourself", catching)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params[chrome.HIDE_KEY] = "1"
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    assert caught, f"{page} asked no question"
    assert answers_shown(shown_text(at), caught) == []
    shown = {id(node) for node in on_screen(at)}
    controls = [node for node in walk(at.main) if type(node).__name__ in CONTROLS]
    assert controls and all(id(node) in shown for node in controls), [
        getattr(node, "label", node) for node in controls if id(node) not in shown]  # every control stays
    if page in WRITES_ITS_ANSWERS:  # the fold is what hides them: the whole page holds them
        assert answers_shown([str(node.proto) for node in walk(at.main) if hasattr(node, "proto")], caught)


def walk(node):
    yield node
    for child in getattr(node, "children", {}).values():
        yield from walk(child)
