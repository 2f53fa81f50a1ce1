"""The first visit of a class: does "Your sentence" answer at once, and does each lesson show progress at once?

    python -m benchmarks.first_visit [--quick] [--wait SECONDS] [--lessons toy,sentence,...]

A teacher starts the server, opens the home page, talks for a minute, then opens
"Your sentence". Each row starts a fresh server (scripts/serve) and a fresh
chromium, opens the home page, waits, opens "Your sentence" and reports the seconds
until its loss is on screen (the times to the health check and the home page count from
the server's start), with the bundled model warmed in the background
from the first visit (the default) and without (LMVIZ_WARM_START=0). The weights
cache on disk is warm in both rows (the model has been dequantised on this machine
before); the dequantisation a brand-new machine adds (~40 s) is the last row,
in the full run only. --quick (for CI: the script still works) waits 5 s, too short for the model to be ready.

The second table is a student's link clicked right after the teacher started the server: for each lesson
(every lesson of the path in its order; Your sentence alone with --quick), a fresh server (default settings,
warm start on, weights cache warm) and a fresh chromium tab at 1280x720 that opens the lesson's address as
soon as /_stcore/health answers. From that moment: the seconds until the page's title is on screen, until a
progress indicator is (the first drawing's running status, a spinner, or the pinned panel's "Working…"), and
until the pinned panel's first number. A script in the page looks every 100 ms; "progress throughout" is yes
when no look between the title and the first number found neither progress nor a number (issue 29: title and
progress within 1 s, the first number within 10 s with progress shown throughout), else how long it lacked both.

    python -m benchmarks.first_visit --home-drawn URL

opens URL's home page in a fresh chromium and prints the Unix time at which it was drawn: scripts/rehearse_docker
times a server it started itself (process start -> home page drawn) with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from lmviz.course.registry import PATH, Lesson
from lmviz.models.bundled import prepare_bundled
from scripts.live_server import CHROMIUM_FLAGS, LOSS_METRIC, ROOT, environment_set, running_server


def open_home(browser, url: str):
    """A new 1280x720 tab on url's home page, returned once the page's links to the lessons are drawn."""
    tab = browser.new_page(viewport={"width": 1280, "height": 720})
    tab.goto(url)
    tab.wait_for_selector("[data-testid='stPageLink']", timeout=120_000)
    return tab


def home_drawn_at(chromium: str, url: str) -> float:
    """The Unix time at which url's home page was drawn in a fresh chromium (the launch counts, as in a visit)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        open_home(browser, url)
        drawn = time.time()
        browser.close()
        return drawn


def first_visit(chromium: str, wait: float, environment: dict[str, str]) -> tuple[float, float, float]:
    """Seconds from starting the server to /_stcore/health answering and to the home page drawn,
    and from opening Your sentence to its loss on screen."""
    from playwright.sync_api import sync_playwright

    with environment_set(environment):
        server_start = time.perf_counter()
        with running_server(ROOT / "artifacts" / "first-visit-benchmark.log") as url, sync_playwright() as p:
            health = time.perf_counter() - server_start
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            tab = open_home(browser, url)
            home = time.perf_counter() - server_start
            # the teacher talking between the two pages: the pause this benchmark is about (the warm start
            # has this long to load the model), not a wait for something on screen
            tab.wait_for_timeout(wait * 1000)
            start = time.perf_counter()
            tab.goto(f"{url}/sentence")
            tab.wait_for_selector(LOSS_METRIC, timeout=300_000)
            sentence = time.perf_counter() - start
            browser.close()
            return health, home, sentence


PANEL_NUMBER = ".st-key-result-panel [data-testid='stMetricValue']"
# Added to the student's tab before the page loads: every 100 ms, whether the title, the first drawing's status
# or a spinner, the pinned panel's "Working…" (a ::after that CSS shows while a run is under way, after a short
# delay) and a pinned number are on screen, with the wall-clock time in ms. Only in the top frame (the page's
# iframes have their own window).
LOOK_EVERY_100_MS = """if (window === window.top) {
  const onScreen = el => {
    if (!el || el.getClientRects().length === 0) return false;
    const box = el.getBoundingClientRect();
    return box.bottom >= 0 && box.top < innerHeight;
  };
  const any = selector => [...document.querySelectorAll(selector)].some(onScreen);
  const working = () => {
    const panel = document.querySelector(".st-key-result-panel");
    if (!onScreen(panel)) return false;
    const after = getComputedStyle(panel, "::after");
    return after.content !== "none" && after.content !== "normal" && parseFloat(after.opacity) > 0;
  };
  window.lmvizLooks = [];
  setInterval(() => window.lmvizLooks.push([Date.now(), any("[data-testid='stMain'] h1"),
    any(".st-key-first-visit-progress") || any("[data-testid='stSpinner']") || working(), any(%s)]), 100);
}""" % json.dumps(PANEL_NUMBER)


