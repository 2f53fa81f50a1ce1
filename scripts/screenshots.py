"""Open each page of a running lmviz in headless Chromium and save a screenshot.

    python scripts/screenshots.py http://localhost:8501 artifacts/screenshots [path?query ...]
"""

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEFAULT_PAGES = ["", "toy", "sentence"]


def main(base: str, out: Path, pages: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 3200})
        # Open the home page first: Streamlit shows a spurious "Page not found" on a deep link
        # opened before the first script run has registered the pages (streamlit/streamlit#9992).
        page.goto(base)
        page.wait_for_selector("[data-testid='stApp']")
        for path in pages:
            page.goto(f"{base}/{path}")
            page.wait_for_selector("[data-testid='stMain'] h1")
            # finished when nothing is running and no element is still a loading placeholder
            page.wait_for_function(
                "!document.querySelector('[data-testid=\"stStatusWidget\"]') && "
                "!document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=120000)
            page.wait_for_timeout(1000)
            name = (path.split("?")[0] or "home").replace("/", "_")
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            print("saved", out / f"{name}.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:] or DEFAULT_PAGES)
