"""What every page run needs before any model, for the room: presentation mode, links
to the glossary, and the bundled model warmed up in the background as soon as anyone
opens the app.

Streamlit glue like lmviz.ui, but kept apart from it because it must not import
torch: app.py runs it on every page, the home page included, which would
otherwise wait seconds for torch and transformers to import before it is drawn.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

import streamlit as st

from lmviz import lesson, quiz
from lmviz.glossary import link, link_first_uses
from lmviz.text import escape_markdown

PRESENT_KEY = "present"
BODY_PX, CHART_PX = 24, 18  # presentation mode; otherwise Streamlit's 16 px and lmviz's 14 px charts
NORMAL_CHART_PX = 14
# Streamlit sizes its text in rem: a larger root font scales widgets, tables and headings together;
# body text (0.875 rem) is then set to BODY_PX itself, and the title kept to two lines at 1280 px.
PRESENTATION_CSS = f"""<style>
html {{ font-size: 20px; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li,
[data-testid="stCaptionContainer"], [data-testid="stWidgetLabel"] p,
[data-testid="stText"] {{ font-size: {BODY_PX}px; }}
[data-testid="stMain"] h1 {{ font-size: 2rem; }}
[data-testid="stMetricLabel"] p {{ font-size: 18px !important; }}
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p {{ font-size: 1.6rem !important; }}
</style>"""


RESULT_PANEL = "result-panel"  # the container key; Streamlit gives it the CSS class st-key-result-panel
# The headline result of every page is pinned under Streamlit's header (3.75 rem): whatever the
# teacher scrolls to, the number that a control changes stays on the projector's screen.
# Streamlit wraps the container in a stLayoutWrapper of the same height, so that wrapper is what sticks;
# the header above it is made opaque, so that the page scrolling under both never shows through.
PAGE_CSS = f"""<style>
[data-testid="stLayoutWrapper"]:has(> .st-key-{RESULT_PANEL}) {{ position: sticky; top: 3.75rem; z-index: 990; }}
.st-key-{RESULT_PANEL} {{ background: var(--background-color, #fff); border-bottom: 2px solid rgba(49, 51, 63, 0.2);
  padding-bottom: 0.25rem; }}
[data-testid="stHeader"] {{ background: var(--background-color, #fff); }}
</style>"""


def page_style() -> None:
    st.html(PAGE_CSS)


def presentation_switch() -> bool:
    """A switch in the sidebar, on every page; ?present=1 in a link turns it on. The
    widget lives in app.py, so its state stays with the session from page to page."""
    if PRESENT_KEY not in st.session_state:
        st.session_state[PRESENT_KEY] = st.query_params.get(PRESENT_KEY) == "1"
    on = st.sidebar.toggle("Presentation mode", key=PRESENT_KEY,
                           help="Larger text and charts for a projector; stays on from page to page.")
    if on:
        st.html(PRESENTATION_CSS)
    return on


def presenting() -> bool:
    return bool(st.session_state.get(PRESENT_KEY))


def _glossary_query() -> str:
    return f"?{PRESENT_KEY}=1" if presenting() else ""  # the glossary opens in presentation mode when the page is


def term(word: str, name: str) -> str:
    """``word`` linked to the glossary entry ``name``."""
    return link(word, name, _glossary_query())


def terms_linked(text: str) -> str:
    """Plain ``text`` with the first use of each glossary term linked to it."""
    return link_first_uses(text, _glossary_query())


def chart_font_px() -> int:
    return CHART_PX if presenting() else NORMAL_CHART_PX


class _Warmer:
    """Loads the bundled model once per process, in a thread of its own, so that the
    first visit to a causal-LM page finds it ready instead of waiting for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fraction, self.message, self.seconds, self.error = 0.0, "starting", None, None
        self.model = "the bundled model"
        self.batcher = None  # a weak reference to what was loaded

    def start(self) -> None:
        if os.environ.get("LMVIZ_WARM_START", "1") == "0":
            return
        with self._lock:
            if self._thread is not None:
                return
            from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

            self._thread = threading.Thread(target=self._warm, name="lmviz-warm-start", daemon=True)
            add_script_run_ctx(self._thread, get_script_run_ctx())  # Streamlit's caches need a session
            self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def _warm(self) -> None:
        start = time.perf_counter()
        try:
            from lmviz import ui  # torch and transformers are imported here, off the page's thread
            from lmviz.analysis import REFERENCE_TEXT
            from lmviz.bundled import prepare_bundled
            from lmviz.deployment import allowed_models, default_dtype
            from lmviz.models import DEFAULT_MODEL

            self.model = DEFAULT_MODEL
            allowed = allowed_models()
            if allowed is not None and DEFAULT_MODEL not in allowed:
                self.message = "not needed: this deployment does not offer the bundled model"
                return
            prepare_bundled(self._progress)
            self._progress(0.95, f"Loading {DEFAULT_MODEL}…")
            # the key the pages load with; a weak reference, so that Streamlit's cache alone decides its life
            batcher = ui.get_batcher(DEFAULT_MODEL, "auto", default_dtype(), None)
            self.batcher = weakref.ref(batcher)
            self._progress(0.98, "A first forward pass…")
            batcher.analyse(REFERENCE_TEXT)  # a model's first forward pass is several times slower than the next
            self.fraction, self.message = 1.0, f"{DEFAULT_MODEL} is ready"
        except Exception as error:  # a page that needs the model will say what went wrong
            self.error = f"{type(error).__name__}: {error}"
            self.message = "could not prepare the bundled model; the pages will say why"
        finally:
            self.seconds = time.perf_counter() - start


warmer = _Warmer()


def warm_start() -> None:
    """Start warming the bundled model (once per process) and say how far it is, in the sidebar."""
    warmer.start()
    if not warmer.started:
        return
    with st.sidebar:
        if warmer.seconds is None:
            _warming_status()  # redrawn every 2 s until the next full run of the page finds it done
        else:
            st.caption(f"Model: {warmer.message}.")


@st.fragment(run_every=2)
def _warming_status() -> None:
    if warmer.seconds is None:
        st.progress(warmer.fraction, text=f"Preparing {warmer.model} for the causal-LM pages in the background: "
                                          f"{warmer.message}")
    else:
        st.caption(f"Model: {warmer.message}.")


# --- The lesson path and its check-yourself questions -----------------------------------------

ANSWERED_KEY = "answered"  # session state: the "step/key" of every question answered right or revealed


def answered() -> set[str]:
    """This session's progress, with what a link brought (?answered=) added to it."""
    progress = st.session_state.setdefault(ANSWERED_KEY, set())
    progress |= lesson.read_progress(st.query_params.get(lesson.ANSWERED_PARAM))
    return progress


def lesson_header(step: lesson.Step) -> None:
    """Above the page's title: where it is on the path, and what it teaches."""
    number = lesson.PATH.index(step) + 1
    st.caption(terms_linked(f"Lesson {number} of {len(lesson.PATH)}. You will learn {step.learn}."))


def lesson_footer(step: lesson.Step) -> None:
    """At the end of the page: previous / next, carrying the learner's progress in the link."""
    done = answered()
    code = lesson.progress_code(done)
    carried = {lesson.ANSWERED_PARAM: code} if code else None
    earlier, later = lesson.neighbours(step)
    st.divider()
    left, right = st.columns(2)
    if earlier:
        left.page_link(earlier.page, label=f"Previous: {earlier.title}", icon=":material/arrow_back:",
                       query_params=carried)
    if later:
        right.page_link(later.page, label=f"Next: {later.title}", icon=":material/arrow_forward:",
                        query_params=carried)
    else:
        right.page_link("app_pages/home.py", label="The end of the path: back to Home", icon=":material/home:",
                        query_params=carried)
    st.caption(progress_sentence(done) + " The links above keep your place: bookmark one to come back to it.")


def progress_sentence(done: set[str]) -> str:
    count = len(done & lesson.all_keys())
    return f"{count} of {lesson.total_questions()} check-yourself questions answered."


def is_answered(step_name: str, question_key: str) -> bool:
    return f"{step_name}/{question_key}" in answered()


def check_yourself(step_name: str, questions: list[quiz.Question], heading: str = "Check yourself") -> None:
    """The page's questions, each in a form of its own: Check says right, or gives a hint;
    Show the answer reveals it (for a teacher asking the room, too)."""
    step = next(step for step in lesson.PATH if step.url_path == step_name)
    st.subheader(heading)
    st.caption("Questions made from the numbers on this page as it is now: change the input and they change. "
               "Numbers are right within 0.01, or 1 % of a larger answer; counts, exactly.")
    for question in questions:
        _ask(step.key(question.key), question)


def _ask(key: str, question: quiz.Question) -> None:
    # What was last asked of this question ("check" with the answer given, or "reveal") is kept, so
    # that its verdict stays on screen through other reruns, recomputed from the page's numbers now.
    last = f"quiz-last-{key}"
    with st.form(f"quiz-{key}"):
        st.text(question.ask)
        if question.choices:
            given = st.radio("Your answer", question.choices, index=None, key=f"quiz-answer-{key}",
                             format_func=escape_markdown)
        else:
            given = st.text_input("Your answer (a number)", key=f"quiz-answer-{key}")
        left, right = st.columns(2)
        if left.form_submit_button("Check"):
            st.session_state[last] = ("check", given)
        if right.form_submit_button("Show the answer"):
            st.session_state[last] = ("reveal", given)
        action, asked_with = st.session_state.get(last, (None, None))
        if action == "reveal":
            answered().add(key)
            st.info(escape_markdown(f"The answer: {question.shown_answer}. {question.reason}"),
                    icon=":material/visibility:")
        elif action == "check" and asked_with == given:
            _show_verdict(key, quiz.check(question, given))


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