@dataclass
class Visit:
    lesson: Lesson
    title: float | None  # seconds from opening the link to the title on screen (None: never)
    progress: float | None  # ... to a progress indicator on screen
    number: float  # ... to the pinned panel's first number
    without: float  # seconds between the title and the first number with neither progress nor a number


def summarise(lesson: Lesson, opened_ms: float, looks: list[list]) -> Visit:
    """A Visit from the page's looks ([ms, title, progress, number] each, in order), timed from opened_ms."""
    def first(column: int) -> float | None:
        return next(((look[0] - opened_ms) / 1000 for look in looks if look[column]), None)

    number_at = next(i for i, look in enumerate(looks) if look[3])
    title_at = next((i for i, look in enumerate(looks) if look[1]), number_at)
    # a look that found neither counts until the next look
    without = sum(looks[i + 1][0] - looks[i][0] for i in range(title_at, number_at) if not looks[i][2]) / 1000
    return Visit(lesson, first(1), first(2), first(3), without)


def cold_lesson_visit(chromium: str, lesson: Lesson) -> Visit:
    """A fresh server (warm start on, as by default) and a fresh chromium's tab that opens the lesson's address
    the moment the health check answers: what the student sees, and when."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)  # the student's, already open
        tab = browser.new_page(viewport={"width": 1280, "height": 720})
        tab.add_init_script(LOOK_EVERY_100_MS)
        with environment_set({"LMVIZ_WARM_START": "1"}), \
                running_server(ROOT / "artifacts" / "first-visit-lesson-benchmark.log") as url:
            opened_ms = time.time() * 1000
            tab.goto(f"{url}/{lesson.url_path}", wait_until="commit")
            tab.wait_for_selector(PANEL_NUMBER, timeout=300_000)
            tab.wait_for_function("window.lmvizLooks.some(look => look[3])", timeout=60_000)
            looks = tab.evaluate("window.lmvizLooks")
        browser.close()
    return summarise(lesson, opened_ms, looks)


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter wait and no cold-cache row (for CI)")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds between the home page and Your sentence")
    parser.add_argument("--home-drawn", metavar="URL",
                        help="only print the Unix time at which URL's home page is drawn")
    parser.add_argument("--lessons", help="which lessons' cold first visit, by address (default: every lesson "
                                           "of the path, in its order; with --quick: sentence)")
    args = parser.parse_args()
    lessons = (args.lessons or ("sentence" if args.quick else ",".join(lesson.url_path for lesson in PATH))).split(",")
    by_path = {lesson.url_path: lesson for lesson in PATH}
    if unknown := set(lessons) - set(by_path):
        parser.error(f"no such lesson: {', '.join(sorted(unknown))} (choose from {', '.join(by_path)})")
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed (apt-get install chromium): nothing measured.")
        raise SystemExit(1 if args.home_drawn else 0)  # a caller waiting for a time must not read this as one
    if args.home_drawn:
        print(f"{home_drawn_at(chromium, args.home_drawn):.3f}")
        return
    wait = 5.0 if args.quick else args.wait
    prepare_bundled()  # the weights cache on disk is warm for the first two rows
    rows = [("warmed from the first visit (default)", {"LMVIZ_WARM_START": "1"}),
            ("not warmed (LMVIZ_WARM_START=0)", {"LMVIZ_WARM_START": "0"})]
    empty_cache = tempfile.mkdtemp(prefix="lmviz-cold-")
    if not args.quick:
        rows.append(("warmed, on a machine that never dequantised it", {"LMVIZ_WARM_START": "1",
                                                                         "LMVIZ_CACHE": empty_cache}))
    print(f"Server start -> home page -> {wait:.0f} s -> Your sentence, 1280x720, this machine "
          f"({os.cpu_count()} CPUs)\n")
    print(f"| {'server':<48} | health answers | home drawn | Your sentence opened → its loss on screen |")
    print(f"|{'-' * 50}|---------------:|-----------:|------------------------------------------:|")
    for name, environment in rows:
        health, home, sentence = first_visit(chromium, wait, environment)
        print(f"| {name:<48} | {health:12.1f} s | {home:8.1f} s | {sentence:39.1f} s |", flush=True)
    shutil.rmtree(empty_cache, ignore_errors=True)

    print("\nA student's link opened as soon as a fresh server's health check answers (warm start on, weights "
          "cache warm), 1280x720; seconds from opening it\n")
    print(f"| {'lesson':<24} | title | progress | first number | progress throughout |")
    print(f"|{'-' * 26}|------:|---------:|-------------:|--------------------|")
    for path in lessons:
        visit = cold_lesson_visit(chromium, by_path[path])
        throughout = "yes" if visit.without == 0 else f"no ({visit.without:.1f} s without)"
        print(f"| {visit.lesson.title:<24} | {seconds(visit.title):>5} | {seconds(visit.progress):>8} | "
              f"{seconds(visit.number):>12} | {throughout:<18} |", flush=True)


if __name__ == "__main__":
    main()
