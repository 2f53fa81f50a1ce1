"""A real Streamlit server and a real browser (Debian's chromium, driven by Playwright)."""

import os
import shutil

import pytest

from scripts.live_server import CHROMIUM_FLAGS, ROOT, running_server
from tests.e2e.helpers import WHOLE_PAGE


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
    """scripts/serve, exactly as the Docker image runs it, on a free loopback port: one per worker, each browser group's
    own (tests/conftest.py, BROWSER_GROUPS), with a log of its own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    with running_server(ROOT / "artifacts" / (f"streamlit-{worker}.log" if worker else "streamlit.log")) as url:
        yield url


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def watched_tab(browser, viewport: dict):
    """A fresh browser tab; any JavaScript dialog (alert) is recorded, and fails the test."""
    context = browser.new_context(viewport=viewport)
    tab = context.new_page()
    tab.dialogs = []
    tab.on("dialog", lambda dialog: (tab.dialogs.append(dialog.message), dialog.dismiss()))
    yield tab
    assert tab.dialogs == [], f"a dialog fired: {tab.dialogs}"
    context.close()


@pytest.fixture()
def new_tab(browser):
    """Opens tabs, each in a browser context of its own (``new_tab(viewport, **options)`` -> (context, tab)), and
    closes every one when the test ends, passed or failed. A tab left open goes on polling (the live class's pages,
    every few seconds) or retrying a server that has stopped, and its renderer took a share of a core for the rest
    of the run."""
    contexts = []

    def open_tab(viewport: dict | None = None, **options):
        context = browser.new_context(viewport=viewport, **options) if viewport else browser.new_context(**options)
        contexts.append(context)
        return context, context.new_page()

    yield open_tab
    for context in contexts:
        context.close()


@pytest.fixture()
def page(browser, server):
    """A tall tab: a whole page at once, for screenshots and reading far down."""
    yield from watched_tab(browser, WHOLE_PAGE)


@pytest.fixture()
def projector(browser, server):
    """A classroom projector's screen, 1280×720."""
    yield from watched_tab(browser, {"width": 1280, "height": 720})


@pytest.fixture()
def haproxy(chromium_path):
    """HAProxy for the tests of replicas behind it (scripts/replicas.py): skipped where it is not installed, and
    failed in CI (LMVIZ_REQUIRE_BROWSER), which installs it."""
    from scripts.replicas import haproxy_path

    if haproxy_path() is None:
        if os.environ.get("LMVIZ_REQUIRE_BROWSER"):
            pytest.fail("haproxy is not installed (apt-get install haproxy); CI requires these tests.")
        pytest.skip("haproxy is not installed: apt-get install haproxy to run these tests")
