"""The lesson path in a real browser, on a 1280×720 projector: from Home through every page by its
"Next" link, answering one check-yourself question on each, with the verdict on screen beside the
Check button, and the progress carried from page to page."""

import re

from playwright.sync_api import expect

from lmviz.course.registry import PATH, total_questions
from tests.e2e.helpers import assert_no_error, settle


def answer_first_question(tab) -> None:
    """Show the first question's answer, then give exactly that answer and Check it: it must be right."""
    form = tab.locator("[data-testid='stForm']").first
    answer_box = form.locator("input[type='text'], [data-testid='stRadio']")
    expect(answer_box).to_have_count(1, timeout=120_000)  # a box to type in, or answers to pick: drawn
    typed = answer_box.evaluate("element => element.tagName") == "INPUT"
    form.get_by_role("button", name="Show the answer").click()
    revealed = form.locator("[data-testid='stAlertContentInfo']")
    expect(revealed).to_contain_text("The answer: ", timeout=120_000)
    settle(tab)
    said = revealed.inner_text()
    said = said[said.index("The answer: "):]  # after the icon's name, which its font draws as the icon
    box = form.locator("input[type='text']")
    if typed:
        box.fill(re.search(r"The answer: (-?[\d.]+)\.", said).group(1))
        box.press("Enter")  # Enter in a form's text box submits nothing: the learner presses Check
    else:
        options = [label.strip() for label in form.locator("[data-testid='stRadio'] label").all_inner_texts()]
        chosen = next(option for option in options if said.startswith(f"The answer: {option}. "))
        form.locator("[data-testid='stRadio'] label").filter(has_text=chosen).first.click()
    form.get_by_role("button", name="Check").click()
    verdict = form.locator("[data-testid='stAlertContentSuccess']")
    expect(verdict).to_contain_text("Right. ", timeout=120_000)
    expect(verdict).to_be_in_viewport()  # on screen with the button the learner just pressed


def test_the_path_from_home_through_every_page(projector, server, bundled):
    projector.goto(server)
    settle(projector)
    projector.get_by_role("link", name=f"Start with {PATH[0].title}").click()
    for number, step in enumerate(PATH, start=1):
        settle(projector)
        expect(projector.get_by_text(f"Lesson {number} of {len(PATH)}.")).to_be_visible(timeout=120_000)
        assert_no_error(projector)
        answer_first_question(projector)
        settle(projector)
        expect(projector.get_by_text(f"{number} of {total_questions()} check-yourself questions answered."))\
            .to_be_visible()
        onward = (f"Next: {PATH[number].title}" if number < len(PATH) else "The end of the path: back to Home")
        link = projector.get_by_role("link", name=onward)
        assert "answered=" in link.get_attribute("href")  # the place travels in the link
        link.click()
    settle(projector)
    expect(projector.get_by_text(f"{len(PATH)} of {total_questions()} check-yourself questions answered."))\
        .to_be_visible(timeout=120_000)
