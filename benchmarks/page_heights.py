"""How tall is each lesson on a projector: every lesson's page height at 1280x720, in screens.

    python -m benchmarks.page_heights [--url URL] [--present] [--lessons toy,sentence,...]

Starts scripts/serve on a free port (or measures the server at --url), opens each lesson of the path in a fresh
chromium tab at 1280x720 in default mode (presentation mode with --present), waits until the page has settled
(the script run over, no loading placeholder, and the main area's height unchanged for a second) and reports the
main area's scrollHeight (``[data-testid=stMain]``, the element that scrolls) in px and in 720-px screens.
tests/e2e/test_projector_screen.py holds every lesson to MAX_SCREENS of them.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil

from lmviz.course.registry import PATH
from scripts.live_server import CHROMIUM_FLAGS, ROOT, running_server, settled_height

WIDTH, HEIGHT = 1280, 720


def measure(url: str, lessons, present: bool) -> dict[str, int]:
    from playwright.sync_api import sync_playwright

    heights = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_FLAGS)
        for lesson in lessons:
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            tab = context.new_page()
            tab.goto(f"{url}/{lesson.url_path}{'?present=1' if present else ''}")
            heights[lesson.url_path] = settled_height(tab, timeout_s=300)
            context.close()
        browser.close()
    return heights


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running lmviz to measure (default: start scripts/serve)")
    parser.add_argument("--present", action="store_true", help="presentation mode (?present=1)")
    parser.add_argument("--lessons", help="comma-separated url paths (default: every lesson of the path)")
    args = parser.parse_args(argv)
    lessons = [lesson for lesson in PATH if not args.lessons or lesson.url_path in args.lessons.split(",")]
    with (contextlib.nullcontext(args.url) if args.url
          else running_server(ROOT / "artifacts" / "page-heights.log")) as url:
        heights = measure(url, lessons, args.present)
    print(f"Page heights at {WIDTH}x{HEIGHT}, {'presentation' if args.present else 'default'} mode "
          f"(stMain scrollHeight; a screen is {HEIGHT} px)")
    print(f"{'lesson':<24} {'px':>7} {'screens':>8}")
    for lesson in lessons:
        height = heights[lesson.url_path]
        print(f"{lesson.title:<24} {height:>7,} {height / HEIGHT:>8.1f}")


if __name__ == "__main__":
    main()
