"""What every page run draws before any model, for the room: presentation mode, the pinned panel's
style and links to the glossary. It must not import torch: app.py runs it on every page, the home page
included, which would otherwise wait seconds for torch and transformers to import before it is drawn."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import NoReturn, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from lmviz.app import warm
from lmviz.app.problems import show_problem
from lmviz.core.text import escape_markdown, spreadsheet_safe
from lmviz.course.glossary import TERMS, anchor, link, link_first_uses
from lmviz.errors import LearnerError, NotEnoughMemory

PRESENT_KEY = "present"
DEFINITION = "lmviz-definition"  # the id of a glossary term's definition, shown over the page


BODY_PX, CHART_PX = 24, 18  # presentation mode; otherwise Streamlit's 16 px and lmviz's 14 px charts


NORMAL_CHART_PX = 14
METRIC_PX, METRIC_LABEL_PX = 40, 18  # presentation mode; otherwise Streamlit's 36 px and 14 px


# Streamlit sizes its text in rem: a larger root font scales widgets, tables and headings together;
# body text (0.875 rem) is then set to BODY_PX itself, and the title kept to two lines at 1280 px.
# The headline numbers (st.metric, 36 px otherwise) get METRIC_PX, larger than the body text, and their labels
# wrap rather than end in "…". st.dataframe draws on a canvas at 0.875 rem (17.5 px here), which no CSS reaches:
# a page's key table goes through key_table, an HTML table (st.table) at the body text's size in this mode.
# What the learners type (text boxes, number boxes) is the body text's size too: Streamlit draws it at 0.875 rem.
# The main area's top padding (6 rem, 120 px here) shrinks to just under the header (3.75 rem), so that the first
# screen reaches the pinned panel's numbers.
PRESENTATION_CSS = f"""<style>
html {{ font-size: 20px; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li,
[data-testid="stCaptionContainer"], [data-testid="stWidgetLabel"] p,
[data-testid="stText"] {{ font-size: {BODY_PX}px; }}
[data-testid="stMain"] h1 {{ font-size: 2rem; }}
[data-testid="stMetricLabel"] p {{ font-size: {METRIC_LABEL_PX}px !important; }}
[data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"],
[data-testid="stMetricLabel"] p {{ white-space: normal; overflow: visible; text-overflow: clip; line-height: 1.25; }}
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p {{ font-size: {METRIC_PX}px !important; }}
[data-testid="stTable"] th, [data-testid="stTable"] td {{ font-size: {BODY_PX}px; }}
[data-testid="stTextInput"] input, [data-testid="stTextArea"] textarea,
[data-testid="stNumberInput"] input {{ font-size: {BODY_PX}px; }}
[data-testid="stMainBlockContainer"] {{ padding-top: 4.25rem; }}
#{DEFINITION} {{ font-size: {BODY_PX}px; }}
</style>"""


# Streamlit keeps a sidebar opened or closed by hand in the browser's localStorage, and that choice outranks
# initial_sidebar_state: a teacher who had opened it once found it open again after a reload in presentation
# mode. So the sidebar is folded with Streamlit's own Collapse button, once per page load (a reload, a link) and
# once each time the mode is turned on; opened again by hand (the arrow at the top left), it stays open until the
# next reload. The element that carries the script takes no room on the page.
FOLD_SIDEBAR = """if (window.lmvizSidebarFolded === {turned_on}) return;
window.lmvizSidebarFolded = {turned_on};
const until = Date.now() + 10000;
const fold = () => {{
  const collapse = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
  if (collapse) collapse.click();
  else if (!document.querySelector('[data-testid="stExpandSidebarButton"]') && Date.now() < until)
    setTimeout(fold, 100);
}};
fold();"""
TURNED_ON = "present-turned-on"  # session state: how many times the mode was turned on (a link or F5 counts 1)
WAS_ON = "present-was-on"


HIDE_KEY = "hide"  # session state and link (?hide=1): the headline numbers hidden while the room is asked
HIDE_SWITCH = "hide-switch"  # the sidebar switch's widget
HIDE_BUTTON = "hide-button"  # the button at the top of a lesson's screen
HIDE_SHORTCUT = "H"
HIDE_LABEL = "Hide the numbers"
SHOW_LABEL = "Show the numbers"
HIDDEN = "hidden"  # what a hidden number reads
HIDE_HELP = ("Hides the page's numbers, so that the room can answer a question before it sees them: each headline "
             f"number reads “{HIDDEN}”, its label kept, and the working below the pinned panel folds away (its "
             "headings, the controls and the questions stay). Stays on from page to page and after a reload. The key "
             f"{HIDE_SHORTCUT} or the button at the top of a lesson's screen does the same.")
RESULT_PANEL = "result-panel"  # the container key; Streamlit gives it the CSS class st-key-result-panel
CHECK_YOURSELF = "check-yourself"  # the start of the key of a page's questions' container (lmviz.app.path)
LESSON_FOOTER = "lesson-footer"  # the container of the lesson's Previous / Next links and the progress
SHOWN_WHILE_HIDDEN = "shown-while-hidden"  # the start of the key of a container of what a learner sets in a table
# While the numbers are hidden, the working below the pinned panel is folded away: the room is being asked, and
# the page's sentences, tables and charts hold the answers as surely as the panel does (Bits per byte's
# "= 1.34266", RL fine-tuning's table of clipped ratios). What stays: everything above the panel (the lesson's
# introduction), the headings, every control (in a fold too, and Toy example's table of probabilities), the
# metrics (each reads HIDDEN), the questions wherever they are, and the lesson's footer.
BELOW_PANEL = f'[data-testid="stMain"] [data-testid="stLayoutWrapper"]:has(.st-key-{RESULT_PANEL}) ~ *'
KEPT = f'[class*="st-key-{CHECK_YOURSELF}"], [class*="st-key-{SHOWN_WHILE_HIDDEN}"], .st-key-{LESSON_FOOTER}'
# What a page writes, as against what a learner sets: folded while hidden
WRITTEN = ", ".join(f'[data-testid="{kind}"]' for kind in (
    "stMarkdown", "stCaptionContainer", "stText", "stDataFrame", "stTable", "stPlotlyChart", "stVegaLiteChart",
    "stAlert", "stException", "stCode", "stJson", "stImage", "stDownloadButton"))
CONTROLS = ", ".join(f'[data-testid="{kind}"]' for kind in (
    "stSlider", "stSelectbox", "stNumberInput", "stTextInput", "stTextArea", "stCheckbox", "stRadio",
    "stMultiSelect", "stButton"))  # a select_slider is an stSlider, a toggle an stCheckbox
FOLDED_NOTE = ("The page's working is folded away while its numbers are hidden: its headings, its controls and its "
               "questions stay.")
# Every st.metric of the main area (the pinned panel's, and the few further down) reads HIDDEN, in the same
# place and size, so that the room sees that the numbers are hidden on purpose, not missing, and the page does not
# move. The deltas go too. The word is an inline block, so that a rerun's strike-through does not reach it.
HIDDEN_NUMBERS_CSS = f"""<style>
[data-testid="stMain"] [data-testid="stMetricValue"] > *, [data-testid="stMain"] [data-testid="stMetricDelta"] {{
  display: none; }}
[data-testid="stMain"] [data-testid="stMetricValue"]::before {{ content: "{HIDDEN}"; display: inline-block;
  font-style: italic; padding: 0 0.4em; border: 2px dashed currentColor; border-radius: 0.3em; line-height: 1.2; }}
:is({BELOW_PANEL}, {BELOW_PANEL} *):not({KEPT}, :is({KEPT}) *):is(
  [data-testid="stElementContainer"]:has(:is({WRITTEN})):not(:has([data-testid="stMetric"])),
  [data-testid="stLayoutWrapper"]:has(> [data-testid="stExpander"]):not(:has(:is({CONTROLS})))) {{ display: none; }}
</style>"""


NEXT_LESSON = "next-lesson"  # the container of the next lesson's link at the top of a lesson (lmviz.app.path)
WORKING = "Working… the numbers struck through are from before"
WORKING_AFTER_S = 0.3
PHONE_PX = 640  # Streamlit stacks columns below 640 px
FIRST_VISIT_CODE = "first-visit-code"  # hidden elements whose code the browser loads while the progress shows


# The headline result of every page is pinned under Streamlit's header (3.75 rem): whatever the
# teacher scrolls to, the number that a control changes stays on the projector's screen.
# While a run is under way (the app's data-test-script-state), the panel says so in words on its lower edge at the
# right, over none of its numbers, and the numbers the run has not yet replaced are struck through: Streamlit only
# fades them, and from the back of the room a faded old loss reads as the answer. The words wait WORKING_AFTER_S,
# so that a quick run does not flash them, and show only while a number of the panel is stale: a fragment's run
# (the live class's poll, every 2 s) leaves the panel as it is, and must not put the words over the page.
# On a phone Streamlit stacks columns, one metric per line: the panel took 510 of a phone's 844 px. Below
# PHONE_PX its numbers go two to a line, smaller.
# Streamlit wraps the container in a stLayoutWrapper of the same height, so that wrapper is what sticks;
# the header above it is made opaque, so that the page scrolling under both never shows through. Both take the
# theme's background (light, or dark when the browser asks for it), which THEME_BACKGROUND copies from the app.
# A folded sidebar is hidden, so that the keyboard's Tab no longer walks through its links, off the screen. The
# next lesson's link, first in the page for the keyboard, is shown only when it has the focus (as a "skip" link).
# The button that hides the numbers (result_panel) sits in the middle of the header, empty otherwise: on screen
# whatever the teacher scrolls to, and taking no room from the page.
PAGE_CSS = f"""<style>
[data-testid="stLayoutWrapper"]:has(> .st-key-{RESULT_PANEL}) {{ position: sticky; top: 3.75rem; z-index: 990; }}
.st-key-{RESULT_PANEL} {{ background: var(--lmviz-background, Canvas);
  border-bottom: 2px solid color-mix(in srgb, currentColor 20%, transparent); padding-bottom: 0.25rem;
  position: relative; }}
[data-testid="stHeader"] {{ background: var(--lmviz-background, Canvas); }}
[data-testid="stSidebar"][data-collapsed="true"], [data-testid="stSidebar"][data-collapsed="true"] * {{
  visibility: hidden !important; }}
.st-key-{NEXT_LESSON}:not(:focus-within) {{ position: absolute; width: 1px; height: 1px; overflow: hidden;
  clip-path: inset(50%); }}
.st-key-{NEXT_LESSON}:focus-within {{ position: fixed; top: 0.5rem; right: 4rem; z-index: 999992; width: auto;
  background: var(--lmviz-background, Canvas); border: 2px solid currentColor; border-radius: 0.5rem; }}
#{DEFINITION} {{ position: fixed; z-index: 1000000; max-width: min(36rem, calc(100vw - 1rem)); padding: 0.6rem 1rem;
  background: var(--lmviz-background, Canvas); border: 2px solid currentColor; border-radius: 0.5rem;
  box-shadow: 0 0.25rem 1rem rgba(0, 0, 0, 0.35); font-size: 1rem; line-height: 1.45; }}
#{DEFINITION} p {{ margin: 0.25rem 0 0.5rem; font-size: inherit; }}
#{DEFINITION} button {{ margin-left: 1.5rem; font: inherit; color: inherit; background: none; cursor: pointer;
  border: 1px solid currentColor; border-radius: 0.3rem; padding: 0 0.6rem; }}
