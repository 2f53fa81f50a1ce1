"""The headline numbers hidden from the room, headless: the flag, the link, the switch, the button and a call from
code (tests/e2e/test_hidden_numbers.py looks at the screen)."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from lmviz.app import chrome
from tests.helpers import APP

ROOT = Path(__file__).resolve().parents[2]


def hiding(at) -> bool:
    """Whether the run drew the style that hides the numbers."""
    return any(chrome.HIDDEN_NUMBERS_CSS == h.proto.body for h in at.get("html"))


def lesson_links(at) -> list[str]:
    """The query strings of the lesson footer's links (Previous / Next / back to Home)."""
    return [link.proto.query_string for link in at.get("page_link")
            if link.proto.label.startswith(("Previous:", "Next:", "The end of the path"))]


def test_a_link_with_hide_opens_every_page_with_its_numbers_hidden_until_the_switch_shows_them():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params[chrome.HIDE_KEY] = "1"
    at.run()  # Home, opened by the link
    at.switch_page("app_pages/toy_example.py").run()
    assert not at.exception and hiding(at)
    assert at.toggle(key=chrome.HIDE_SWITCH).value is True
    assert at.button(key=chrome.HIDE_BUTTON).label == chrome.SHOW_LABEL
    links = lesson_links(at)
    assert links and all("hide=1" in query for query in links), links  # a copied Next link keeps them hidden
    at.switch_page("app_pages/next_sentence.py").run()  # page to page
    assert not at.exception and hiding(at) and at.query_params[chrome.HIDE_KEY] == "1"
    at.toggle(key=chrome.HIDE_SWITCH).set_value(False).run()  # the switch: shown, and gone from the links
    assert not hiding(at) and chrome.HIDE_KEY not in at.query_params
    assert at.button(key=chrome.HIDE_BUTTON).label == chrome.HIDE_LABEL
    assert not any("hide=" in query for query in lesson_links(at))


def test_the_panels_button_hides_the_numbers_and_shows_them_again():
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/toy_example.py").run()
    assert not hiding(at) and chrome.HIDE_KEY not in at.query_params
    at.button(key=chrome.HIDE_BUTTON).click().run()
    assert hiding(at) and at.query_params[chrome.HIDE_KEY] == "1"
    assert at.toggle(key=chrome.HIDE_SWITCH).value is True  # the sidebar's switch follows
    at.button(key=chrome.HIDE_BUTTON).click().run()
    assert not hiding(at) and chrome.HIDE_KEY not in at.query_params


def a_question_put_to_the_room():
    """A page that hides the numbers from its own code, after the sidebar's switch is drawn, before its panel."""
    from lmviz.app import chrome
    from lmviz.app.widgets import result_panel

    chrome.hide_numbers_switch()
    chrome.hide_numbers()
    result_panel()


def test_code_can_hide_the_numbers_in_the_middle_of_a_run():
    at = AppTest.from_function(a_question_put_to_the_room, default_timeout=30).run()
    assert not at.exception and hiding(at) and at.query_params[chrome.HIDE_KEY] == "1"



def doc(path: str) -> str:
    """A page of the docs with its lines joined, so that a phrase cut by the line's end is still found."""
    return " ".join((ROOT / path).read_text().split())


def test_the_teachers_docs_name_the_key_the_controls_and_the_word_the_code_uses():
    plan, presentation, readme = doc("docs/teachers/index.md"), doc("docs/teachers/presentation.md"), doc("README.md")
    for text in (plan, presentation, readme):
        assert f"key {chrome.HIDE_SHORTCUT}" in text or f"Press **{chrome.HIDE_SHORTCUT}**" in text
        assert f'"{chrome.HIDDEN}"' in text
    for text in (presentation, readme):
        assert f"?{chrome.HIDE_KEY}=1" in text
    for text in (plan, presentation):
        assert f'"{chrome.HIDE_LABEL}"' in text and f'"{chrome.SHOW_LABEL}' in text
