"""Steps the browser tests share. They import them from here, never from one another."""

import os
import re
import time
from pathlib import Path

from playwright.sync_api import expect

from scripts.live_server import ROOT, SETTLED, settled_height

# where the page screenshots go: CI keeps them as artifacts; scripts/update_screenshots sets docs/screenshots
ARTIFACTS = Path(os.environ.get("LMVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
# The footer's sentence under every lesson, drawn after the page's own script has run to its end
FOOTER = "The links above keep your place"
# every Plotly chart on the page has drawn its traces (charts draw after the script run has finished)
DRAWN = "[...document.querySelectorAll('.js-plotly-plot')].every(chart => chart.querySelector('g.trace'))"
WHOLE_PAGE = {"width": 1400, "height": 2600}  # a tall tab: a whole page at once, for screenshots


def save_whole(tab, name: str) -> None:
    """The page, every chart drawn, saved as ARTIFACTS/``name``.png in a tall tab (WHOLE_PAGE): the main area scrolls
    inside the window, so a full-page screenshot of a short window would hold only its first screen."""
    tab.set_viewport_size(WHOLE_PAGE)
    settled_height(tab)
    tab.wait_for_function(DRAWN, timeout=60_000)  # the screenshot shows every chart, not a blank frame
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(tab, timeout=120_000):
    """Wait until the script run has finished and no element is still a loading placeholder."""
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout)
    tab.wait_for_function(SETTLED, timeout=timeout)


def open_folds(tab, label: str | None = None) -> int:
    """Open every folded part (st.expander) of the main area that is closed (only those whose label contains
    ``label``, when given), as a learner clicking each label does, and wait until the page has settled and stopped
    growing; return how many were opened. A page folds what a class does not need on first view (issue 39); a test
    that reads or measures what is inside opens it first."""
    summaries = tab.locator("[data-testid='stMain'] [data-testid='stExpander'] details:not([open]) > summary")
    if label is not None:
        summaries = summaries.filter(has_text=label)
    handles = summaries.element_handles()  # each found once: an opened part leaves the selector's matches
    for summary in handles:
        summary.scroll_into_view_if_needed()
        summary.click()
    expect(summaries).to_have_count(0)
    settled_height(tab)  # each part opens with an animation: nothing is measured before it has ended
    return len(handles)


def assert_no_error(tab):
    assert tab.locator("[data-testid='stException']").count() == 0
    assert tab.locator("[data-testid='stAlertContentError']").count() == 0
    assert "Traceback" not in tab.inner_text("body")


def metric(tab, label: str):
    """The value element of the st.metric labelled exactly ``label``."""
    named = tab.locator("[data-testid='stMetricLabel']", has_text=re.compile(f"^{re.escape(label)}$"))
    return tab.locator("[data-testid='stMetric']", has=named).locator("[data-testid='stMetricValue']")


# Each visible table of the main area whose content is wider than its box (a glide grid scrolls inside its
# .dvn-scroller; an st.table inside its own wrapper) or whose box runs past the window's right edge. A table in a
# closed st.expander is not seen (checkVisibility), and a glide grid laid out there measures 9 px too wide.
OVERFLOWING_TABLES = """() => [...document.querySelectorAll(
    '[data-testid=stMain] [data-testid=stDataFrame], [data-testid=stMain] [data-testid=stTable]')]
  .filter(t => t.offsetParent !== null && t.checkVisibility() && t.getBoundingClientRect().width > 0)
  .map(t => ({table: t, box: t.querySelector('.dvn-scroller') || t.querySelector('table')?.parentElement || t}))
  .filter(({table, box}) => box.scrollWidth > box.clientWidth + 1 || table.getBoundingClientRect().right > innerWidth)
  .map(({table, box}) => `${table.dataset.testid} ${box.scrollWidth} px in ${box.clientWidth} px: ` +
       table.innerText.replace(/\\s+/g, ' ').slice(0, 60))"""


def overflowing_tables(tab) -> list[str]:
    return tab.evaluate(OVERFLOWING_TABLES)


def type_the_true_next_word(tab, word: str) -> None:
    """On Next token: "If the text really continued with" → "a word I type…", then ``word`` typed and sent."""
    tab.get_by_label("If the text really continued with").click()
    tab.keyboard.type("a word I type")  # the list is long: typed, it shows that one option
    tab.get_by_role("option", name="a word I type…").click()
    box = tab.get_by_label("The word that comes next")
    box.fill(word)
    box.press("Enter")


class HeldRuns:
    """Holds a script run open in the browser: once ``holding`` is set, the next whole run of the page (not a
    fragment's) reaches the page as started, and every message after that, the run's new elements and its end
    included, waits here; ``release`` delivers them in order. The page therefore shows the run under way, with each
    number of the run before still drawn (stale), for as long as a test needs to look at it, as a slow run would.
    A run on a fast machine ended before a poll could see it (issue 50): a test of a state that passes must hold it,
    not hope to catch it. Holding only the run's end was not enough: by then the run had sent its new numbers, so
    nothing was stale. A fragment's run (a timer's, such as the warm start's every 2 s where it is on) is let
    through: its new_session names its fragments.

    While the test is outside a Playwright call, Playwright hands on no message either way: the page and the server
    wait, as they do for any routed socket.

    Streamlit's page and server speak protobuf ForwardMsgs over one WebSocket (/_stcore/stream); Playwright's
    route_web_socket sits on it, passing the page's messages to the server untouched."""

    def __init__(self, tab):
        self.holding = False
        self.held: list = []
        self._run_started = False  # while holding: the whole run's new_session has reached the page
        self.under_way = False  # a run is held open: the page was told it started, and what follows waits here
        self._to_page = None
        tab.route_web_socket(re.compile(r"/_stcore/stream$"), self._route)

    def _route(self, to_page):
        to_server = to_page.connect_to_server()
        to_server.on_message(self._from_server)
        to_page.on_message(to_server.send)
        self._to_page = to_page

    def _from_server(self, message):
        if self.under_way:
            self.held.append(message)
            return
        self._to_page.send(message)
        if self.holding:
            kind, forward = self._read(message)
            if kind == "new_session" and not forward.metadata.run.fragment_ids:
                self._run_started = True
            elif self._run_started and kind == "session_status_changed" and (
                    forward.session_status_changed.script_is_running):
                self.under_way = True

    @staticmethod
    def _read(message):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        forward = ForwardMsg()
        forward.ParseFromString(message if isinstance(message, bytes) else message.encode())
        return forward.WhichOneof("type"), forward

    def release(self):
        self.holding = self._run_started = self.under_way = False
        held, self.held = self.held, []
        for message in held:
            self._to_page.send(message)


# Resolves once every element shown that ``selector`` (CSS) matches has stopped moving: no animation or transition
# under way in it (one that never ends, a spinner's, aside; a finished one that holds its last frame is not under
# way), and its box and scroll position and size, with ``deep`` those of everything inside it too, the same over
# ``frames`` frames in a row that the page drew; rejects after ``ms``. A transition starts at the frame after the
# change that starts it: a frame only measures, and stillness counts from the next one.
STILL = """async ({selector, deep, frames, ms}) => {
  const frame = () => new Promise(resolve => requestAnimationFrame(resolve));
  const moving = a => (a.pending || a.playState === 'running') && a.effect?.getComputedTiming().endTime !== Infinity;
  const measure = e => { const b = e.getBoundingClientRect();
    return [b.x, b.y, b.width, b.height, e.scrollTop, e.scrollLeft, e.scrollWidth, e.scrollHeight]; };
  const deadline = performance.now() + ms;
  let last = null, same = 0;
  while (performance.now() < deadline) {
    await frame();
    const shown = [...document.querySelectorAll(selector)].filter(e => e.checkVisibility());
    const now = JSON.stringify(shown.map(e => (deep ? [e, ...e.querySelectorAll('*')] : [e]).map(measure)));
    same = now === last && !shown.some(e => e.getAnimations({subtree: true}).some(moving)) ? same + 1 : 0;
    if (same >= frames) return shown.length;
    last = now;
  }
  throw new Error(`${selector}: still moving after ${ms} ms`);
}"""


def wait_until_still(tab, selector: str, deep: bool = False, frames: int = 3, timeout_ms: int = 30_000) -> int:
    """Wait until what ``selector`` matches (those shown) has stopped moving (STILL): a sidebar's fold, a tab's
    tables laid out once it is selected, a scroll's layout; how many it matched. A test measures once the change it
    made has ended, not after a guess at how long that takes, which a busy machine outlasts (issue 50)."""
    return tab.evaluate(STILL, {"selector": selector, "deep": deep, "frames": frames, "ms": timeout_ms})


def next_frames(tab, count: int = 2) -> None:
    """Wait until the page has drawn ``count`` more frames: what an input event just dispatched (a click, a key)
    does in the page, its handlers' changes and React's render of them, is on screen by then. A test that shows an
    input changed nothing looks then: an effect would have been drawn."""
    tab.evaluate("n => new Promise(done => { const next = k => k ? requestAnimationFrame(() => next(k - 1)) : done();"
                 " next(n); })", count)


class ScriptRuns:
    """Counts, off Streamlit's WebSocket (/_stcore/stream), the script runs a tab asks for and the runs the server
    finishes, so that a test waits for a run, not for a time (issue 50). A number on a page changes only in a run:
    a test that shows a number stays put waits until the run that could change it has finished; one that shows a key
    asked for nothing reads what the page sent.

    ``requested``: the page's requests for a run (BackMsg rerun_script), but for a timer's (a fragment's run_every).
    ``finished``: whole runs of the page the server ended (ForwardMsg script_finished, FINISHED_SUCCESSFULLY or
    FINISHED_WITH_COMPILE_ERROR); a fragment's run, or a run cut short for the next one, is not one.
    ``fragments_finished``: the fragments' runs it ended (FINISHED_FRAGMENT_RUN_SUCCESSFULLY), a timer's included: a
    poll of the live class's projector is one.

    Made before the page is opened: it watches each stream the tab opens (tab.on("websocket"), a reload's too) and
    changes nothing on it, unlike HeldRuns. The browser reports a frame the page sends from the page itself, in
    order with the page's answers to the test: a count read after a call into the page (an evaluate) has every
    frame the page sent before that call."""

    def __init__(self, tab):
        self.requested = 0
        self.finished = 0
        self.fragments_finished = 0
        self._stream = None
        tab.on("websocket", self._watch)

    def _watch(self, socket):
        if re.search(r"/_stcore/stream$", socket.url):
            self._stream = socket
            socket.on("framesent", self._sent)
            socket.on("framereceived", self._received)

    def _sent(self, payload):
        from streamlit.proto.BackMsg_pb2 import BackMsg

        back = BackMsg()
        back.ParseFromString(payload if isinstance(payload, bytes) else payload.encode())
        if back.WhichOneof("type") == "rerun_script" and not back.rerun_script.is_auto_rerun:
            self.requested += 1

    def _received(self, payload):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        forward = ForwardMsg()
        forward.ParseFromString(payload if isinstance(payload, bytes) else payload.encode())
        if forward.WhichOneof("type") == "script_finished" and forward.script_finished in (
                ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR):
            self.finished += 1
        elif forward.WhichOneof("type") == "script_finished" and (
                forward.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY):
            self.fragments_finished += 1

    def wait_for_finished(self, count: int, timeout_s: float = 120, fragments: bool = False) -> None:
        """Wait until ``count`` whole runs have finished (with ``fragments``, ``count`` fragment runs): for a click's
        run, ``finished`` as it was before the click, plus one. Each message the server sends wakes it to count again
        (no fixed wait)."""
        deadline = time.monotonic() + timeout_s
        while (done := self.fragments_finished if fragments else self.finished) < count:
            left = deadline - time.monotonic()
            kind = "fragment runs" if fragments else "runs"
            assert left > 0 and self._stream is not None, f"{done} {kind} finished of {count}, in {timeout_s} s"
            self._stream.wait_for_event("framereceived", timeout=left * 1000)


# The page's body text size in px: its first paragraph's
BODY_TEXT_PX = ("parseFloat(getComputedStyle(document.querySelector("
                "'[data-testid=stMain] [data-testid=stMarkdownContainer] p')).fontSize)")


def panel_metrics(tab) -> list[dict]:
    """Each metric of the pinned result panel: its value's and label's font size, and whether either is cut
    (Streamlit ends a text too wide for its column with "…")."""
    return tab.evaluate("""[...document.querySelectorAll('.st-key-result-panel [data-testid=stMetric]')].map(m => {
        const value = m.querySelector('[data-testid=stMetricValue] [data-testid=stMarkdownContainer]'),
              label = m.querySelector('[data-testid=stMetricLabel] [data-testid=stMarkdownContainer]'),
              cut = e => e.scrollWidth > e.clientWidth + 1;
        return {label: label.innerText, value_px: parseFloat(getComputedStyle(value).fontSize),
                label_px: parseFloat(getComputedStyle(label.querySelector('p')).fontSize),
                value_cut: cut(value), label_cut: cut(label)}; })""")