.st-key-{FIRST_VISIT_CODE} {{ display: none; }}
[data-test-script-state="running"] .st-key-{RESULT_PANEL}:has([data-stale="true"])::after {{ content: "{WORKING}";
  position: absolute;
  bottom: -1.3rem; right: 0; padding: 0.1rem 0.6rem; border: 2px dashed #31333f; border-radius: 0.4rem;
  background: #fff8d6; color: #31333f; font-weight: 600; opacity: 0;
  animation: lmviz-working 0s {WORKING_AFTER_S}s forwards; }}
[data-test-script-state="running"] .st-key-{RESULT_PANEL} [data-stale="true"] [data-testid="stMetricValue"] {{
  text-decoration: line-through; opacity: 0.5; animation: none; }}
@keyframes lmviz-working {{ to {{ opacity: 1; }} }}
.st-key-{HIDE_BUTTON} {{ position: fixed; top: 0.75rem; left: 50%; transform: translateX(-50%); z-index: 999991;
  width: auto; }}
@media (max-width: {PHONE_PX}px) {{
  .st-key-{RESULT_PANEL} [data-testid="stHorizontalBlock"] {{ flex-flow: row wrap; gap: 0.25rem 0.75rem; }}
  .st-key-{RESULT_PANEL} [data-testid="stColumn"] {{ flex: 1 1 40%; min-width: 40%; }}
  .st-key-{RESULT_PANEL} [data-testid="stMetricValue"] {{ font-size: 1.5rem; }}
}}
</style>"""


def run_script(name: str, body: str, element_id: str | None = None) -> None:
    """Run ``body`` (JavaScript, in a function of its own) in the page without taking room on it: st.html draws it
    in an element container of its own, hidden here by the script's class, ``name``. Streamlit runs a script again
    only when its text changed since the last run."""
    tag = f' id="{element_id}"' if element_id else ""
    st.html(f'<style>[data-testid="stElementContainer"]:has(script.{name}) {{ display: none; }}</style>\n'
            f'<script class="{name}"{tag}>(() => {{\n{body}\n}})();</script>', unsafe_allow_javascript=True)


# Streamlit's theme sets no CSS variable: its background is copied from the app into --lmviz-background, again
# whenever the theme changes (the app's style class changes with it).
THEME_BACKGROUND = """if (window.lmvizThemeWatched) return;
window.lmvizThemeWatched = true;
const app = document.querySelector('[data-testid="stApp"]');
const copy = () => document.documentElement.style.setProperty('--lmviz-background',
                                                                getComputedStyle(app).backgroundColor);
