"""The live class on screen: the teacher's room (its code, QR code and phones), the "Ask the room" button beside a
check-yourself question, the projector's view of the answers, and the phone's join page.

Streamlit has no public way to push to another session (streamlit#2838). The projector, one browser, polls the
store with one top-level fragment a page that runs every POLL_S seconds (nested fragments that run on a timer
misbehave, streamlit#16708), and every poll reads the database afresh, never a cached copy. The phones, a room of
them, do not poll: a watcher reads every watched room in one query and runs a phone's fragment again only when
its room changes (lmviz.app.live_push). Who may open and run a room is decided in lmviz.app.live_access. The
store itself (lmviz.live.store) is one per process, shared by every session.

Students' sentences: a browser that joined a class sends its sentence, with the loss the model gave it, from Your
sentence or from the join page; the projector shows the room's numbers at once, and a sentence's text only once the
teacher approves it, from a queue kept off the projected view.

Torch-free, as the join page needs: a phone's page must load in a moment, whatever the server is doing with its
models. Plotly and the chart are imported only where a chart is drawn, and the model that scores a sentence typed on
the join page only when one is sent."""

from __future__ import annotations

import html
import ipaddress
import math
import os
import socket
import time
from urllib.parse import urlencode

import streamlit as st

from lmviz.app import live_access as access
from lmviz.app import live_push
from lmviz.app.chrome import PageStopped, chart_font_px, hide_numbers, numbers_hidden, presenting, text_table
from lmviz.app.garbage import collect_after_run
from lmviz.app.live_access import OFF, PUBLIC_URL_VARIABLE, TEACHING_PARAM, live_on, opening_refusal
from lmviz.app.problems import show_problem
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown, quotable
from lmviz.course import quiz, registry
from lmviz.live import sweeper
from lmviz.live.codes import CODE_LENGTH, LiveProblem, WrongCode, normalise_code
from lmviz.live.store import (
    IDLE_HOURS,
    MAX_SENTENCE,
    MIN_SHOWN,
    Aggregate,
    Asked,
    Room,
    RoomClosed,
    Sentence,
    SentenceNumbers,
    Store,
    Surprise,
    check_sentence,
    store_url,
)

# How often the projector reads the room (the phones are told: lmviz.app.live_push): an answer shows on the
# projector within it. 1 s, not 2: tap to count p95 3.5 s at 2 s with 200 phones (benchmarks/live_phones.py)
POLL_S = 1
NOBODY_AFTER_S = 60  # a room with no phone after this long gets the sentence on client isolation
ROOM_PARAM, TOKEN_PARAM = "room", "p"  # in a phone's links: a room's code, the phone's token
JOIN_PATH = "join"  # the join page's url path (app.py)
ROOM_KEY = "live-room"  # session state: the code of the room this (the teacher's) session runs
PHONE_ROOM, PHONE_TOKEN = "live-phone-room", "live-phone-token"  # session state: the phone's room and its token
LINK_TRIED = "live-link-tried"  # session state: the join link's code has been tried (its sentence said once)
QUESTION_VIEW = "live-question"  # the container of a question's answers (CSS class st-key-live-question)
PROBLEM = "live-problem"  # session state: a sentence a button's callback left for the run it starts
NUMBERS_CHANGED = "live-numbers-changed"  # session state: a lesson page's numbers were hidden or shown by a button
SEND_SENTENCE = "Send my sentence to the room"
SENTENCE_BOX = "live-sentence"  # the join page's box for a sentence
SENTENCE_PENDING = "live-sentence-pending"  # session state: the join page's sentence, to score and send in this run
SEND_ASKED = "live-send-asked"  # session state: the text in Your sentence's box when Send was clicked
SENTENCE_SAID = "live-sentence-said"  # session state: (kind, sentence) of the last sentence sent or refused
SENTENCE_SENT = "live-sentence-sent"  # session state: the last sentence this browser sent from the join page
SENTENCES_VIEW = "live-sentences"  # the room's sentences on the teacher's page (CSS class st-key-live-sentences)
QUEUE = "live-sentence-queue"  # the approval queue's expander
QUEUE_LABEL = "Sentences waiting for your approval (not for the projector)"
TEACHER_INTRO = (
    "Open a room, and the class joins it on their phones with the code or the QR code: nobody types a name. Then "
    "press **Ask the room** beside any check-yourself question on a lesson's page: every phone shows that question, "
    "frozen with the numbers on the screen, and the answers are counted here. They stay hidden until you press "
    f"**Reveal** (a live chart sways the vote), and a vote of fewer than {MIN_SHOWN} answers shows its count only. "
    "**Ask again** opens a second vote on the same question, for after the room has argued it out in pairs (peer "
    "instruction); **Close** ends the answering. The room can also send you sentences, from Your sentence or from "
    "the join page: their numbers show here at once, and a sentence's text only once you approve it.")


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    return Store(url)


def live_store() -> Store:
    """The process's one store for the database LMVIZ_LIVE_DB names (SQLite in lmviz's cache folder by default).
    Raises StoreUnavailable, a LiveProblem whose sentence names the setting to change."""
    return _store(store_url())


