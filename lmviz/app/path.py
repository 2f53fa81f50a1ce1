"""The lesson path on the page: where a page is on it, the previous / next links that carry the
learner's progress, and the check-yourself questions with their verdicts."""

from __future__ import annotations

import json
import re

import streamlit as st

from lmviz.app import live
from lmviz.app.chrome import (
    CHECK_YOURSELF,
    LESSON_FOOTER,
    NEXT_LESSON,
    numbers_hidden,
    present_params,
    run_script,
    terms_linked,
)
from lmviz.core.text import escape_markdown
from lmviz.course import quiz, registry

ANSWERED_KEY = "answered"  # session state: the "step/key" of every question answered right or revealed
# session state: the Chat page's question, its two answers, system message and DPO slider, which RL fine-tuning's
# reward-model section scores again (a widget's own state is dropped once its page is left)
CHAT_PAIR = "chat-pair"


def answered() -> set[str]:
    """This session's progress, with what a link brought (?answered=) added to it."""
    progress = st.session_state.setdefault(ANSWERED_KEY, set())
    progress |= registry.read_progress(st.query_params.get(registry.ANSWERED_PARAM))
    return progress


def lesson_header(lesson: registry.Lesson) -> None:
    """The top of a lesson's page: the next lesson's link for the keyboard, where it is on the path and what it
    teaches, then its title."""
    with st.container(key=NEXT_LESSON):  # named apart from the footer's, for a screen reader's list of links
        next_link(lesson, carried_params(answered()), "Next lesson", "Back to Home: the end of the path")
    number = registry.PATH.index(lesson) + 1
    st.caption(terms_linked(f"Lesson {number} of {len(registry.PATH)}. You will learn {lesson.learn}."))
    st.title(lesson.heading)


# Streamlit keeps the main area's scroll offset when the page changes (it has never reset it: streamlit#3201). A
# new page landed at its top only when the old page had been cleared a frame before the new one drew; when both
# came in one frame (a quick page, or a cached one) it opened at the old offset, clamped to its own length: at its
# bottom, with its Next link under the pointer. This script scrolls to the top when the page differs from the one
# this tab showed last; a rerun of the same page keeps the learner's place (its text is the same, so it does not
# run again), and a page opened afresh (a reload, a glossary link's #entry in a new tab) is left to the browser.
TOP_OF_NEW_PAGE = """const page = {page}, before = window.lmvizPage;
window.lmvizPage = page;
if (before !== undefined && before !== page) document.querySelector('[data-testid="stMain"]')?.scrollTo(0, 0);"""


def land_at_top(page) -> None:
    """Each page switch lands at the new page's top: a link at the bottom of one page (Next, Previous) or in the
    sidebar opens the next at its title. Called first in every run, before anything is drawn in the main area."""
    run_script("lmviz-page-top", TOP_OF_NEW_PAGE.format(page=json.dumps(page.url_path)))


def carried_params(done: set[str]) -> dict[str, str] | None:
    """What a link to another lesson carries: progress and presentation mode, so that a bookmarked or reloaded
    page keeps both."""
    code = registry.progress_code(done)
    return {**({registry.ANSWERED_PARAM: code} if code else {}), **present_params()} or None


def link_to_lesson(url_path: str, label: str, where=st) -> None:
    """A link from one lesson to another (the lesson of ``url_path``), carrying the learner's place."""
    where.page_link(registry.find(url_path).page, label=label, icon=":material/link:",
                    query_params=carried_params(answered()))


def lesson_footer(lesson: registry.Lesson) -> None:
    """At the end of the page: previous / next, carrying the learner's progress in the link."""
    done = answered()
    carried = carried_params(done)
    earlier = registry.neighbours(lesson)[0]
    with st.container(key=LESSON_FOOTER):
        st.divider()
        left, right = st.columns(2)
        if earlier:
            left.page_link(earlier.page, label=f"Previous: {earlier.title}", icon=":material/arrow_back:",
                           query_params=carried)
        next_link(lesson, carried, "Next", "The end of the path: back to Home", right)
        st.caption(progress_sentence(done) + " The links above keep your place: bookmark one to come back to it.")


def next_link(lesson: registry.Lesson, carried: dict[str, str] | None, next_words: str, end_words: str,
              where=st) -> None:
    """The link to the lesson after ``lesson`` ("``next_words``: its title"), or at the end of the path to Home."""
    later = registry.neighbours(lesson)[1]
    if later:
        where.page_link(later.page, label=f"{next_words}: {later.title}", icon=":material/arrow_forward:",
                        query_params=carried)
    else:
        where.page_link("app_pages/home.py", label=end_words, icon=":material/home:", query_params=carried)