copy();
new MutationObserver(copy).observe(app, {attributes: true, attributeFilter: ['class']});"""


# A glossary link (term()) shows the term's definition over the page, beside the word, instead of following the
# link: Streamlit opens every Markdown link in a new tab, and the learner lost the lesson's tab, or, in the same
# tab, the page's place and a run under way (Train). The definition has a link to the Glossary page (a new tab,
# said so), Close, and Escape; it closes on a click elsewhere or a scroll, and the focus goes back to the word.
# window.lmvizGlossary ({anchor: [term, definition]}) is set before this script.
GLOSSARY_POPOVER = """if (window.lmvizGlossaryOn) return;
window.lmvizGlossaryOn = true;
let opener = null;
const close = (refocus) => {
  document.getElementById(ID)?.remove();
  if (refocus) opener?.focus();
  opener = null;
};
const entryOf = (link) => {
  const url = new URL(link.href, location.href);
  return url.pathname.endsWith('/glossary') ? window.lmvizGlossary[decodeURIComponent(url.hash.slice(1))] : null;
};
const show = (link, [term, definition]) => {
  close(false);
  opener = link;
  const box = document.createElement('div');
  box.id = ID;
  box.setAttribute('role', 'dialog');
  box.setAttribute('aria-label', term);
  box.tabIndex = -1;
  const name = document.createElement('strong'), text = document.createElement('p');
  const more = document.createElement('a'), shut = document.createElement('button');
  name.textContent = term;
  text.textContent = definition;
  Object.assign(more, {href: link.href, target: '_blank', rel: 'noopener', textContent: 'In the Glossary (a new tab)'});
  Object.assign(shut, {type: 'button', textContent: 'Close', onclick: () => close(true)});
  box.append(name, text, more, shut);
  document.querySelector('[data-testid="stApp"]').append(box);
  const at = link.getBoundingClientRect(), high = box.offsetHeight;
  box.style.left = `${Math.max(8, Math.min(at.left, innerWidth - box.offsetWidth - 8))}px`;
  box.style.top = `${at.bottom + 6 + high < innerHeight ? at.bottom + 6 : Math.max(8, at.top - 6 - high)}px`;
  box.focus({preventScroll: true});
};
document.addEventListener('click', (event) => {
  const link = event.target.closest?.('a[href]');
  const entry = link && !link.closest('#' + ID) && entryOf(link);
  if (entry) {
    event.preventDefault();
    event.stopPropagation();
    show(link, entry);
  } else if (!event.target.closest?.('#' + ID)) close(false);
}, true);
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && document.getElementById(ID)) close(true);
}, true);
document.addEventListener('scroll', (event) => { if (!event.target.closest?.('#' + ID)) close(false); }, true);"""


def glossary_entries() -> str:
    """The definitions GLOSSARY_POPOVER shows, as JavaScript: {anchor: [term, definition]}. Every "<" is written
    \\u003c: Streamlit's sanitizer drops a script whose text has "<" before a letter, a digit or "/" (the byte
    pieces' "<F0 9F>"), and a "</script>" would end it early."""
    entries = {anchor(term): [term, definition] for term, (_, definition) in TERMS.items()}
    return json.dumps(entries).replace("<", "\\u003c")