def sweep_in_background() -> None:
    """The live class's sweep on its own schedule in this serving process (lmviz.live.sweeper), started at the
    first page any browser opens, whether or not a room is ever opened; not under AppTest, which serves nothing."""
    if live_on() and live_push.serving():
        sweeper.sweep_in_background(live_store)


# The teacher's room (who may open and run one: lmviz.app.live_access)

def teacher_room() -> str | None:
    """The code of the open room this session runs, if any, kept in the page's link (?teaching=) so that a reload of
    any page, which starts a new session, finds it again: a new session adopts the link's room only if this
    browser holds the room's teacher secret (live_access.runs); the code alone grants nothing. A room that has
    ended (closed, or by the sweep) is forgotten. No database read when neither the session nor the link has a
    room, so that the lessons pay nothing for the live class."""
    code = st.query_params.get(TEACHING_PARAM) or st.session_state.get(ROOM_KEY)
    if not code or not live_on():
        return None
    try:
        store = live_store()
        room = store.room(code)
        adopted = st.session_state.get(ROOM_KEY) == code or (room is not None and access.runs(store, code))
    except LiveProblem:
        return None
    if room is None or not room.is_open or not adopted:
        st.session_state.pop(ROOM_KEY, None)
        if TEACHING_PARAM in st.query_params:
            del st.query_params[TEACHING_PARAM]
        return None
    st.session_state[ROOM_KEY] = room.code
    if st.query_params.get(TEACHING_PARAM) != room.code:
        st.query_params[TEACHING_PARAM] = room.code
    access.remember_teacher(room.code)
    return room.code


# The join link and its QR code

