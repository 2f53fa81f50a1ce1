"""A real Streamlit server and a real browser (Debian's chromium, driven by Playwright)."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# where the page screenshots go: CI keeps them as artifacts; scripts/update_screenshots sets docs/screenshots
ARTIFACTS = Path(os.environ.get("LMVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def chromium_path():
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("LMVIZ_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (apt-get install chromium); CI requires the browser tests.")
        pytest.skip("chromium is not installed: apt-get install chromium to run the browser tests")
    return path


@pytest.fixture(scope="session")
def server(chromium_path):
    """scripts/serve, exactly as the Docker image runs it, on a free loopback port."""
    port = _free_port()
    env = {**os.environ, "PORT": str(port), "ADDRESS": "127.0.0.1", "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    (ROOT / "artifacts").mkdir(exist_ok=True)
    log = open(ROOT / "artifacts" / "streamlit.log", "w")
    process = subprocess.Popen([str(ROOT / "scripts" / "serve")], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("streamlit did not answer on /_stcore/health within 120 s")
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture()
def page(browser, server):
    """A fresh browser tab; any JavaScript dialog (alert) is recorded, and fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 2600})
    tab = context.new_page()
    tab.dialogs = []
    tab.on("dialog", lambda dialog: (tab.dialogs.append(dialog.message), dialog.dismiss()))
    tab.goto(server)  # the home page first: a deep link opened before any script run shows a spurious
    tab.wait_for_selector("[data-testid='stMain'] h1")  # "Page not found" (streamlit/streamlit#9992)
    yield tab
    assert tab.dialogs == [], f"a dialog fired: {tab.dialogs}"
    context.close()