def page_style() -> None:
    st.html(PAGE_CSS)
    run_script("lmviz-theme", THEME_BACKGROUND)
    run_script("lmviz-glossary", f"window.lmvizGlossary = {glossary_entries()};\n"
               f"const ID = {json.dumps(DEFINITION)};\n{GLOSSARY_POPOVER}")


def presentation_switch() -> bool:
    """A switch in the sidebar, on every page; ?present=1 in a link turns it on. The
    widget lives in app.py, so its state stays with the session from page to page.

    On, it collapses the sidebar (Streamlit's own control in the header opens it again, switch included)
    and keeps ?present=1 in the address, so that a reload (F5) or a copied link opens in presentation mode."""
    if PRESENT_KEY not in st.session_state:
        st.session_state[PRESENT_KEY] = st.query_params.get(PRESENT_KEY) == "1"
    on = st.sidebar.toggle("Presentation mode", key=PRESENT_KEY,
                           help="Larger text and charts for a projector, the sidebar folded (the arrow at the "
                                "top left opens it again); stays on from page to page and after a reload.")
    if on:
        st.set_page_config(initial_sidebar_state="collapsed")
        st.html(PRESENTATION_CSS)
        if not st.session_state.get(WAS_ON):
            st.session_state[TURNED_ON] = st.session_state.get(TURNED_ON, 0) + 1
        run_script("lmviz-fold-sidebar", FOLD_SIDEBAR.format(turned_on=st.session_state[TURNED_ON]))
    else:
        st.set_page_config(initial_sidebar_state="auto")
    flag_in_link(PRESENT_KEY, on)
    st.session_state[WAS_ON] = on
    return on