def network_address() -> str | None:
    """This computer's address on its network, as the phones in the room reach it: the source address of a UDP
    socket "connected" to a non-routable address. Connecting a UDP socket only picks the route; nothing is sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.254.254.254", 1))
            address = probe.getsockname()[0]
    except OSError:  # no network at all
        return None
    return None if ipaddress.ip_address(address).is_loopback or address == "0.0.0.0" else address


def public_base_url() -> str | None:
    """The app's address for the phones: LMVIZ_PUBLIC_URL, else this computer's network address and the server's
    port, never localhost (what the teacher's own browser usually shows, and a phone cannot reach)."""
    configured = os.environ.get(PUBLIC_URL_VARIABLE, "").strip().rstrip("/")
    if configured:
        return configured
    address = network_address()
    if address is None:
        return None
    base = (st.get_option("server.baseUrlPath") or "").strip("/")
    return f"http://{address}:{st.get_option('server.port')}" + (f"/{base}" if base else "")


def join_link(code: str) -> str | None:
    base = public_base_url()
    return f"{base}/{JOIN_PATH}?{urlencode({ROOM_PARAM: code})}" if base else None


def listening_on_loopback_only() -> bool:
    address = (st.get_option("server.address") or "").strip("[]")
    try:
        return address == "localhost" or ipaddress.ip_address(address).is_loopback
    except ValueError:  # unset: every interface
        return False


def qr_svg(link: str) -> str:
    """The link as a QR code: an SVG image as a data URI, without a size of its own (the page sizes it), black on
    white in either theme. An image, not inline SVG, which Streamlit's st.html strips."""
    import segno

    # M: up to 15 % of it may be unreadable (a projector's glare, a head in the way) and it still scans
    return segno.make(link, error="m", micro=False).svg_data_uri(dark="#000000", light="#ffffff", omitsize=True)


# The big code, and the QR code as high as the projector allows: scanned and read from the back of a room at 1280×720.
ROOM_CSS = """<style>
.lmviz-code { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-weight: 700; letter-spacing: 0.12em;
  line-height: 1.1; font-size: 5.5rem; }
.lmviz-code.small { font-size: 2.5rem; }
.lmviz-qr { width: min(100%, 58vh); aspect-ratio: 1; }
.lmviz-qr.small { width: min(100%, 24vh); }
.lmviz-qr img { width: 100%; height: 100%; display: block; image-rendering: pixelated; }
</style>"""


def _room_code(code: str, small: bool) -> None:
    st.html(f'<div class="lmviz-code{" small" if small else ""}" aria-label="the class code, '
            f'{" ".join(code)}">{html.escape(code)}</div>')


def _qr(link: str, small: bool) -> None:
    st.html(f'<div class="lmviz-qr{" small" if small else ""}"><img src="{html.escape(qr_svg(link))}" '
            f'alt="QR code of {html.escape(link)}"></div>')


# The teacher's page

def teacher_page() -> None:
    """The Live class page: who may use it, the room's opening and ending, and its live view."""
    if presenting():  # the teacher says it; the projector's first screen is the room's code
        with st.expander("About the live class"):
            st.markdown(TEACHER_INTRO)
    else:
        st.markdown(TEACHER_INTRO)
    if not live_on():
        show_problem(OFF, kind="info")
        return
    try:
        store = live_store()
        code = teacher_room()
    except LiveProblem as problem:
        show_problem(problem)
        return
    if code is None:
        refusal = opening_refusal()
        if refusal:
            show_problem(refusal, kind="warning")
            return
        st.button("Open a room", type="primary", icon=":material/meeting_room:", on_click=_open_room)
        said_problem()
        return
    room_view(code)
    st.download_button("Download the results (CSV)", store.aggregates_csv(code), file_name=f"lmviz-class-{code}.csv",
                       mime="text/csv", icon=":material/download:", on_click="ignore",
                       help="Per question and vote: each answer's count, how many were right, and the share right.")
    st.button("End the class", icon=":material/logout:", on_click=_end_room, args=(code,),
              help="Closes the room: the phones can no longer answer, and the students' sentences are deleted at "
                   f"once. Its votes' results are kept for {store.keep_hours:g} hours, then deleted. A room nobody "
                   f"uses for {IDLE_HOURS:g} hours is closed the same way.")
    _second_window(code)


def _second_window(code: str) -> None:
    """The link that makes another device this room's teacher too: it carries the room's secret, so it is folded
    under a label that says it is not for the projector, and leaves that device's address bar once opened."""
    base = public_base_url()
    with st.expander("Run this class from another device too (not for the projector)",
                     icon=":material/visibility_off:"):
        if base is None:
            st.caption("lmviz found no address other devices reach it at: set LMVIZ_PUBLIC_URL.")
            return
        secret = access.teacher_secret(code) or ""
        st.caption("Open this link on a presenter laptop or your own phone: it gets this room's controls. Whoever "
                   "has it runs the class, so do not show it to the room. The room's code alone gives nobody "
                   "a control.")
        st.code(f"{base}/live-class?{urlencode({TEACHING_PARAM: code, access.SECRET_PARAM: secret})}",
                language=None, wrap_lines=True)


def _open_room() -> None:
    if opening_refusal() is not None:  # a click on the button of a page drawn before the key was refused
        return
    try:
        secret = access.new_teacher_secret()
        code = live_store().open_room(teacher_secret=secret)
        access.hold_secret(code, secret)
        st.session_state[ROOM_KEY] = code
    except LiveProblem as problem:
        st.session_state[PROBLEM] = str(problem)


def _end_room(code: str) -> None:
    live_store().close_room(code)
    st.session_state.pop(ROOM_KEY, None)
    if TEACHING_PARAM in st.query_params:
        del st.query_params[TEACHING_PARAM]
    hide_numbers(False)


def said_problem() -> None:
    """The sentence a live-class button's callback left for this run (a callback runs before the page is drawn)."""
    problem = st.session_state.pop(PROBLEM, None)
    if problem:
        show_problem(problem)


@st.fragment(run_every=POLL_S)
def room_view(code: str) -> None:
    """The room live. Until a question is asked: its code and QR code large, the phones in it, how to join. Then
    the question and its answers take the screen, under one line with the code, and the QR code is small at the
    bottom, for the latecomers."""
    store = live_store()
    room, asked = store.room(code), store.current(code)
    if room is None or not room.is_open:
        show_problem(f"The class {code} has ended: open a new room.")
        return
    st.html(ROOM_CSS)
    link = join_link(code)
    if asked is None:
        left, right = st.columns([3, 2])
        with left:
            _room_code(code, small=False)
            _joining(room, link)
        with right:
            if link:
                _qr(link, small=False)
        st.info("No question asked yet: press “Ask the room” beside a check-yourself question on a lesson's page.",
                icon=":material/help:")
    else:
        left, right = st.columns([1, 3], vertical_alignment="center")
        with left:
            _room_code(code, small=True)
        right.markdown(f"{_phones(room)} joined" + (f": `{link}`" if link else "."))  # a link has no backtick
        st.markdown(f"**Question {asked.number}**, from {escape_markdown(lesson_title(asked.lesson))}:")
        st.text(asked.question.ask)
        if asked.question.table:  # the lesson's page, with these numbers, is not on screen here
            with st.expander("The numbers on the lesson's page that it needs"):
                question_table(asked.question)
        question_view(store, asked, room, on_lesson_page=False)
        if link:
            _qr(link, small=True)
    sentences_view(store, code)


def _phones(room: Room) -> str:
    return "1 phone has" if room.participants == 1 else f"{room.participants} phones have"


def _joining(room: Room, link: str | None) -> None:
    """How to join, how many have, and what to do when nobody can."""
    st.markdown(f"**{_phones(room)} joined.**")
    if link is None:
        show_problem(f"lmviz found no network address on this computer: connect it to the classroom's network, or "
                     f"set {PUBLIC_URL_VARIABLE} to the address the phones reach lmviz at.")
        return
    st.markdown(f"Scan the QR code, or open `{link}` and the code is filled in.")
    if listening_on_loopback_only() and not os.environ.get(PUBLIC_URL_VARIABLE):
        show_problem("This server listens on this computer only, so phones cannot reach it: start lmviz with "
                     "--server.address 0.0.0.0 (scripts/serve does), or set LMVIZ_PUBLIC_URL to an address they can.")
    st.caption("Test it from your own phone first: if the link does not open there, the phones cannot reach this "
               "computer.")
    if room.participants == 0 and time.time() - room.opened_at >= NOBODY_AFTER_S:
        show_problem("Nobody has joined for a minute: school Wi-Fi often keeps devices from reaching one another "
                     "(client isolation), so use a hosted lmviz (set LMVIZ_PUBLIC_URL to its address) or connect this "
                     "computer and the phones to your phone's hotspot.", kind="info", icon=":material/wifi_off:")


def lesson_title(url_path: str) -> str:
    try:
        return registry.find(url_path).title
    except KeyError:  # a lesson renamed since the question was asked
        return url_path


# The room's sentences, on the teacher's page: numbers first, a text only once approved

def sentences_view(store: Store, code: str) -> None:
    """Nothing until a sentence is sent. Then, for the projector, the numbers of every sentence sent (no text),
    the most surprising tokens of the approved ones and the approved ones ranked by loss; and, collapsed under a
    label that says it is not for the projector, the sentences waiting for approval, each with Approve."""
    numbers = store.sentence_numbers(code)
    if numbers.sent == 0:
        return
    every = store.sentences(code, approved_only=False)
    with st.container(key=SENTENCES_VIEW):
        st.subheader("The room's sentences")
        _sentence_numbers(numbers)
        _surprising(store.surprising_tokens(code))
        _approved([s for s in every if s.approved])
        _queue([s for s in every if not s.approved])


def _sentence_numbers(numbers: SentenceNumbers) -> None:
    sent = "1 sentence sent" if numbers.sent == 1 else f"{numbers.sent} sentences sent"
    if not numbers.shown:
        st.markdown(f"**{sent}.** The mean loss and its spread show from {MIN_SHOWN} sentences on, so that no "
                    "number can point at one student.")
        return
    columns = st.columns(5)  # the range in two: as one metric it was cut at 1280 px
    columns[0].metric("Sentences sent", numbers.sent)
    columns[1].metric("Mean loss per token", fmt(numbers.mean))
    columns[2].metric("Standard deviation", fmt(numbers.spread))
    columns[3].metric("Lowest loss", fmt(numbers.low))
    columns[4].metric("Highest loss", fmt(numbers.high))
    over = "" if numbers.scored == numbers.sent else f" ({numbers.scored} of them have a loss)"
    st.caption(f"Each sentence's loss is the mean -log p of its tokens. The mean, the standard deviation (of these "
               f"sentences: divided by their number) and the range are over every sentence sent{over}, approved or "
               "not, each counted once whatever its length.")


def _surprising(tokens: list[Surprise]) -> None:
    import pandas as pd

    st.markdown("**The tokens the room's sentences found most surprising**")
    if not tokens:
        st.caption("From the sentences you approve only, since a token is a piece of its sentence's text: none "
                   "approved yet.")
        return
    text_table(pd.DataFrame({"token": [quotable(t.token) for t in tokens], "-log p": [fmt(t.loss) for t in tokens],
                             "sentences": [t.sentences for t in tokens]}), hide_index=True)
    st.caption("From the approved sentences: each token with the highest -log p it had in one of them (␣ is a "
               "space that belongs to the token), and in how many of them it came.")


def ranked(approved: list[Sentence]) -> list[Sentence]:
    """The approved sentences, the highest loss first (a sentence without a loss last), ranked among themselves
    only: a board of every sentence sent would reward gibberish and insults."""
    return sorted(approved, key=lambda s: (s.loss is None, -(s.loss or 0.0), s.submitted_at, s.id))


def _approved(approved: list[Sentence]) -> None:
    """Each approved sentence as the text it is: Markdown escaped (text_table), invisible characters such as a
    right-to-left override shown, not obeyed (quotable)."""
    import pandas as pd

    st.markdown("**Approved sentences, the most surprising to the model first**")
    if not approved:
        st.caption("A sentence's text shows here once you approve it.")
        return
    shown = ranked(approved)
    text_table(pd.DataFrame({"rank": range(1, len(shown) + 1), "sentence": [quotable(s.sentence) for s in shown],
                             "loss per token": ["–" if s.loss is None else fmt(s.loss) for s in shown]}),
               hide_index=True)


def _queue(pending: list[Sentence]) -> None:
    with st.expander(QUEUE_LABEL, key=QUEUE, icon=":material/visibility_off:"):
        if not pending:
            st.caption("None waiting.")
            return
        st.caption("Approve shows a sentence's text on this page, ranked among the approved ones; one left here "
                   "counts in the numbers only; Remove deletes it, from the numbers too.")
        for sentence in pending:
            text, approve, remove = st.columns([5, 1, 1], vertical_alignment="center")
            text.text(quotable(sentence.sentence))  # as text: no Markdown, no right-to-left override
            text.caption("loss per token: " + ("–" if sentence.loss is None else fmt(sentence.loss)))
            approve.button("Approve", key=f"live-approve-{sentence.id}", on_click=_approve, args=(sentence.id,))
            remove.button("Remove", key=f"live-remove-{sentence.id}", on_click=_remove, args=(sentence.id,))


def _approve(sentence_id: int) -> None:
    live_store().approve_sentence(sentence_id)


def _remove(sentence_id: int) -> None:
    live_store().remove_sentence(sentence_id)


# The question asked: its answers and the teacher's buttons, on the Live class page and under the question asked

def asked_key(code: str, lesson: str) -> str | None:
    """The key of the room's question now, when it is one of ``lesson``'s (its answers show under it there)."""
    asked = live_store().current(code)
    return asked.question.key if asked is not None and asked.lesson == lesson else None


@st.fragment(run_every=POLL_S)
def asked_view(code: str) -> None:
    """Under the question asked on a lesson's page: its answers, live, and the teacher's buttons."""
    store = live_store()
    room, asked = store.room(code), store.current(code)
    if room is None or asked is None or not room.is_open:
        return
    with st.container(border=True):
        st.markdown(f"**Asked in the class {code}** (question {asked.number}).")
        question_view(store, asked, room, on_lesson_page=True)


def question_view(store: Store, asked: Asked, room: Room, on_lesson_page: bool) -> None:
    """How many answered; once revealed, how they answered (both votes side by side after a second vote); the
    buttons Reveal, Ask again and Close."""
    with st.container(key=QUESTION_VIEW):
        _question_view(store, asked, room, on_lesson_page)


def _question_view(store: Store, asked: Asked, room: Room, on_lesson_page: bool) -> None:
    first = _first_vote(store, asked)
    results = [r for r in (store.aggregate(first.id) if first else None, store.aggregate(asked.id)) if r]
    vote = "second vote" if asked.vote == 2 else "first vote"
    state = "open, the phones can answer" if asked.is_open else "closed"
    answered = results[-1].answered
    st.subheader(f"{answered} of {room.participants} answered")
    st.caption(f"Question {asked.number}, {vote}: {state}.")
    if not asked.revealed:
        st.caption("The answers stay hidden until you press Reveal: a chart that moves while the room votes sways "
                   "the vote.")
    elif not results[-1].shown:
        st.markdown(f"{_answers(answered)} so far: the chart shows from {MIN_SHOWN} answers on, so that no bar can "
                    "point at one student.")
    else:
        # Peer instruction: the room sees how it voted, then talks and votes again; which answer is right is shown
        # only once the vote is closed, or the second vote would follow the mark, not the argument.
        shown, closed = [r for r in results if r.shown], not asked.is_open
        _results_chart(shown, mark_answer=closed)
        if closed:
            st.markdown("**Right: " + ", then ".join(f"{_percent(r.share_right)} in {_vote_name(r.asked)}"
                                                       for r in shown) + ".**")
        else:
            st.caption("Which answer is right is shown once you Close the question: if the room is split, let "
                       "neighbours convince each other and Ask again first.")
    _teacher_buttons(asked, on_lesson_page)


def _first_vote(store: Store, asked: Asked) -> Asked | None:
    """The first vote of a question in its second vote."""
    if asked.vote != 2:
        return None
    return next((q for q in store.questions(asked.room) if q.number == asked.number and q.vote == 1), None)


def _answers(count: int) -> str:
    return "1 answer" if count == 1 else f"{count} answers"


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{round(100 * share)} %"


def _vote_name(asked: Asked) -> str:
    return "the second vote" if asked.vote == 2 else "the first vote"


def _results_chart(shown: list[Aggregate], mark_answer: bool) -> None:
    """The votes' bars; the right answer named in the title and marked under its bars only with ``mark_answer``."""
    from lmviz.figures.votes import Bar, vote_bars

    question = shown[-1].asked.question
    if question.choices:
        answers = list(question.choices)
    else:  # the typed numbers' bins of every vote shown, in increasing order
        answers = sorted({c.answer for r in shown for c in r.counts}, key=float)
    votes = [(_vote_name(r.asked).removeprefix("the ").capitalize(),
              [Bar(c.answer, c.count, c.right if mark_answer else 0) for c in r.counts]) for r in shown]
    title = "How the room answered"
    if mark_answer:
        title += (f" (the answer: {question.shown_answer}"
                  + ("" if question.choices or question.is_count else f", right within ±{question.tolerance:g}") + ")")
    right = {question.answer} if question.choices and mark_answer else set()
    st.plotly_chart(vote_bars(votes, answers, right, title, chart_font_px(), height=330 if presenting() else 300),
                    config={"displayModeBar": False})


def _teacher_buttons(asked: Asked, on_lesson_page: bool) -> None:
    """Each button's change is made in its callback, and then only the live panel runs again (a fragment's button),
    not the lesson page under it, which takes seconds on a busy server. On a lesson's page the whole page runs
    again where its pinned numbers must change: Ask again hides them, and Close shows them again."""
    buttons = st.columns(3)
    if not asked.revealed:
        buttons[0].button("Reveal", key=f"live-reveal-{asked.id}", icon=":material/bar_chart:",
                          on_click=_reveal, args=(asked.id,), help="Shows how the room answered, to the room.")
    if asked.vote == 1:
        buttons[1].button("Ask again", key=f"live-again-{asked.id}", icon=":material/replay:", on_click=_ask_again,
                          args=(asked.id, on_lesson_page),
                          help="A second vote on the same question, counted apart: after the room has talked it "
                               "over in pairs.")
    if asked.is_open:
        buttons[2].button("Close", key=f"live-close-{asked.id}", icon=":material/block:", on_click=_close,
                          args=(asked.id, on_lesson_page), help="Ends the answering; the page's numbers show again.")
    said_problem()
    if st.session_state.pop(NUMBERS_CHANGED, False):
        st.rerun()  # the lesson's page, with its numbers hidden or shown again


def _reveal(question_id: int) -> None:
    live_store().reveal(question_id)


def _ask_again(question_id: int, on_lesson_page: bool) -> None:
    try:
        live_store().ask_again(question_id)
    except LiveProblem as problem:
        st.session_state[PROBLEM] = str(problem)
    hide_numbers()
    st.session_state[NUMBERS_CHANGED] = on_lesson_page


def _close(question_id: int, on_lesson_page: bool) -> None:
    live_store().close_question(question_id)
    st.session_state[NUMBERS_CHANGED] = on_lesson_page and numbers_hidden()
    hide_numbers(False)


# "Ask the room", beside each check-yourself question (lmviz.app.path)

def ask_button(code: str, lesson: str, question: quiz.Question, where=st) -> None:
    """A form's button that freezes ``question`` as asked in the room ``code``, with the page's inputs (its link),
    and hides the page's numbers while it is open."""
    where.form_submit_button("Ask the room", on_click=_ask_room, args=(code, lesson, question),
                             icon=":material/groups:",
                             help="Every phone in the class shows this question, with the numbers on this screen now.")


def _ask_room(code: str, lesson: str, question: quiz.Question) -> None:
    try:
        inputs = {name: value for name, value in st.query_params.to_dict().items() if name != TEACHING_PARAM}
        live_store().ask(code, lesson, question, inputs)
    except LiveProblem as problem:
        st.session_state[PROBLEM] = str(problem)
        return
    hide_numbers()


# A student's sentence: from Your sentence (scored by the page) or typed on the join page (scored here)

def phone_session() -> tuple[str, str] | None:
    """(code, token) of the class this browser joined on the join page, in this session; None when it joined none
    or the live class is off. No database read: the lessons pay nothing for it."""
    code, token = st.session_state.get(PHONE_ROOM), st.session_state.get(PHONE_TOKEN)
    return (code, token) if code and token and live_on() else None


def send_sentence_button(sentence: str, loss: float, tokens: list[tuple[str, float]], box: str) -> None:
    """On Your sentence, in a browser that joined a class: "Send my sentence to the room", with the page's text,
    the loss the page shows (its own scorer's) and each predicted token's -log p. Nothing for anyone else.

    The click only notes the text in ``box`` (the key of the text box the sentence is read from); this run, which
    has scored that text, sends it. A phone that types and taps Send at once taps the button drawn for the text
    before: sent from the click, that text and its loss went to the room instead of the one typed."""
    joined = phone_session()
    if joined is None:
        said_sentence()  # the class ended as this browser sent: said, and the button gone
        return
    code, token = joined
    with st.container(border=True, key="live-send-sentence"):
        st.button(SEND_SENTENCE, icon=":material/send:", on_click=_ask_to_send, args=(box,))
        st.caption(f"To the class {code}: its loss joins the room's numbers at once; your teacher reads its text "
                   f"first, on their own screen, and it shows on the projector only if they approve it. It is "
                   f"deleted when the class ends (at most {MAX_SENTENCE} characters).")
        if st.session_state.pop(SEND_ASKED, None) == sentence:
            _send_sentence(code, token, sentence, loss, tokens)
            if phone_session() is None:  # the class has ended: the button goes with the sentence that says so
                st.rerun()
        said_sentence()


def _ask_to_send(box: str) -> None:
    st.session_state[SEND_ASKED] = st.session_state.get(box)


def _send_sentence(code: str, token: str, sentence: str, loss: float | None,
                   tokens: list[tuple[str, float]]) -> bool:
    """Keep the sentence in the room, and leave the sentence that says so, or why not, for said_sentence."""
    try:
        live_store().add_sentence(code, token, sentence, loss if loss is not None and math.isfinite(loss) else None,
                                  tokens=[(label, nll) for label, nll in tokens if math.isfinite(nll)])
    except (RoomClosed, WrongCode) as problem:  # the class has ended: this browser is in no class now
        for key in (PHONE_ROOM, PHONE_TOKEN):
            st.session_state.pop(key, None)
        st.session_state[SENTENCE_SAID] = ("warning", str(problem))
        return False
    except LiveProblem as problem:
        st.session_state[SENTENCE_SAID] = ("warning", str(problem))
        return False
    shown = "" if loss is None or not math.isfinite(loss) else f", with its loss of {fmt(loss)} per token"
    st.session_state[SENTENCE_SAID] = ("success", f"Sent to the class {code}{shown}: its text shows on the "
                                                  "projector only if your teacher approves it.")
    return True


def said_sentence() -> None:
    """The sentence the last send left (refused, or sent), once."""
    said = st.session_state.pop(SENTENCE_SAID, None)
    if said is not None:
        kind, sentence = said
        show_problem(sentence, kind=kind, icon=":material/check:" if kind == "success" else None)


def sentence_form(code: str, token: str) -> None:
    """The join page's box for a sentence, under the question: scored by the model in the run its Send starts."""
    st.divider()
    with st.form("live-sentence-form"):
        # no max_chars: a box that cuts a paste leaves a phone with a blank box and no word why; check_sentence
        # says how long it is instead
        st.text_area(f"Your sentence (at most {MAX_SENTENCE} characters)", key=SENTENCE_BOX, height=100)
        st.form_submit_button(SEND_SENTENCE, icon=":material/send:", on_click=_take_sentence)
    st.caption("When your teacher asks for one: a language model reads it, and its loss joins the room's numbers. "
               "Your teacher reads its text first, on their own screen, and it shows on the projector only if they "
               "approve it. It is deleted when the class ends.")
    pending = st.session_state.pop(SENTENCE_PENDING, None)
    if pending is not None:
        with st.spinner("The model is reading your sentence…"):
            sent = _score_and_send(code, token, pending)
        collect_after_run()  # what the model's forward pass left in reference cycles (app.py collects on the lessons)
        if sent:
            st.session_state[SENTENCE_SENT] = sent
    said_sentence()
    # in this session, so that Your sentence has this phone's class and offers to send from there too
    sent = st.session_state.get(SENTENCE_SENT)
    st.page_link("app_pages/your_sentence.py", icon=":material/format_color_text:",
                 label="Each token's loss, on Your sentence" if sent else "Try sentences first on Your sentence",
                 query_params={"text": sent} if sent else None)


def _take_sentence() -> None:
    st.session_state[SENTENCE_PENDING] = st.session_state.get(SENTENCE_BOX, "")


def _score_and_send(code: str, token: str, typed: str) -> str | None:
    """The sentence as it was sent, or None; either way, the sentence that says so is left for said_sentence."""
    try:
        sentence = check_sentence(typed)  # refused before the model is asked
    except LiveProblem as problem:
        st.session_state[SENTENCE_SAID] = ("warning", str(problem))
        return None
    scored = score_sentence(sentence)
    if isinstance(scored, str):
        st.session_state[SENTENCE_SAID] = ("warning", scored)
        return None
    tokens = [(row.target_token, row.nll) for row in scored.rows]
    return sentence if _send_sentence(code, token, sentence, scored.loss, tokens) else None


def score_sentence(sentence: str):
    """The sentence scored as Your sentence scores it when opened without a link (the same shared model and
    CausalScorer, no start token, counted against this browser's fair share): its analysis, or the sentence that
    says why it could not be scored. The model is imported here, when a sentence is sent: the join page itself
    imports no torch."""
    from lmviz.app.choosers import scored_with_cpu_fallback, unchosen_scorer
    from lmviz.errors import LearnerError, NothingToScore

    try:
        _, result = scored_with_cpu_fallback(unchosen_scorer(), lambda scorer: scorer.analyse(sentence, False, 5))
    except PageStopped:  # no model could be loaded: causal_lm_or_fallback has said why
        return "Your sentence could not be scored, since no model could be loaded on this server: tell your teacher."
    except NothingToScore:  # Your sentence's own sentence names a box this page does not have
        return ("The model has nothing to predict in that, since it predicts each token from the ones before it: "
                "type a few words.")
    except LearnerError as problem:  # not enough memory, over the fair share
        return str(problem)
    return result


# The phone's page

PHONE_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"] {
  display: none; }
