"""The lesson path in a real browser, on a 1280×720 projector: from Home through every page by its
"Next" link, answering one check-yourself question on each, with the verdict on screen beside the
Check button, the progress carried from page to page, and each page opened at its top; and every Previous link
of the path, and the end's link Home, opening its page at the top."""

import re

from playwright.sync_api import expect

from lmviz.course.registry import PATH, total_questions
from tests.e2e.helpers import assert_no_error, settle

HOME_TITLE = "How is a language model's training loss computed?"


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
    expect(form.locator("script.lmviz-into-view")).to_be_attached()  # the press's own bring-into-view, in its form
    expect(verdict).to_be_in_viewport()  # on screen with the button the learner just pressed


def test_the_path_from_home_through_every_page(projector, server, bundled):
    projector.goto(server)
    settle(projector)
    projector.get_by_role("link", name=f"Start with {PATH[0].title}").click()
    for number, step in enumerate(PATH, start=1):
        # the new page's own line first: just after a click, the page left behind still reads as settled, and a
        # question answered while the new page was still drawing could have its buttons moved under the click
        # 240 s: One step of learning computes its three steps on arrival, and took over 120 s while the other worker
        # of a two-process run was busy (it takes 10 to 20 s alone)
        expect(projector.get_by_text(f"Lesson {number} of {len(PATH)}.")).to_be_visible(timeout=240_000)
        settle(projector)
        assert_no_error(projector)
        opened_at_its_top(projector, step.heading, "Start" if number == 1 else "Next")
        answer_first_question(projector)
        settle(projector)
        expect(projector.get_by_text(f"{number} of {total_questions()} check-yourself questions answered."))\
            .to_be_visible()
        onward = (f"Next: {PATH[number].title}" if number < len(PATH) else "The end of the path: back to Home")
        link = projector.get_by_role("link", name=onward)
        assert "answered=" in link.get_attribute("href")  # the place travels in the link
        link.click()
        if number < len(PATH):  # the click taken (the address is the next lesson's), apart from its page drawn
            expect(projector).to_have_url(re.compile(rf"/{PATH[number].url_path}\?"), timeout=240_000)
    settle(projector)
    expect(projector.get_by_text(f"{len(PATH)} of {total_questions()} check-yourself questions answered."))\
        .to_be_visible(timeout=120_000)


def opened_at_its_top(tab, heading: str, name: str) -> None:
    """The page titled ``heading``, drawn after a click on the link ``name``, opened at its top: its title on screen,
    not scrolled (issue 29 point 4: Batches' Next opened Masked LM at its bottom, its own Next link under the
    pointer)."""
    title = tab.locator("[data-testid='stMain'] h1", has_text=heading)  # the page left behind keeps its own a moment
    expect(title).to_be_visible(timeout=120_000)
    settle(tab)
    assert_no_error(tab)
    expect(title).to_be_in_viewport()
    scrolled = tab.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollTop")
    assert scrolled == 0, f"{name!r} opened {heading!r} {scrolled:.0f} px down its page, not at its top"


def follow(tab, name: str, heading: str) -> None:
    """Click the link ``name`` (at the foot of a page: the click scrolls down to it, as a learner does) and check
    that the page titled ``heading`` opened at its top."""
    tab.get_by_role("link", name=name).click()
    opened_at_its_top(tab, heading, name)


def test_every_previous_link_and_the_ends_link_home_land_at_the_top_of_their_page(projector, server, bundled):
    """Every Previous back to the first lesson, and the end's link Home. Home's start link and every Next are
    checked the same way on the path's own walk (test_the_path_from_home_through_every_page): each lesson is
    visited once for both."""
    projector.goto(f"{server}/{PATH[-1].url_path}")
    settle(projector)
    for lesson in PATH[-2::-1]:
        follow(projector, f"Previous: {lesson.title}", lesson.heading)
    projector.goto(f"{server}/{PATH[-1].url_path}")
    settle(projector)
    follow(projector, "The end of the path: back to Home", HOME_TITLE)


def test_the_sidebar_lists_every_lesson_without_a_view_more_button(projector, server):
    """With more than twelve pages Streamlit folds the navigation after ten behind "View N more" unless told not
    to: a class would not see the last lessons of the path (nor the Glossary) in the sidebar."""
    projector.goto(server)
    settle(projector)
    nav = projector.locator("[data-testid='stSidebarNav']")
    for title in ["Home", *(lesson.title for lesson in PATH), "Glossary"]:
        expect(nav.get_by_role("link", name=title, exact=True)).to_be_visible()
    expect(nav.get_by_text(re.compile(r"^View \d+ more$"))).to_have_count(0)