def flag_in_link(name: str, on: bool) -> None:
    """?name=1 in the address while ``on``, so that a reload (F5) or a copied link keeps it; nothing otherwise.
    Only a change is sent to the browser."""
    if on and st.query_params.get(name) != "1":
        st.query_params[name] = "1"
    elif not on and name in st.query_params:
        del st.query_params[name]


def numbers_hidden() -> bool:
    """Whether the page's headline numbers are hidden from the room; a session opened by a link with ?hide=1
    starts with them hidden."""
    if HIDE_KEY not in st.session_state:
        st.session_state[HIDE_KEY] = st.query_params.get(HIDE_KEY) == "1"
    return st.session_state[HIDE_KEY]


def hide_numbers(hidden: bool = True) -> None:
    """Hides the page's headline numbers from the room (``hidden=False`` shows them again), on this page and every
    later one until shown, a reload included: the pinned panel reads the flag when it is drawn. Any code may call
    it, a button's callback too, for a question put to the room whose answer the numbers would give away."""
    st.session_state[HIDE_KEY] = hidden
    flag_in_link(HIDE_KEY, hidden)


def hide_numbers_switch() -> None:
    """The switch in the sidebar, under the presentation mode's. Its widget state is not the flag itself, so that
    hide_numbers can be called anywhere in a run, after the switch is drawn too."""
    st.session_state[HIDE_SWITCH] = numbers_hidden()
    st.sidebar.toggle(HIDE_LABEL, key=HIDE_SWITCH, on_change=lambda: hide_numbers(st.session_state[HIDE_SWITCH]),
                      help=HIDE_HELP)
    flag_in_link(HIDE_KEY, numbers_hidden())