def progress_sentence(done: set[str]) -> str:
    count = len(done & registry.all_keys())
    return f"{count} of {registry.total_questions()} check-yourself questions answered."


def is_answered(step_name: str, question_key: str) -> bool:
    return f"{step_name}/{question_key}" in answered()


def check_yourself(step_name: str, questions: list[quiz.Question], heading: str = "Check yourself") -> None:
    """The page's questions, each in a form of its own: Check says right, or gives a hint;
    Show the answer reveals it (for a teacher asking the room, too). While this session runs a live class, each
    has "Ask the room" too, and the question the room is asked has its answers under it (lmviz.app.live)."""
    lesson = registry.find(step_name)
    # a key of its own for each heading: Your sentence asks its prediction apart from its other questions
    slug = re.sub(r"\W+", "-", heading.lower())
    with st.container(key=f"{CHECK_YOURSELF}-{slug}"):
        st.subheader(heading)
        st.caption("Questions made from the numbers on this page as it is now: change the input and they change. "
                   + quiz.tolerance_rule(questions))
        room = live.teacher_room()
        asked_key = live.asked_key(room, lesson.url_path) if room else None
        for question in questions:
            _ask(lesson.key(question.key), question, (room, lesson.url_path) if room else None)
            if question.key == asked_key:
                live.asked_view(room)


def _ask(key: str, question: quiz.Question, room: tuple[str, str] | None = None) -> None:
    """One question's form; ``room``: (the code of the class this session runs, the lesson's url path)."""
    # What was last asked of this question ("check" with the answer given, or "reveal") is kept, so
    # that its verdict stays on screen through other reruns, recomputed from the page's numbers now.
    last = f"quiz-last-{key}"
    with st.form(f"quiz-{key}"):
        st.text(question.ask)
        if numbers_hidden():  # the working above is folded: the numbers the question needs come with it
            live.question_table(question)
        if question.choices:
            given = st.radio("Your answer", question.choices, index=None, key=f"quiz-answer-{key}",
                             format_func=escape_markdown)
        else:
            given = st.text_input("Your answer (a number)", key=f"quiz-answer-{key}")
        left, right, *beside = st.columns(3 if room else 2)
        pressed = left.form_submit_button("Check"), right.form_submit_button("Show the answer")
        if room:
            live.ask_button(*room, question, beside[0])
        if pressed[0]:
            st.session_state[last] = ("check", given)
        if pressed[1]:
            st.session_state[last] = ("reveal", given)
        action, asked_with = st.session_state.get(last, (None, None))
        if action == "reveal":
            answered().add(key)
            st.info(escape_markdown(f"The answer: {question.shown_answer}. {question.reason}"),
                    icon=":material/visibility:")
        elif action == "check" and asked_with == given:
            _show_verdict(key, quiz.check(question, given))
        if any(pressed):
            _bring_into_view()
    if room:
        live.said_problem()


# What a button just said is brought on screen (the nearest edge, only if it is not already in view): a page
# that grows above the form while it reruns (Train's chart) can otherwise push the verdict below the screen's
# edge, under the button the learner pressed. Tried again as late layout settles; the nonce makes each press's
# script new, so that Streamlit runs it again.
INTO_VIEW = """const bring = () => document.getElementById({marker_json})?.closest('[data-testid="stForm"]')
  ?.querySelector('[data-testid^="stAlertContent"]')?.scrollIntoView({{block: "nearest"}});
[0, 150, 500, 1200].forEach((ms) => setTimeout(bring, ms));"""


def _bring_into_view() -> None:
    presses = st.session_state["quiz-presses"] = st.session_state.get("quiz-presses", 0) + 1
    marker = f"lmviz-into-view-{presses}"
    run_script("lmviz-into-view", INTO_VIEW.format(marker_json=json.dumps(marker)), element_id=marker)


def _show_verdict(key: str, verdict: quiz.Verdict) -> None:
    """Right, wrong or not an answer: each with its own word and icon, not only its colour."""
    message = escape_markdown(verdict.message)
    if verdict.right:
        answered().add(key)
        st.success(message, icon=":material/check_circle:")
    elif verdict.right is None:
        st.warning(message, icon=":material/edit:")
    else:
        st.error(message, icon=":material/close:")