</style>"""


def phone_page() -> None:
    """The join page: the code (from the link, or typed), then the question asked, live."""
    st.html(PHONE_CSS)  # a phone sees this page alone: no lessons' navigation, no switches
    if not live_on():
        show_problem(OFF, kind="info")
        return
    try:
        store = live_store()
        joined = _joined(store)
    except LiveProblem as problem:
        show_problem(problem)
        return
    if joined is None:
        _join_form()
        return
    access.remember_phone(*joined)
    phone_view(*joined)
    sentence_form(*joined)


def _joined(store: Store) -> tuple[str, str] | None:
    """(code, token) of the room this phone is in: the session's, or the link's (?room=, and ?p= after a reload,
    which keeps the phone's token)."""
    code, token = st.session_state.get(PHONE_ROOM), st.session_state.get(PHONE_TOKEN)
    if code and token:
        return code, token
    linked = st.query_params.get(ROOM_PARAM)
    if linked and not st.session_state.get(LINK_TRIED):
        st.session_state[LINK_TRIED] = True
        try:
            return _join(store, linked, st.query_params.get(TOKEN_PARAM))
        except LiveProblem as problem:
            show_problem(problem)
    return None


def _join(store: Store, typed: str, token: str | None = None) -> tuple[str, str]:
    """Join the room, as the participant this browser already is there if it is one: the link's token (a reload),
    else its cookie's (a second tab, a second scan of the QR code)."""
    code = normalise_code(typed)
    token = store.join(code, token or access.remembered_token(code))
    st.session_state[PHONE_ROOM], st.session_state[PHONE_TOKEN] = code, token
    st.query_params.update({ROOM_PARAM: code, TOKEN_PARAM: token})  # a reload keeps this phone's place and answers
    return code, token


def _join_form() -> None:
    with st.form("live-join"):
        st.text_input(f"The class's code: the {CODE_LENGTH} letters and digits on the projector", key="live-code",
                      max_chars=20, autocomplete="off")
        st.form_submit_button("Join", type="primary", on_click=_join_typed)
    said_problem()


def _join_typed() -> None:
    try:
        _join(live_store(), st.session_state.get("live-code", ""))
    except LiveProblem as problem:
        st.session_state[PROBLEM] = str(problem)


def _forget_room() -> None:
    for key in (PHONE_ROOM, PHONE_TOKEN):
        st.session_state.pop(key, None)
    for param in (ROOM_PARAM, TOKEN_PARAM):
        if param in st.query_params:
            del st.query_params[param]


@st.fragment
def phone_view(code: str, token: str) -> None:
    """The question asked now, and this phone's answer to it. No timer: the page runs again when the teacher asks,
    closes or ends (lmviz.app.live_push), or when this phone sends (only this fragment)."""
    store = live_store()
    try:
        room, asked = store.room(code), store.current(code)
    except LiveProblem as problem:  # the database, for a moment: the watcher tells this phone again once it is back
        show_problem(problem)
        live_push.watch(live_store, code, None)
        return
    if room is None or not room.is_open:
        show_problem(f"The class {code} has ended: thank you. To join another, type its code.")
        live_push.forget()
        _forget_room()
        return
    live_push.watch(live_store, code, (True, None if asked is None else asked.id,
                                       None if asked is None else asked.is_open))
    st.caption(f"You are in the class {code}. Nobody sees who answered what.")
    if asked is None:
        st.info("The teacher's question will show here: keep this page open.", icon=":material/hourglass_top:")
        return
    st.markdown(f"**Question {asked.number}**" + (" (second vote: talk it over with your neighbours, then answer "
                                                   "again)" if asked.vote == 2 else ""))
    st.text(asked.question.ask)
    question_table(asked.question)
    said_problem()  # an answer refused (the question closed as it was sent, not a number) says why
    mine = store.my_answer(asked.id, token)
    if asked.is_open:
        _answer_form(asked, token, mine)
    else:
        _after_close(asked, mine)


def _after_close(asked: Asked, mine: str | None) -> None:
    """A closed question on the phone: this phone's answer, right or wrong, then the answer and its reason, as the
    lesson page's "Show the answer" gives them."""
    question = asked.question
    if mine is None:
        st.info("The teacher has closed this question, and this phone sent no answer to it.", icon=":material/lock:")
    elif quiz.check(question, mine).right:
        st.success(f"Closed. Your answer, {escape_markdown(_shown(asked, mine))}, is right.", icon=":material/check:")
    else:
        st.warning(f"Closed. Your answer, {escape_markdown(_shown(asked, mine))}, is not the right one.",
                   icon=":material/close:")
    st.info(escape_markdown(f"The answer: {question.shown_answer}. {question.reason}"), icon=":material/visibility:")


def question_table(question: quiz.Question) -> None:
    """The numbers of the lesson's page that a question needs, as text: a phone answers from them."""
    if question.table:
        import pandas as pd

        header, *rows = question.table
        text_table(pd.DataFrame(rows, columns=header), hide_index=True)


def _shown(asked: Asked, given: str) -> str:
    """An answer as the phone shows it: a choice as it is, a number as read (kept as Python writes a float)."""
    if asked.question.choices:
        return given
    value = float(given)
    return str(int(value)) if value.is_integer() else given


def _answer_form(asked: Asked, token: str, mine: str | None) -> None:
    question, key = asked.question, f"live-given-{asked.id}"
    if mine is not None and key not in st.session_state:  # a reload shows what this phone sent
        st.session_state[key] = mine if question.choices else _shown(asked, mine)
    # the container's key names the question in the page (CSS class st-key-live-asked-ID): a second vote's form is
    # another element than the first's, whatever the browser still shows of the one before
    with st.container(key=f"live-asked-{asked.id}"), st.form(f"live-answer-{asked.id}"):
        if question.choices:
            st.radio("Your answer", question.choices, index=None, key=key, format_func=escape_markdown)
        else:
            st.text_input("Your answer (a number)", key=key, autocomplete="off")
        st.form_submit_button("Send", type="primary", icon=":material/send:", on_click=_send,
                              args=(asked.id, token, key))
    if mine is not None:
        st.success("Sent — you can change it until the teacher closes the question.", icon=":material/check:")
        st.caption(f"Your answer: {escape_markdown(_shown(asked, mine))}")


def _send(question_id: int, token: str, key: str) -> None:
    try:
        live_store().answer(question_id, token, st.session_state.get(key))
    except LiveProblem as problem:
        st.session_state[PROBLEM] = str(problem)