def hide_numbers_button() -> None:
    """With the pinned panel: the button (and the key H) that hides its numbers or shows them again, at the top of
    the screen, and while they are hidden the style that hides them. The panel reads the flag as it is drawn."""
    hidden = numbers_hidden()
    st.button(SHOW_LABEL if hidden else HIDE_LABEL, key=HIDE_BUTTON, on_click=hide_numbers, args=(not hidden,),
              shortcut=HIDE_SHORTCUT, icon=":material/visibility:" if hidden else ":material/visibility_off:",
              help=HIDE_HELP)
    if hidden:
        st.html(HIDDEN_NUMBERS_CSS)


class PageStopped(BaseException):
    """Raised by stop_page; app.py ends the page there and still draws what comes after it. A BaseException, as
    Streamlit's own StopException is, so that a page's ``except Exception`` around a load never swallows it."""


def stop_page() -> NoReturn:
    """Ends the page's script here, after bad input has been said in a sentence. In place of st.stop(), which ends
    the whole run: every element after it raises again, so the lesson's Previous / Next links were not drawn and a
    first visit's "Loading this lesson" status stayed on screen beside the sentence."""
    raise PageStopped


Result = TypeVar("Result")


def result_or_stop(compute: Callable[[], Result], refused: tuple[type[LearnerError], ...], smaller: str,
                   where=None) -> Result:
    """``compute()``'s result; or, when it raises one of ``refused`` or runs out of memory, its sentence in ``where``
    (the page, or the pinned result panel: on screen with the inputs) and the page stopped there. Running out of
    memory is said with ``smaller``, what to try instead ("Try a shorter text.")."""
    try:
        return compute()
    except NotEnoughMemory as problem:
        show_problem(f"{problem} {smaller}", where)
    except refused as problem:
        show_problem(problem, where)
    stop_page()


DRAWN_KEY = "pages-drawn"  # session state: the url paths of the pages this session has drawn to the end
FIRST_VISIT_KEY = "first-visit-progress"  # the progress shown while a page is drawn for the first time


def first_visit_sentence() -> str:
    """The status of a session's first drawing of a page, true of this visit: while the server is still preparing
    the bundled model in the background (lmviz.app.warm), a page that needs it waits for it, and says so; once it is
    ready, or when nothing is being prepared, the page has only itself to draw."""
    warmer = warm.warmer
    if warmer.started and warmer.seconds is None:
        return (f"Loading this lesson. The server is still preparing {warmer.model} in the background "
                f"({round(100 * warmer.fraction)} %: {warmer.message}); a lesson that uses it waits for it.")
    return "Loading this lesson."


@contextlib.contextmanager
def first_drawing(url_path: str):
    """Around a page's run: the first time this session draws the page, a running status under its title until the
    page is drawn. On a server's first visit the page's imports (PyTorch, transformers) and its model take seconds
    before the page draws anything but its title. It is an element of the page, drawn with the title: st.spinner
    appears only after half a second, and a spinner inside the page cleared it when its own ended, leaving the title
    alone again. Later runs have none, so that a rerun never pushes the page down; the pinned panel says they are
    working."""
    drawn = st.session_state.setdefault(DRAWN_KEY, set())
    slot = st.empty()  # on every run, so that the page's elements keep their places: shifted by one, each element
    if url_path in drawn:  # is drawn anew in the browser (a grid then lost the cell the learner had selected)
        yield
        return
    with slot.container(key=FIRST_VISIT_KEY):
        st.status(first_visit_sentence(), state="running")
        # Hidden. The browser fetches the code of a kind of element the first time it meets one: without this, the
        # status went with the run and the pinned numbers came up to a second later, with neither on screen.
        with st.container(key=FIRST_VISIT_CODE):
            st.metric("Loading", "…", label_visibility="collapsed")
    taken_over = False
    try:
        yield
    except RerunException:  # a newer run took over (a widget changed, or the link's inputs were written back): it
        taken_over = True  # draws the page, and its status in this one's place, so that progress never stops
        raise
    finally:  # a page stopped early (stop_page on bad input) has been drawn too: its reruns get no status
        if not taken_over:
            slot.empty()
            drawn.add(url_path)


