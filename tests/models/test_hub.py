"""A public server is safe by default (issue 20): a hub model's size is read from the hub's metadata before any
weight file is requested, and refused above LMVIZ_MAX_MODEL_GB; one download runs at a time per process.

The hub is a stand-in on loopback that serves lmviz's own tiny GPT (assets/tiny-gpt) under made-up hub ids,
answers the requests the hub client makes (the model_info API, HEAD and GET of /{repo}/resolve/{rev}/{file})
and records every one of them."""

import hashlib
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from lmviz.errors import ModelLoadError
from lmviz.models import hub
from lmviz.models.loading import SHIPPED, TINY_GPT
from lmviz.models.pretrained import from_pretrained, load_named
from lmviz.models.settings import DEFAULT_MAX_MODEL_GB, max_model_gb

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY = SHIPPED[TINY_GPT]
WEIGHTS = re.compile(r".*\.(safetensors|bin)$")


class StandInHub:
    """Serves TINY's files for each hub id in ``repos``; ``sizes`` overrides the sizes its metadata claims
    (None: no size). Weight GETs wait ``delay`` seconds, and the most in flight at once is kept."""

    def __init__(self, repos, sizes=None, delay=0.0):
        self.files = {p.name: p.read_bytes() for p in TINY.iterdir() if p.is_file()}
        self.repos, self.sizes, self.delay = set(repos), sizes or {}, delay
        self.requests, self.in_flight, self.most_in_flight = [], 0, 0
        self.weight_asked = threading.Event()
        self.lock = threading.Lock()

    def metadata(self, repo, blobs):
        """The model_info API's answer: the hub gives each file's size only when asked for blobs."""
        siblings = [{"rfilename": name, **({"size": self.sizes.get(name, len(data))} if blobs else {})}
                    for name, data in self.files.items()]
        return {"id": repo, "sha": COMMIT, "siblings": siblings}

    def tree(self):
        """The list_repo_tree API's answer for the repo's root."""
        return [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in self.files.items()]

    def file(self, path):
        """(repo, bytes) of a /{repo}/resolve/{rev}/{file} path; bytes None when there is no such file."""
        match = re.fullmatch(r"/(.+?/.+?)/resolve/[^/]+/(.+)", path)
        if not match or match[1] not in self.repos:
            return None, None
        return match[1], self.files.get(match[2])

    def weights_requested(self):
        """The weight files downloaded (GET; a HEAD only reads a file's size and etag)."""
        return [path for method, path in self.requests
                if method == "GET" and "/resolve/" in path and WEIGHTS.match(path)]


def _handler(stand_in):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status, body=b"", headers=()):
            self.send_response(status)
            for key, value in [("Content-Length", str(len(body))), *headers]:
                self.send_header(key, value)
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        def _answer(self):
            path = self.path.split("?")[0]
            with stand_in.lock:
                stand_in.requests.append((self.command, self.path))
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(/revision/main|/tree/main)?", path)
            if path == "/api/models":
                return self._send(200)
            if api and api[1] in stand_in.repos:
                blobs = "blobs=true" in self.path
                answer = stand_in.tree() if api[2] == "/tree/main" else stand_in.metadata(api[1], blobs)
                return self._send(200, json.dumps(answer).encode(), [("Content-Type", "application/json")])
            repo, data = stand_in.file(path)
            if data is None:  # e.g. the tokenizer's look for an additional_chat_templates folder: the hub's 404
                known = any(path.startswith((f"/{r}/", f"/api/models/{r}/")) for r in stand_in.repos)
                return self._send(404, headers=[("X-Error-Code", "EntryNotFound" if known else "RepoNotFound"),
                                                ("X-Repo-Commit", COMMIT)])
            if self.command == "GET" and WEIGHTS.match(path):
                return self._send_weights(data)
            self._send(200, data, self._file_headers(data))

        def _send_weights(self, data):
            with stand_in.lock:
                stand_in.in_flight += 1
                stand_in.most_in_flight = max(stand_in.most_in_flight, stand_in.in_flight)
            stand_in.weight_asked.set()
            time.sleep(stand_in.delay)  # a big file takes a while: a second download would overlap it
            with stand_in.lock:
                stand_in.in_flight -= 1
            self._send(200, data, self._file_headers(data))

        @staticmethod
        def _file_headers(data):
            return [("X-Repo-Commit", COMMIT), ("ETag", f'"{hashlib.sha256(data).hexdigest()}"')]

        do_GET = do_HEAD = _answer

        def log_message(self, *args):
            pass

    return Handler


