"""python -m lmviz prepare and the offline listing: a local folder checked and measured, a hub id found in
a hub cache laid out as huggingface_hub lays it out, and one sentence for whatever cannot be prepared."""

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lmviz.__main__ import main
from lmviz.models import offline as prepare
from lmviz.models.loading import SHIPPED, TINY_BERT, TINY_GPT
from lmviz.models.pretrained import from_pretrained

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def put_in_hub_cache(cache: Path, repo_id: str, files_from: Path) -> Path:
    """A hub cache entry as huggingface_hub writes one: models--org--name/{refs/main, snapshots/<commit>/}.
    (The hub links snapshot files to blobs/; scan_cache_dir and from_pretrained also read plain files.)"""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(files_from, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def run_prepare(names, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    code = prepare.run(names, only=True, out=out, err=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


# --- the kind comes from the config -------------------------------------------------------------------------


@pytest.mark.parametrize("config, kind", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "causal"),
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "causal"),
    ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, "bert"),  # bert-base-uncased's own config
    ({"model_type": "bert", "architectures": ["BertForPreTraining"]}, "bert"),
    ({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}, None),
    ({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"]}, None),  # roberta has a ForCausalLM class too
    ({"model_type": "bert", "architectures": ["BertForSequenceClassification"]}, None),  # its LM heads would be random
    ({"model_type": "bert", "architectures": ["BertLMHeadModel"]}, "causal"),
    ({"model_type": "gpt2"}, "causal"),
    ({"model_type": "roberta"}, None),
])
def test_kind_is_read_from_model_type_and_architectures(config, kind):
    assert prepare.kind_of_config(config) == kind


# --- a local folder -------------------------------------------------------------------------------------------


def test_a_local_folder_is_checked_offline_and_printed_with_its_size(tmp_path):
    folder = shutil.copytree(SHIPPED[TINY_GPT], tmp_path / "my model")
    code, out, err = run_prepare([str(folder)])
    assert code == 0, err
    assert err == ""
    row = next(line for line in out.splitlines() if line.startswith(str(folder)))
    assert row.split()[2:4] == ["causal", f"{folder_bytes(folder) / 1e6:.1f}"]
    assert row.endswith(str(folder.resolve()))


def test_a_folder_whose_name_says_gpt_but_holds_a_bert_is_a_bert(tmp_path):
    folder = shutil.copytree(SHIPPED[TINY_BERT], tmp_path / "gpt-ish")
    assert prepare.prepare_one(str(folder)).kind == "bert"


@pytest.mark.parametrize("make, message", [
    (lambda f: (f / "notes.txt").write_text("hello"), "is not a model: it has no config.json."),
    (lambda f: (f / "config.json").write_text(json.dumps({"model_type": "t5"})), "so no page can use it."),
    (lambda f: shutil.copy(SHIPPED[TINY_GPT] / "config.json", f), "does not load from local files"),
])
def test_a_folder_that_is_not_a_usable_model_gets_one_sentence(tmp_path, make, message):
    folder = tmp_path / "folder"
    folder.mkdir()
    make(folder)
    code, out, err = run_prepare([str(folder)])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("lmviz: ") and message in err
    assert "Traceback" not in err


# --- the hub cannot be reached ---------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once the socket closes: nothing listens there


def test_an_unreachable_hub_is_one_sentence_naming_the_models_within_seconds(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    local = shutil.copytree(SHIPPED[TINY_GPT], tmp_path / "local")
    start = time.perf_counter()
    code, out, err = run_prepare(["someone/model-a", str(local), "someone/model-b"])
    assert time.perf_counter() - start < 10  # the local folder's check included
    assert code == 2 and str(local) in out  # what could be prepared still is
    assert err.splitlines() == ["lmviz: someone/model-a and someone/model-b are not on this machine and the Hugging "
                                "Face hub cannot be reached, so they could not be prepared; "
                                "run this again while online."]


def test_with_hf_hub_offline_set_the_sentence_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    code, out, err = run_prepare(["gpt2"])
    assert code == 2 and err == ("lmviz: gpt2 is not on this machine and HF_HUB_OFFLINE is set, so it could not be "
                                 "prepared; run this again while online.\n")


def test_a_name_that_is_neither_a_folder_nor_a_hub_id_gets_one_sentence(tmp_path):
    code, out, err = run_prepare([str(tmp_path / "no such folder")])
    assert code == 2 and err.splitlines() == [
        f"lmviz: {tmp_path / 'no such folder'} is neither a folder on this machine nor a Hugging Face hub id."]


# --- the offline listing ----------------------------------------------------------------------------------------


def test_the_listing_finds_a_cached_model_and_reads_its_kind_from_its_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    bert = put_in_hub_cache(tmp_path, "someone/gpt-named-bert", SHIPPED[TINY_BERT])
    gpt = put_in_hub_cache(tmp_path, "someone/tiny", SHIPPED[TINY_GPT])
    config_only = tmp_path / "config-only"  # what a mere look at a model (hub_cached) leaves behind
    config_only.mkdir()
    shutil.copy(SHIPPED[TINY_GPT] / "config.json", config_only)
    put_in_hub_cache(tmp_path, "someone/only-a-config", config_only)
    assert prepare.cached_models() == [
        ("someone/gpt-named-bert", "bert", bert, pytest.approx(folder_bytes(bert) / 1e6)),
        ("someone/tiny", "causal", gpt, pytest.approx(folder_bytes(gpt) / 1e6)),
    ]
    # ...and what it lists really loads from that cache with local files only
    model, _ = from_pretrained("someone/gpt-named-bert", "bert", local_files_only=True, cache_dir=str(tmp_path))
    assert type(model).__name__ == "BertForPreTraining"


def test_the_listing_of_a_missing_cache_is_empty(tmp_path):
    assert prepare.cached_models(tmp_path / "never created") == []


def test_prepare_list_prints_the_cached_models(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = put_in_hub_cache(tmp_path, "someone/tiny", SHIPPED[TINY_GPT])
    assert main(["prepare", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"hub cache {tmp_path} that lmviz can load offline: 1" in out
    assert out.splitlines()[-1].split() == ["someone/tiny", "causal", f"{folder_bytes(snapshot) / 1e6:.1f}", "MB",
                                            str(snapshot)]


# --- the command, as a teacher runs it ---------------------------------------------------------------------------


def test_prepare_runs_as_a_module_offline_for_a_cached_hub_id_and_a_folder(tmp_path):
    snapshot = put_in_hub_cache(tmp_path / "hub", "someone/tiny-bert", SHIPPED[TINY_BERT])
    folder = shutil.copytree(SHIPPED[TINY_GPT], tmp_path / "gpt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    done = subprocess.run([sys.executable, "-m", "lmviz", "prepare", "--only", "someone/tiny-bert", str(folder)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[2:]}
    assert rows["someone/tiny-bert"][1:] == ["bert", f"{folder_bytes(snapshot) / 1e6:.1f}", "MB", str(snapshot)]
    assert rows[str(folder)][1:] == ["causal", f"{folder_bytes(folder) / 1e6:.1f}", "MB", str(folder)]


@pytest.fixture
def fake_hub():
    """A local stand-in for the Hugging Face hub: serves files of lmviz's tiny models under made-up hub ids at
    the hub's resolve URLs, and answers 404 to everything else (the API calls transformers makes are optional)."""
    repos = {"someone/gpt-named-bert": SHIPPED[TINY_BERT]}

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _file(self) -> bytes | None:
            for repo_id, folder in repos.items():
                parts = self.path.split("?")[0].removeprefix(f"/{repo_id}/resolve/").split("/", 1)
                if len(parts) == 2 and (folder / parts[1]).is_file():
                    return (folder / parts[1]).read_bytes()
            return None

        def do_HEAD(self, body=False):
            data = self._file()
            known = any(f"/{repo_id}/" in self.path + "/" for repo_id in repos)  # its files and its API pages
            self.send_response(200 if data is not None else 404 if known else 401)
            if not known:  # what the hub answers for a repository that does not exist, or is private
                self.send_header("X-Error-Code", "RepoNotFound")
            if data is not None:
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            if body and data:
                self.wfile.write(data)

        def do_GET(self):
            self.do_HEAD(body=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_prepare_downloads_from_the_hub_then_loads_offline(fake_hub, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=fake_hub, HF_HUB_CACHE=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "lmviz", "prepare", "--only", "someone/gpt-named-bert",
                           "someone/not-on-the-hub"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == ("lmviz: someone/not-on-the-hub is not on the Hugging Face hub "
                                            "(or it is private, and needs HF_TOKEN).")
    snapshot = tmp_path / "models--someone--gpt-named-bert" / "snapshots" / COMMIT
    row = done.stdout.splitlines()[2].split()
    assert row == ["someone/gpt-named-bert", "bert", f"{folder_bytes(snapshot) / 1e6:.1f}", "MB", str(snapshot)]
    # what it downloaded is what the pickers list, and it loads with the hub switched off
    assert [(m.name, m.kind, m.where) for m in prepare.cached_models(tmp_path)] == [
        ("someone/gpt-named-bert", "bert", snapshot)]
    model, _ = from_pretrained("someone/gpt-named-bert", "bert", local_files_only=True, cache_dir=str(tmp_path))
    assert type(model).__name__ == "BertForPreTraining"


def test_the_defaults_are_the_bundled_model_bert_base_uncased_and_gpt2():
    assert prepare.default_names() == ["SmolLM2-135M-Instruct", "bert-base-uncased", "gpt2"]


def test_the_readme_and_the_teachers_page_give_the_before_class_step_with_the_defaults_it_downloads():
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text().split())
    step = readme[readme.index("run `.venv/bin/python -m lmviz prepare` once while online"):].split("\n")[0][:200]
    offline = " ".join((root / "docs" / "teachers" / "offline.md").read_text().split())
    assert "python -m lmviz prepare" in offline
    for name in prepare.DEFAULT_MODELS:
        assert f"`{name}`" in step, name
        assert f"`{name}`" in offline, name


def test_the_model_pickers_offer_what_is_cached_here(tmp_path, monkeypatch):
    """After `prepare`, the pages offer what it cached: the BERT picker lists a cached BERT, and the
    causal-LM model box names the cached causal LMs."""
    from tests.helpers import open_page

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    put_in_hub_cache(tmp_path, "someone/cached-bert", SHIPPED[TINY_BERT])
    put_in_hub_cache(tmp_path, "someone/cached-gpt", SHIPPED[TINY_GPT])
    at = open_page("app_pages/masked_lm.py")
    assert "someone/cached-bert" in at.selectbox(key="bert_choice").options
    assert "someone/cached-gpt" not in at.selectbox(key="bert_choice").options
    at = open_page("app_pages/your_sentence.py")
    assert "On this machine, so offline too\\: someone/cached\\-gpt\\." in [c.value for c in at.caption]
