"""At 1280×720, the teacher hides the numbers that answer the question put to the room: 12 of the class plan's 21
questions had their answer in 40 px in the pinned panel while the room was asked. Hidden, each number reads
"hidden", its label kept, on every page and after a reload, until the teacher shows them again; by keyboard too."""

import re

from playwright.sync_api import expect

from lmviz.app.chrome import CHECK_YOURSELF, HIDDEN, HIDE_LABEL, SHOW_LABEL
from tests.e2e.helpers import ARTIFACTS, ScriptRuns, assert_no_error, next_frames, settle

# Each metric on screen in the main area (none in a closed fold): its label, and what its value shows, the number
# or (hidden) the placeholder.
METRICS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stMetric]')]
  .filter(m => m.checkVisibility()).map(m => {
  const value = m.querySelector('[data-testid=stMetricValue]');
  const number = value.querySelector('[data-testid=stMarkdownContainer]');
  return [m.querySelector('[data-testid=stMetricLabel]').innerText.trim(),
          number.checkVisibility() ? number.innerText.trim() : getComputedStyle(value, '::before').content];
})"""
PANEL = ".st-key-result-panel"


def metrics(tab) -> list[list[str]]:
    return tab.evaluate(METRICS)


def button(tab, label: str):
    return tab.get_by_role("button", name=re.compile(f"^{re.escape(label)}"))


def press_and_wait(tab, key: str, then: str) -> None:
    """``key`` pressed, and the page rerun until the button reads ``then``."""
    tab.keyboard.press(key)
    expect(button(tab, then)).to_be_visible(timeout=60_000)
    settle(tab)


def overlaps(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_the_teacher_hides_the_pinned_numbers_on_every_page_and_shows_them_again(projector, server):
    runs = ScriptRuns(projector)
    projector.goto(f"{server}/toy?present=1")
    settle(projector)
    shown = metrics(projector)
    assert shown[0] == ["Loss: mean(-log p)", "0.86302"], shown
    height = projector.locator(PANEL).bounding_box()["height"]
    hide = button(projector, HIDE_LABEL)  # at the top of the screen, over none of the numbers
    expect(hide).to_be_in_viewport(ratio=1)
    for value in projector.locator(f"{PANEL} [data-testid='stMetric']").all():
        assert not overlaps(hide.bounding_box(), value.bounding_box())

    asked = runs.requested
    press_and_wait(projector, "h", then=SHOW_LABEL)  # the key H, from anywhere on the page
    assert runs.requested > asked  # its run, asked for (ScriptRuns sees it: below, an h typed as text must not)
    hidden = metrics(projector)
    assert hidden == [[label, f'"{HIDDEN}"'] for label, _ in shown], hidden  # labels kept, every value hidden
    assert projector.locator(PANEL).bounding_box()["height"] == height  # the page below does not move
    expect(projector).to_have_url(re.compile(r"[?&]hide=1"))
    projector.screenshot(path=str(ARTIFACTS / "toy-numbers-hidden.png"))

    next_link = projector.get_by_role("link", name="Next: Your sentence").last  # the footer's
    assert "hide=1" in next_link.get_attribute("href")
    next_link.click()  # the next page: still hidden
    settle(projector)
    expect(projector.locator(f"{PANEL} [data-testid='stMetric']")).to_have_count(5, timeout=60_000)
    assert {value for _, value in metrics(projector)} == {f'"{HIDDEN}"'}, metrics(projector)
    box = projector.get_by_label("Your text")  # an H typed into a text box is text, not the shortcut
    box.click()
    asked = runs.requested
    projector.keyboard.type("h")
    expect(box).to_have_value(re.compile("h$"))
    # The shortcut clicks the button on the key's keydown, and the click asks the server for a run at once: once the
    # page has drawn since the key, a shortcut that fired has asked
    next_frames(projector)
    assert runs.requested == asked, "the h typed into the text box asked for a run"
    expect(button(projector, SHOW_LABEL)).to_be_visible()
    projector.reload()  # F5: still hidden
    settle(projector)
    assert {value for _, value in metrics(projector)} == {f'"{HIDDEN}"'}, metrics(projector)

    button(projector, SHOW_LABEL).focus()  # the button, by keyboard
    press_and_wait(projector, "Enter", then=HIDE_LABEL)
    assert all(value[0].isdigit() for _, value in metrics(projector)), metrics(projector)
    assert "hide=" not in projector.url
    assert_no_error(projector)


def test_the_sidebar_switch_hides_every_number_of_the_page(projector, server):
    """In default mode, the switch under "Presentation mode" (by keyboard: Space): Batches' pinned numbers and its
    sections' own, further down, all read "hidden"."""
    projector.goto(f"{server}/batches")
    settle(projector)
    shown = metrics(projector)
    assert len(shown) > 3 and all(value[0].isdigit() for _, value in shown), shown  # the panel's 3, and more
    switch = projector.get_by_role("switch", name=HIDE_LABEL)
    switch.focus()
    projector.keyboard.press("Space")
    expect(switch).to_be_checked()
    expect(button(projector, SHOW_LABEL)).to_be_visible(timeout=60_000)
    settle(projector)
    assert metrics(projector) == [[label, f'"{HIDDEN}"'] for label, _ in shown]
    switch.focus()
    projector.keyboard.press("Space")
    expect(switch).not_to_be_checked()
    expect(button(projector, HIDE_LABEL)).to_be_visible(timeout=60_000)
    settle(projector)
    assert metrics(projector) == shown


MAIN_TEXT = "document.querySelector('[data-testid=stMain]').innerText"


def test_a_hidden_page_shows_no_answer_anywhere_on_screen_and_each_question_its_numbers(projector, server):
    """Bits per byte writes its bits per byte in a sentence under the panel. Hidden, the working folds away (what a
    browser draws, innerText, holds none of the answer) while the headings, the controls and the questions stay,
    each question with the numbers it needs; shown again, the sentence is back."""
    projector.goto(f"{server}/bpb?hide=1")
    settle(projector)
    hidden_text = projector.evaluate(MAIN_TEXT)
    forms = projector.locator(f"[class*=st-key-{CHECK_YOURSELF}] [data-testid=stForm]")
    first = forms.first
    expect(first.locator("[data-testid=stTable]")).to_have_count(0)  # its numbers are in its own words
    lost = forms.filter(has_text="how many of the text's tokens")
    expect(lost.locator("[data-testid=stTable]")).to_be_visible()  # the context lengths it needs, from the fold
    first.get_by_role("button", name="Show the answer").click()
    revealed = first.locator("[data-testid^=stAlertContent]")
    expect(revealed).to_be_visible(timeout=60_000)
    revealed = revealed.inner_text()
    answer = re.search(r"The answer: ([0-9.]+)\.", revealed).group(1)
    assert "1. From nats per token to bits per byte" in hidden_text and "Check yourself" in hidden_text
    assert projector.get_by_label("Your text").is_visible()  # the controls stay
    assert answer not in hidden_text, answer
    projector.screenshot(path=str(ARTIFACTS / "bpb-working-folded.png"))
    press_and_wait(projector, "h", then=HIDE_LABEL)
    assert answer in projector.evaluate(MAIN_TEXT)  # unfolded: the sentence that held it is back
    assert_no_error(projector)
