"""Presentation mode and the warm start, headless (the browser tests measure them on screen)."""

import subprocess
import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

from lmviz import classroom
from tests.helpers import APP

ROOT = Path(__file__).resolve().parent.parent


def test_app_py_imports_no_torch_before_the_home_page_is_drawn():
    done = subprocess.run([sys.executable, "-c", "import sys, lmviz.classroom; print('torch' in sys.modules)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_presentation_mode_from_a_link_stays_on_from_page_to_page():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["present"] = "1"
    at.run()
    assert at.session_state[classroom.PRESENT_KEY] is True
    assert any(f"font-size: {classroom.BODY_PX}px" in h.proto.body for h in at.get("html"))
    at.switch_page("app_pages/next_sentence.py").run()
    assert not at.exception and at.session_state[classroom.PRESENT_KEY] is True
    assert any(f"font-size: {classroom.BODY_PX}px" in h.proto.body for h in at.get("html"))
    at.toggle(key=classroom.PRESENT_KEY).set_value(False).run()
    assert not any(f"font-size: {classroom.BODY_PX}px" in h.proto.body for h in at.get("html"))


def test_opening_any_page_warms_the_bundled_model_in_the_background(monkeypatch):
    from lmviz import ui
    from lmviz.deployment import default_dtype
    from lmviz.models import DEFAULT_MODEL

    monkeypatch.setenv("LMVIZ_WARM_START", "1")  # the default, which tests/conftest.py turns off
    classroom.warmer = classroom._Warmer()  # as in a fresh server process (other tests opened pages before)
    assert not classroom.warmer.started
    AppTest.from_file(APP, default_timeout=60).run()  # the home page: it loads no model itself
    assert classroom.warmer.started
    classroom.warmer._thread.join(timeout=300)
    assert classroom.warmer.error is None and classroom.warmer.message == f"{DEFAULT_MODEL} is ready"
    # the pages' loader (Your sentence's defaults, Batches) finds the very object the warm start made
    assert ui.get_batcher(DEFAULT_MODEL, "auto", default_dtype(), None) is classroom.warmer.batcher()