def present_params() -> dict[str, str]:
    """The query parameters that carry the room's settings in a link, presentation mode and hidden numbers: empty
    when both are off."""
    return {name: "1" for name, on in ((PRESENT_KEY, presenting()), (HIDE_KEY, numbers_hidden())) if on}


def key_table(data, file_name: str, **dataframe_options) -> None:
    """A page's key table: st.dataframe, or in presentation mode an HTML table (st.table) whose text is the
    body text's size, readable at the back (st.dataframe's canvas keeps 0.875 rem whatever the CSS says);
    under it, in both modes, a button that downloads it as ``file_name`` (st.table has no download of its own,
    and st.dataframe's is hidden until the pointer is over it)."""
    import pandas as pd  # (here: the home page, which has no table, need not wait for pandas)

    readable_table(data, **dataframe_options)
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    hide_index = dataframe_options.get("hide_index")
    st.download_button("Download the table (CSV)", frame.map(spreadsheet_safe).to_csv(index=not hide_index),
                       file_name=file_name, mime="text/csv", icon=":material/download:")


def readable_table(data, **dataframe_options) -> None:
    """st.dataframe, or in presentation mode an HTML table (text_table) whose text is the body text's size, for a
    table the class plan shows the room (st.dataframe's canvas keeps 0.875 rem whatever the CSS says)."""
    if presenting():
        text_table(data, hide_index=dataframe_options.get("hide_index"))
    else:
        st.dataframe(data, **dataframe_options)


def text_table(data, hide_index: bool | None = None) -> None:
    """st.table with every cell and header shown as the text it is. st.table reads its cells and headers as
    Markdown: a token "**" or "`", or a typed word such as "*big*", was drawn bold or as code. Numbers stay numbers.
    A pandas Styler (Toy example's coloured table) keeps its styles: they are re-applied to the relabelled frame,
    and its cells are escaped by a formatter (the headers Streamlit draws are the frame's own, not the Styler's)."""
    import pandas as pd
    from pandas.io.formats.style import Styler

    def escaped(value):
        return escape_markdown(value) if isinstance(value, str) else value

    def relabelled(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        for axis in ("columns", "index"):
            labels = getattr(frame, axis)
            setattr(frame, axis, labels.map(escaped).set_names([escaped(n) for n in labels.names]))
        return frame

    if isinstance(data, Styler):
        shown = relabelled(data.data).style.use(data.export()).format(escaped)
    else:
        shown = relabelled(data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)).map(escaped)
    st.table(shown, hide_index=hide_index)


def presenting() -> bool:
    return bool(st.session_state.get(PRESENT_KEY))


def intro(markdown: str) -> None:
    """A lesson's opening paragraph (Markdown, its terms already linked). In presentation mode it is folded under
    a heading of its own: the teacher says it, and the first screen shows the page's headline numbers instead."""
    if presenting():
        with st.expander("About this lesson"):
            st.markdown(markdown)
    else:
        st.markdown(markdown)


def glossary_query() -> str:
    return f"?{PRESENT_KEY}=1" if presenting() else ""  # the glossary opens in presentation mode when the page is


def term(word: str, name: str) -> str:
    """``word`` linked to the glossary entry ``name``; a click shows the definition over the page (GLOSSARY_POPOVER)."""
    return link(word, name, glossary_query())


def terms_linked(text: str) -> str:
    """Plain ``text`` with the first use of each glossary term linked to it."""
    return link_first_uses(text, glossary_query())


def chart_font_px() -> int:
    return CHART_PX if presenting() else NORMAL_CHART_PX
