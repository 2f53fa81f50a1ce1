"""Presentation mode and the warm start, headless (the browser tests measure them on screen)."""

import subprocess
import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

from lmviz.app import chrome, warm
from tests.helpers import APP

ROOT = Path(__file__).resolve().parents[2]


def test_app_py_imports_no_torch_before_the_home_page_is_drawn():
    done = subprocess.run([sys.executable, "-c", "import sys, lmviz.app.chrome; print('torch' in sys.modules)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_presentation_mode_from_a_link_stays_on_from_page_to_page():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["present"] = "1"
    at.run()
    assert at.session_state[chrome.PRESENT_KEY] is True
    assert any(f"font-size: {chrome.BODY_PX}px" in h.proto.body for h in at.get("html"))
    at.switch_page("app_pages/next_sentence.py").run()
    assert not at.exception and at.session_state[chrome.PRESENT_KEY] is True
    assert any(f"font-size: {chrome.BODY_PX}px" in h.proto.body for h in at.get("html"))
    at.toggle(key=chrome.PRESENT_KEY).set_value(False).run()
    assert not any(f"font-size: {chrome.BODY_PX}px" in h.proto.body for h in at.get("html"))


def footer_queries(at) -> dict[str, str]:
    """The lesson footer's links (Previous / Next / back to Home): label -> query string."""
    return {link.proto.label: link.proto.query_string for link in at.get("page_link")
            if link.proto.label.startswith(("Previous:", "Next:", "The end of the path"))}


def test_presentation_mode_is_kept_in_the_address_and_the_lesson_links():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.toggle(key=chrome.PRESENT_KEY).set_value(True).run()  # the switch: ?present=1 joins the address
    assert at.query_params[chrome.PRESENT_KEY] == "1"
    assert any("stSidebarCollapseButton" in h.proto.body for h in at.get("html"))  # the sidebar is folded
    at.switch_page("app_pages/toy_example.py").run()
    assert not at.exception and at.query_params[chrome.PRESENT_KEY] == "1"
    links = footer_queries(at)
    assert links and all("present=1" in query for query in links.values()), links
    at.toggle(key=chrome.PRESENT_KEY).set_value(False).run()  # off: gone from the address and the links
    assert chrome.PRESENT_KEY not in at.query_params
    assert not any("present=1" in query for query in footer_queries(at).values())
    assert not any("stSidebarCollapseButton" in h.proto.body for h in at.get("html"))


def test_opening_any_page_warms_the_bundled_model_in_the_background(monkeypatch):
    from lmviz.app import caches, training
    from lmviz.models.loading import DEFAULT_MODEL
    from lmviz.models.settings import default_dtype

    monkeypatch.setenv("LMVIZ_WARM_START", "1")  # the default, which tests/conftest.py turns off
    warm.warmer = warm._Warmer()  # as in a fresh server process (other tests opened pages before)
    for cached in (training.cached_gradient, training.cached_sgd_steps, training.cached_group,
                   training.cached_grpo_step):
        cached.clear()  # what other tests computed in this process: the warm start must compute it
    assert not warm.warmer.started
    AppTest.from_file(APP, default_timeout=60).run()  # the home page: it loads no model itself
    assert warm.warmer.started
    warm.warmer._thread.join(timeout=300)
    assert warm.warmer.error is None and warm.warmer.message == f"{DEFAULT_MODEL} is ready"
    # the pages' loader (Your sentence's defaults, Batches) finds the very object the warm start made
    assert caches.get_batcher(DEFAULT_MODEL, "auto", default_dtype(), None) is warm.warmer.batcher()
    # and the two training pages, opened on their defaults, find their results computed: they compute nothing
    assert warm.warmer.defaults_error is None
    computed = []
    for name in ("logit_gradient", "sgd_steps"):
        monkeypatch.setattr(training, name, lambda *args, name=name, **kwargs: computed.append(name))
    for name in ("sample_group", "grpo_step"):
        monkeypatch.setattr(training.grpo, name, lambda *args, name=name, **kwargs: computed.append(name))
    for page in ("app_pages/gradient_step.py", "app_pages/grpo.py"):
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.switch_page(page).run()
        assert not at.exception and computed == [], (page, computed)


def test_a_first_visit_says_the_model_is_being_prepared_only_while_it_is(monkeypatch):
    """The status of a session's first drawing of a page is true of that visit: on a server that has run for an hour
    the model is ready, and the page says only that it is loading."""
    fresh = warm._Warmer()
    monkeypatch.setattr(warm, "warmer", fresh)
    assert chrome.first_visit_sentence() == "Loading this lesson."  # nothing started (LMVIZ_WARM_START=0)
    fresh._thread, fresh.model, fresh.fraction, fresh.message = object(), "SmolLM2-135M-Instruct", 0.95, "Loading…"
    assert chrome.first_visit_sentence() == ("Loading this lesson. The server is still preparing SmolLM2-135M-Instruct "
                                             "in the background (95 %: Loading…); a lesson that uses it waits for it.")
    fresh.seconds = 12.0  # ready
    assert chrome.first_visit_sentence() == "Loading this lesson."