def _point_the_client_at(monkeypatch, endpoint, cache):
    """The hub client reads these once, at import (conftest set HF_HUB_OFFLINE=1 before): set them here."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)  # read by lmviz.models.pretrained.hub_reachable
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)  # HfApi's default endpoint
    monkeypatch.setattr("huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")  # every file download
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))  # never the run's shared cache
    monkeypatch.setattr("transformers.utils.hub._hf_api", None)  # transformers' own HfApi keeps its endpoint


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """start(repos, sizes=, delay=): a running StandInHub the hub client talks to, with an empty hub cache."""
    servers = []
    monkeypatch.delenv("LMVIZ_MAX_MODEL_GB", raising=False)  # the default cap, whatever this machine sets

    def start(repos, **options):
        hub_state = StandInHub(repos, **options)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub_state))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        _point_the_client_at(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "hub")
        return hub_state

    yield start
    for server in servers:
        server.shutdown()


def _same_model(loaded, reference) -> bool:
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        return torch.equal(loaded(ids).logits, reference(ids).logits)


@pytest.fixture(scope="module")
def tiny_reference():
    return from_pretrained(str(TINY), local_files_only=True)[0]


# --- size before download ---------------------------------------------------------------------------------------


def test_a_model_over_the_cap_is_refused_before_any_file_is_requested(stand_in):
    hub_state = stand_in({"someone/huge"}, sizes={"model.safetensors": 5_000_000_000})
    with pytest.raises(ModelLoadError) as refused:
        load_named("someone/huge", None)
    assert str(refused.value) == ("'someone/huge' is 5.00 GB of weights, over this server's download cap of "
                                  "1.00 GB (LMVIZ_MAX_MODEL_GB), so it is not downloaded.")
    assert not [path for _, path in hub_state.requests if "/resolve/" in path]  # not even its config
    assert ("GET", "/api/models/someone/huge/revision/main?blobs=true") in hub_state.requests


def test_a_model_under_the_cap_is_downloaded_and_loads(stand_in, tiny_reference):
    hub_state = stand_in({"someone/tiny"})
    model, tokenizer, source = load_named("someone/tiny", None)
    assert source == "Hugging Face hub id someone/tiny"
    assert _same_model(model, tiny_reference)  # the very weights the stand-in served
    assert hub_state.weights_requested() == ["/someone/tiny/resolve/main/model.safetensors"]
    first_download = hub_state.requests.index(("GET", "/someone/tiny/resolve/main/model.safetensors"))
    assert any(path.startswith("/api/models/someone/tiny") for _, path in hub_state.requests[:first_download])


def test_a_model_already_in_the_hub_cache_is_not_checked_again(stand_in, monkeypatch):
    hub_state = stand_in({"someone/tiny"})
    load_named("someone/tiny", None)
    hub_state.requests.clear()
    monkeypatch.setenv("LMVIZ_MAX_MODEL_GB", "0")  # would refuse it, were it asked
    assert load_named("someone/tiny", None)[2] == "Hugging Face hub id someone/tiny (from this machine's hub cache)"
    assert hub_state.requests == []


def test_the_cap_is_the_setting(stand_in, monkeypatch):
    stand_in({"someone/tiny"})
    size_gb = (TINY / "model.safetensors").stat().st_size / 1e9
    monkeypatch.setenv("LMVIZ_MAX_MODEL_GB", f"{size_gb / 2}")
    with pytest.raises(ModelLoadError, match=r"is 0\.00 GB of weights, over this server's download cap of 0\.00 GB"):
        load_named("someone/tiny", None)
    monkeypatch.setenv("LMVIZ_MAX_MODEL_GB", f"{size_gb}")  # exactly the size: allowed
    assert load_named("someone/tiny", None)[2] == "Hugging Face hub id someone/tiny"


def test_a_model_whose_size_the_hub_does_not_give_is_refused(stand_in):
    hub_state = stand_in({"someone/unsized"}, sizes={"model.safetensors": None})
    with pytest.raises(ModelLoadError, match="does not say how big the weights of 'someone/unsized' are"):
        load_named("someone/unsized", None)
    assert hub_state.weights_requested() == []


def test_a_model_the_hub_does_not_know_is_one_sentence(stand_in):
    stand_in({"someone/tiny"})
    with pytest.raises(ModelLoadError) as refused:
        load_named("someone/nothing-here", None)
    assert str(refused.value) == ("'someone/nothing-here' is not on the Hugging Face hub, or it is private or gated "
                                  "and needs an access token.")


def test_an_unreachable_hub_gives_the_existing_sentence(monkeypatch, tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: every connection is refused
    _point_the_client_at(monkeypatch, f"http://127.0.0.1:{port}", tmp_path)
    with pytest.raises(ModelLoadError) as refused:
        load_named("someone/tiny", None)
    assert str(refused.value) == ("'someone/tiny' is not on this machine and the Hugging Face hub cannot be reached "
                                  "(no answer within 3 s), so it cannot be downloaded.")


# --- what from_pretrained would fetch, and the setting ------------------------------------------------------------


@pytest.mark.parametrize("files, weights", [
    ({"model.safetensors": 5, "pytorch_model.bin": 9, "tf_model.h5": 9, "onnx/model.onnx": 9},
     {"model.safetensors": 5}),
    ({"model.safetensors.index.json": 1, "model-00001-of-00002.safetensors": 5, "model-00002-of-00002.safetensors": 6,
      "consolidated.safetensors": 11},
     {"model.safetensors.index.json": 1, "model-00001-of-00002.safetensors": 5, "model-00002-of-00002.safetensors": 6}),
    ({"pytorch_model.bin": 7, "flax_model.msgpack": 7}, {"pytorch_model.bin": 7}),
    ({"pytorch_model.bin.index.json": 1, "pytorch_model-00001-of-00001.bin": 8},
     {"pytorch_model.bin.index.json": 1, "pytorch_model-00001-of-00001.bin": 8}),
    ({"tf_model.h5": 9, "model.gguf": 9, "model.safetensors.index.json": 1}, {}),
])
def test_the_weights_counted_are_those_from_pretrained_fetches(files, weights):
    assert hub.weight_files(files) == weights


@pytest.mark.parametrize("value, cap", [(None, DEFAULT_MAX_MODEL_GB), ("", DEFAULT_MAX_MODEL_GB), ("2.5", 2.5),
                                        (" 0 ", 0.0), ("inf", float("inf"))])
def test_the_cap_setting(monkeypatch, value, cap):
    if value is None:
        monkeypatch.delenv("LMVIZ_MAX_MODEL_GB", raising=False)
    else:
        monkeypatch.setenv("LMVIZ_MAX_MODEL_GB", value)
    assert max_model_gb() == cap


@pytest.mark.parametrize("value", ["two", "nan", "-1", "1GB"])
def test_a_broken_cap_setting_refuses_every_download_in_one_sentence(monkeypatch, value):
    monkeypatch.setenv("LMVIZ_MAX_MODEL_GB", value)
    with pytest.raises(ModelLoadError) as refused:
        max_model_gb()
    assert str(refused.value) == (f"LMVIZ_MAX_MODEL_GB must be a number of GB, such as 1 or 2.5 (it is {value!r}), "
                                  "so this server downloads no model until it is.")


# --- one download at a time ---------------------------------------------------------------------------------------


def _load_in_thread(name, results, heard):
    def run():
        try:
            results[name] = load_named(name, None, progress=lambda fraction, message: heard.append(message))
        except Exception as error:  # kept for the assertion, which shows it
            results[name] = error
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_two_new_models_at_once_download_one_at_a_time_and_the_second_says_so(stand_in, tiny_reference):
    hub_state = stand_in({"someone/first", "someone/second"}, delay=2.0)
    results, heard_first, heard_second = {}, [], []
    first = _load_in_thread("someone/first", results, heard_first)
    assert hub_state.weight_asked.wait(30)  # the first download is under way...
    assert hub.waiting_sentence("someone/second") == (
        "Another model, someone/first, is downloading on this server, which downloads one model at a time: "
        "someone/second waits for it…")  # what a page shows before it waits
    second = _load_in_thread("someone/second", results, heard_second)  # ...when the second is asked for
    first.join(60)
    second.join(60)
    assert all(isinstance(results[name], tuple) and _same_model(results[name][0], tiny_reference)
               for name in ("someone/first", "someone/second")), results
    assert hub_state.most_in_flight == 1
    assert len(hub_state.weights_requested()) == 2
    assert heard_first == []
    assert heard_second and heard_second[0].startswith(
        "Another model, someone/first, is downloading on this server, which downloads one model at a time: "
        "someone/second waits for it (")
    assert hub.download_under_way() is None


def test_the_same_new_model_twice_at_once_is_downloaded_once(stand_in):
    hub_state = stand_in({"someone/tiny"}, delay=2.0)
    results, heard = {}, []
    first = _load_in_thread("someone/tiny", results, [])
    assert hub_state.weight_asked.wait(30)
    second = threading.Thread(target=lambda: results.setdefault(
        "again", load_named("someone/tiny", None, progress=lambda fraction, message: heard.append(message))))
    second.start()
    first.join(60)
    second.join(60)
    assert hub_state.weights_requested() == ["/someone/tiny/resolve/main/model.safetensors"]
    assert results["again"][2] == "Hugging Face hub id someone/tiny (from this machine's hub cache)"
    assert heard and heard[0].startswith("someone/tiny is downloading for another page of this server")


def test_a_page_asked_for_a_model_over_the_cap_says_why_in_one_sentence(stand_in, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from lmviz.app import caches
    from tests.helpers import APP, unescaped

    stand_in({"someone/huge"}, sizes={"model.safetensors": 5_000_000_000})
    monkeypatch.setattr("lmviz.models.bundled.bundled_gguf", lambda: None)  # as on a host: the fallback is the tiny GPT
    caches.get_batcher.clear()
    caches.get_model.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["model"] = "someone/huge"
    at.run()
    at = at.switch_page("app_pages/your_sentence.py").run()
    caches.get_batcher.clear()
    caches.get_model.clear()
    said = " ".join(unescaped(w.value) for w in at.warning)
    assert not at.exception and at.metric  # scored with a fallback
    assert ("'someone/huge' is 5.00 GB of weights, over this server's download cap of 1.00 GB (LMVIZ_MAX_MODEL_GB), "
            "so it is not downloaded.") in said
