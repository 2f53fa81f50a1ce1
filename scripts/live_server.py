"""A live lmviz: the real Streamlit server, and several real browsers using it at once.

Shared by the browser tests (tests/e2e) and the benchmarks (benchmarks/reliability.py, benchmarks/first_visit.py),
so it lives outside tests/: a benchmark imports no test code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The script run has finished and no element is still a loading placeholder. The run's state is the app's
# own attribute: the status widget ("Running...") appears only once a run has lasted 500 ms, so its absence
# alone would also hold during the first 500 ms of every run.
SETTLED = ("document.querySelector('[data-testid=\"stApp\"]')?.dataset.testScriptState === 'notRunning' && "
           "!document.querySelector('[data-testid=\"stSkeleton\"]')")
LOSS_METRIC = "[data-testid='stMetric']:has-text('Loss: mean') [data-testid='stMetricValue']"
# How tall the page is: the main area is the element that scrolls, the sidebar and the header aside
MAIN_HEIGHT = "document.querySelector('[data-testid=stMain]').scrollHeight"


@contextlib.contextmanager
def environment_set(variables: dict[str, str]):
    """These environment variables set while the block runs (a server started in it inherits them)."""
    saved = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value


def free_port() -> int:
    """A port nothing listens on now, on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(log_path: Path):
    """scripts/serve, exactly as the Docker image runs it, on a free loopback port; yields its URL."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "ADDRESS": "127.0.0.1", "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(ROOT / "scripts" / "serve")], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_for_health(url, process)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


def _wait_for_health(url: str, process, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {process.returncode} before it answered (see its log)")
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)  # the interval between two polls, within the deadline above
    raise RuntimeError(f"streamlit did not answer on /_stcore/health within {seconds:.0f} s")


def settled_height(tab, quiet_s: float = 1.0, timeout_s: float = 120) -> int:
    """The main area's height in px (MAIN_HEIGHT) once the page has settled: its first drawing there, the script
    run over (SETTLED), and the height unchanged for ``quiet_s`` (a chart or a table takes its size a moment after
    the run)."""
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout_s * 1000)
    tab.wait_for_function(SETTLED, timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    height, since = tab.evaluate(MAIN_HEIGHT), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        tab.wait_for_timeout(200)
        now = tab.evaluate(MAIN_HEIGHT)
        if now != height or not tab.evaluate(SETTLED):
            height, since = now, time.monotonic()
    return height


@dataclass
class SessionResult:
    text: str  # the sentence this browser asked for
    text_shown: str  # what its text box holds once the page has finished
    loss_shown: str  # the page's "Loss: mean(-log p)" metric
    loss_seconds: float  # from opening the link to the loss on screen
    seconds: float  # from opening the link to the finished page (every chart and table drawn)


def sentence_page_at_once(url: str, chromium: str, texts: list[str]) -> list[SessionResult]:
    """One browser context per text (separate cookies, so separate Streamlit sessions), all
    opening "Your sentence" with their own ?text= at the same moment."""
    # Playwright's async API in a thread of its own: the caller may be inside the sync API's loop.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _at_once(url, chromium, texts)).result()


async def _at_once(url: str, chromium: str, texts: list[str]) -> list[SessionResult]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        tabs = []
        for _ in texts:
            tab = await (await browser.new_context(viewport={"width": 1400, "height": 2600})).new_page()
            await tab.goto(url)  # every session open first, then all ask at once, as a class pressing Enter
            await tab.wait_for_selector("[data-testid='stMain'] h1", timeout=120_000)
            tabs.append(tab)
        results = await asyncio.gather(*(_open_sentence(tab, url, text) for tab, text in zip(tabs, texts)))
        await browser.close()
        return list(results)


async def _open_sentence(tab, url: str, text: str) -> SessionResult:
    start = time.perf_counter()
    await tab.goto(f"{url}/sentence?text={quote(text)}")
    await tab.wait_for_selector(LOSS_METRIC, timeout=300_000)
    loss_seconds = time.perf_counter() - start
    await tab.wait_for_function(SETTLED, timeout=300_000)
    return SessionResult(text, await tab.get_by_label("Your text").input_value(),
                         (await tab.inner_text(LOSS_METRIC)).strip(), loss_seconds, time.perf_counter() - start)


def type_into_editor(tab, position: int, word: str, value: str, enter: bool = True):
    """Type ``value`` into the Toy example editor's cell (position, word) as a learner does: click a
    cell of that row, go to the word's column with the keyboard, type, Enter. Each step waits until the
    grid has selected the cell it leads to: a key the grid receives before it has taken the click is
    lost (a lost Home once sent the number to the row's last column)."""
    from playwright.sync_api import expect

    from lmviz.core import toy

    editor = tab.locator("[data-testid='stDataFrame']").nth(2)

    def selected(column: int) -> None:
        expect(editor.locator(f"#glide-cell-{column}-{position}")).to_have_attribute("aria-selected", "true")

    editor.scroll_into_view_if_needed()  # the click goes to a point on the screen
    box = editor.bounding_box()
    row_px = 35  # Streamlit's header and row height
    tab.mouse.click(box["x"] + box["width"] / 2, box["y"] + row_px * (position + 1) + row_px / 2)
    # a cell of that row, in the grid's accessible copy of its cells (id glide-cell-COLUMN-ROW)
    expect(editor.locator(f"[id^='glide-cell-'][id$='-{position}'][aria-selected='true']")).to_have_count(1)
    tab.keyboard.press("Home")  # the row's first column, its name
    selected(0)
    for column in range(1, toy.VOCAB.index(word) + 2):
        tab.keyboard.press("ArrowRight")
        selected(column)
    tab.keyboard.press("Enter")  # open the cell's editor
    box = tab.locator("#portal input.gdg-input")
    expect(box).to_be_focused()  # keys sent before it has the focus are lost
    box.press("Control+A")
    box.press_sequentially(value, delay=50)
    expect(box).to_have_value(value)
    if enter:
        box.press("Enter")
    return box  # without ``enter``, the cell's editor, its value typed: the caller presses Enter
