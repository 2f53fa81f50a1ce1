"""The first visit of a class: does "Your sentence" answer at once?

    python -m benchmarks.first_visit [--quick] [--wait SECONDS]

A teacher starts the server, opens the home page, talks for a minute, then opens
"Your sentence". Each row starts a fresh server (scripts/serve) and a fresh
chromium, opens the home page, waits, opens "Your sentence" and reports the seconds
until its loss is on screen (the times to the health check and the home page count from
the server's start), with the bundled model warmed in the background
from the first visit (the default) and without (LMVIZ_WARM_START=0). The weights
cache on disk is warm in both rows (the model has been dequantised on this machine
before); the dequantisation a brand-new machine adds (~40 s) is the last row,
in the full run only.

    python -m benchmarks.first_visit --home-drawn URL

opens URL's home page in a fresh chromium and prints the Unix time at which it was drawn: scripts/rehearse_docker
times a server it started itself (process start -> home page drawn) with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter wait and no cold-cache row (for CI)")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds between the home page and Your sentence")
    parser.add_argument("--home-drawn", metavar="URL",
                        help="only print the Unix time at which URL's home page is drawn")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed (apt-get install chromium): nothing measured.")
        raise SystemExit(1 if args.home_drawn else 0)  # a caller waiting for a time must not read this as one
    if args.home_drawn:
        print(f"{home_drawn_at(chromium, args.home_drawn):.3f}")
        return
    wait = 20.0 if args.quick else args.wait
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


if __name__ == "__main__":
    main()
