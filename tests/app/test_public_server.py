"""A public server is safe by default (issue 20): a visitor names a folder of the server only where the server
listens on loopback alone or the host set LMVIZ_ALLOW_LOCAL_PATHS=1, and is refused before anything reads the
disk with the name; what a failed load shows reveals no path, user name, exception class nor traceback; a
session over its minute's characters gets a sentence."""

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from lmviz.app.problems import problem_for_visitor
from lmviz.course.registry import PATH
from lmviz.errors import ModelLoadError
from lmviz.models.loading import FOLDERS_REFUSED, SHIPPED, TINY_GPT, check_visitor_name
from lmviz.models.settings import CHARS_PER_MINUTE_VARIABLE, local_paths_allowed
from tests.helpers import APP, open_page, unescaped

CHECKOUT = Path(APP).parent
# every page where a visitor may name a model, and the box they name it in (from the lesson registry)
BOX = {lesson.page: {"causal": "model_name", "bert": "bert_custom"}[lesson.model]
       for lesson in PATH if lesson.model_box}
EXCEPTION_CLASS = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")


@pytest.fixture
def listening_on(monkeypatch):
    """Sets Streamlit's server.address, the option lmviz.app.choosers reads, as `streamlit run --server.address`
    does."""
    monkeypatch.delenv("LMVIZ_ALLOW_LOCAL_PATHS", raising=False)
    yield lambda address: config.set_option("server.address", address)
    config._set_option("server.address", None, config.ConfigOption.DEFAULT_DEFINITION)


@pytest.fixture
def secret_model(tmp_path):
    """A folder that exists and would load (a copy of lmviz's tiny GPT), with a name seen nowhere else."""
    folder = tmp_path / "lmviz-secret-model"
    shutil.copytree(SHIPPED[TINY_GPT], folder)
    return folder


@pytest.fixture
def disk_reads(monkeypatch):
    """Every path the process asks the file system about (stat, lstat, listdir, scandir), as strings."""
    seen = []
    for name in ("stat", "lstat", "listdir", "scandir"):
        real = getattr(os, name)

        def recorded(path=".", *args, _real=real, **kwargs):
            seen.append(os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, recorded)
    return seen


@pytest.mark.parametrize("address, setting, allowed", [
    ("127.0.0.1", None, True), ("127.8.9.10", None, True), ("::1", None, True), ("[::1]", None, True),
    ("localhost", None, True), ("LocalHost", None, True),
    (None, None, False), ("", None, False), ("0.0.0.0", None, False), ("::", None, False),
    ("192.168.1.20", None, False), ("example.org", None, False), ("unix:///run/lmviz.sock", None, False),
    ("0.0.0.0", "1", True), (None, "yes", True), ("127.0.0.1", "0", False), ("127.0.0.1", "maybe", False),
])
def test_folders_are_allowed_on_loopback_or_when_the_host_says_so(address, setting, allowed, monkeypatch):
    if setting is None:
        monkeypatch.delenv("LMVIZ_ALLOW_LOCAL_PATHS", raising=False)
    else:
        monkeypatch.setenv("LMVIZ_ALLOW_LOCAL_PATHS", setting)
    assert local_paths_allowed(address) is allowed


def test_a_proxy_in_front_of_a_loopback_server_makes_it_public(monkeypatch):
    monkeypatch.delenv("LMVIZ_ALLOW_LOCAL_PATHS", raising=False)
    assert local_paths_allowed("127.0.0.1", proxied=False)
    assert not local_paths_allowed("127.0.0.1", proxied=True)


@pytest.mark.parametrize("name", ["/etc", "/etc/passwd", "~", "~root/.ssh", "./assets/tiny-gpt", "../../../etc",
                                  "assets/../lmviz", "a/b/c", "C:\\Users", "models\\gpt2", ".venv", ".."])
def test_a_path_is_refused_on_a_public_server_without_reading_the_disk(name, disk_reads):
    with pytest.raises(ModelLoadError) as refused:
        check_visitor_name(name, folders_allowed=False)
    assert str(refused.value) == FOLDERS_REFUSED
    assert disk_reads == []


@pytest.mark.parametrize("name", ["x" * 5000, "https://evil.example/model", "gpt2\n<script>", "a--b", "gpt2.git"])
def test_what_is_no_hub_id_is_refused_in_one_sentence_without_echoing_it(name, disk_reads):
    with pytest.raises(ModelLoadError) as refused:
        check_visitor_name(name, folders_allowed=False)
    assert "neither a Hugging Face hub id" in str(refused.value) and name not in str(refused.value)
    assert disk_reads == []


@pytest.mark.parametrize("name", ["gpt2", "HuggingFaceTB/SmolLM2-135M", "SmolLM2-135M-Instruct", "lmviz-tiny-gpt",
                                  "lmviz-tiny-bert", " gpt2 "])
def test_hub_ids_and_lmvizs_names_pass_on_a_public_server(name):
    assert check_visitor_name(name, folders_allowed=False) == name.strip()


@pytest.mark.parametrize("name", ["docs/screenshots", "gpt2"])
def test_a_hub_id_that_names_a_folder_of_the_working_folder_is_refused(name, tmp_path, monkeypatch, disk_reads):
    """transformers would load (or try) the folder rather than the hub model: the app's own checkout is its
    working folder, and a visitor must not reach into it either."""
    (tmp_path / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    disk_reads.clear()
    with pytest.raises(ModelLoadError, match=re.escape(FOLDERS_REFUSED)):
        check_visitor_name(name, folders_allowed=False)
    assert not [path for path in disk_reads if name in path]  # listed, never looked up by the visitor's name
    assert check_visitor_name("owner/model", folders_allowed=False) == "owner/model"


def test_a_folder_passes_where_folders_are_allowed(secret_model):
    assert check_visitor_name(str(secret_model), folders_allowed=True) == str(secret_model)


def test_the_ui_reads_where_streamlit_listens(listening_on):
    script = "import streamlit as st\nfrom lmviz.app import choosers\nst.write(str(choosers._folders_allowed()))"
    for address, allowed in [("127.0.0.1", "True"), ("0.0.0.0", "False"), (None, "False")]:
        listening_on(address)
        at = AppTest.from_string(script).run()
        assert [m.value for m in at.markdown] == [allowed], address


def _open(page: str, link_model: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    if link_model is not None:
        at.query_params["model"] = link_model
    at.run()
    return at.switch_page(page).run()


def _said(at: AppTest) -> list[str]:
    """Every text the page shows a visitor that a failed load can reach, as the reader sees it."""
    elements = [*at.error, *at.warning, *at.info, *at.caption, *at.markdown]
    return [unescaped(str(e.value)) for e in elements]


@pytest.mark.parametrize("how", ["box", "link"])
def test_a_public_server_refuses_a_folder_in_the_model_box_and_the_link(how, listening_on, secret_model, disk_reads):
    listening_on("0.0.0.0")
    page = "app_pages/your_sentence.py"
    at = _open(page, str(secret_model) if how == "link" else None)
    if how == "box":
        at.text_input(key="model_name").set_value(str(secret_model)).run()
    assert not at.exception
    assert any(FOLDERS_REFUSED in s and "This page uses SmolLM2-135M-Instruct" in s for s in _said(at)), _said(at)
    assert not [path for path in disk_reads if "lmviz-secret-model" in path]
    assert not any("local folder" in s for s in _said(at))  # the bundled model scored, not the folder
    assert "local folder" not in at.text_input(key="model_name").label  # not offered where it cannot load


def test_a_public_server_refuses_a_folder_in_the_bert_picker(listening_on, secret_model, disk_reads):
    listening_on("0.0.0.0")
    at = _open("app_pages/masked_lm.py")
    at.text_input(key="bert_custom").set_value(str(secret_model)).run()
    assert not at.exception
    assert [unescaped(e.value) for e in at.error] == [FOLDERS_REFUSED]
    assert not [path for path in disk_reads if "lmviz-secret-model" in path]
    assert any("lmviz-tiny-bert, lmviz's own tiny BERT" in c for c in _said(at))


@pytest.mark.parametrize("address, setting", [("127.0.0.1", None), ("::1", None), ("0.0.0.0", "1")])
def test_a_folder_loads_on_loopback_or_when_the_host_allows_it(address, setting, listening_on, monkeypatch):
    listening_on(address)
    if setting:
        monkeypatch.setenv("LMVIZ_ALLOW_LOCAL_PATHS", setting)
    folder = str(SHIPPED[TINY_GPT])  # assets/tiny-gpt, named as a folder rather than as lmviz-tiny-gpt
    at = _open("app_pages/your_sentence.py")
    assert "local folder" in at.text_input(key="model_name").label
    at.text_input(key="model_name").set_value(folder).run()
    assert not at.exception and not at.error and not at.warning
    assert any(f"Model: {folder}, local folder {folder}." in c for c in _said(at))
    assert at.metric


def _damaged(tmp_path: Path) -> Path:
    folder = tmp_path / "damaged-model"
    shutil.copytree(SHIPPED[TINY_GPT], folder)
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_embd": ')  # cut off mid-file
    return folder


def _assert_reveals_nothing(texts: list[str], tmp_path: Path) -> None:
    for text in texts:
        for secret in (str(CHECKOUT), str(tmp_path), str(Path.home()), "Traceback"):
            assert secret not in text, (secret, text)
        assert not EXCEPTION_CLASS.search(text), text


@pytest.mark.parametrize("page", list(BOX))
def test_failed_loads_reveal_nothing_of_the_server(page, tmp_path, listening_on, monkeypatch):
    """Folders allowed (a loopback server), so that every failure is reached, not refused first; the hub is
    unreachable (tests/conftest.py sets HF_HUB_OFFLINE)."""
    listening_on("127.0.0.1")
    failing = [str(tmp_path / "no-such-folder"), "nobody-has/this-model-0xdeadbeef", str(_damaged(tmp_path))]
    at = _open(page)
    for name in failing:
        at.text_input(key=BOX[page]).set_value(name).run()
        assert not at.exception, (name, at.exception)
        problems = [unescaped(e.value) for e in [*at.error, *at.warning]]
        assert problems, name  # the failure is said, not silent
        _assert_reveals_nothing(_said(at), tmp_path)


def test_the_damaged_folder_is_named_by_its_last_part_and_the_log_has_the_rest(tmp_path, listening_on, caplog):
    listening_on("127.0.0.1")
    folder = _damaged(tmp_path)
    at = _open("app_pages/your_sentence.py")
    with caplog.at_level(logging.WARNING, logger="lmviz.app.problems"):
        at.text_input(key="model_name").set_value(str(folder)).run()
    said = [unescaped(w.value) for w in at.warning]
    assert any("The folder '…/damaged-model' is not a causal language model transformers can read "
               "(details in the server's log)." in w for w in said), said
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert str(folder) in caplog.text and "Traceback" in caplog.text, logged


def _chained(message, cause: Exception) -> ModelLoadError:
    """A ModelLoadError raised from ``cause`` as lmviz raises them (message: cause -> sentence)."""
    try:
        try:
            raise cause
        except Exception as error:
            raise ModelLoadError(message(error)) from error
    except ModelLoadError as problem:
        return problem


@pytest.mark.parametrize("name, error, shown", [
    ("/srv/models/m", _chained(lambda e: f"The folder '/srv/models/m' is not a model ({type(e).__name__}: {e})",
                               OSError("Unable to load /srv/models/m/config.json\nsecond line")),
     "The folder '…/m' is not a model (details in the server's log)."),
    ("SmolLM2-135M-Instruct", _chained(lambda e: f"The file m.gguf could not be read ({type(e).__name__}: {e}); "
                                                 "reinstall it.", ValueError("bad (nested) /usr/lib/x\nmore")),
     "The file m.gguf could not be read (details in the server's log); reinstall it."),
    ("gpt2", ModelLoadError("Could not load 'gpt2' from https://huggingface.co/api/models (SafetensorError: x)"),
     "Could not load 'gpt2' from https://huggingface.co/api/models (details in the server's log)."),
    ("owner/model", PermissionError(f"[Errno 13] {Path.home()}/.cache/hub is not writable"),
     "Could not load 'owner/model' (details in the server's log)."),
    ("~/models/mine", ModelLoadError(f"lmviz found nothing in {Path.home()}/models/mine or C:\\Users\\ann\\m."),
     "lmviz found nothing in …/mine or …/m."),
])
def test_what_a_visitor_is_told_keeps_the_sentence_and_drops_the_server(name, error, shown, caplog):
    with caplog.at_level(logging.INFO, logger="lmviz.app.problems"):
        assert problem_for_visitor(name, error) == shown
    assert str(error).splitlines()[0] in caplog.text  # the whole error is in the server's log


@pytest.fixture
def chars_per_minute_of(monkeypatch):
    """LMVIZ_CHARS_PER_MINUTE for one test: the process's FairShare is built again from it, and after the test
    from the suite's setting (conftest.py)."""
    from lmviz.app import caches

    def set_limit(value: str):
        monkeypatch.setenv(CHARS_PER_MINUTE_VARIABLE, value)
        caches.process_fair_share.clear()

    yield set_limit
    monkeypatch.undo()
    caches.process_fair_share.clear()


# Each page's limit lies between what its first text costs and what the second adds: 137 characters a text;
# Chat loss also sends its user box (30) and, for the comparison, the other answer (32) again.
@pytest.mark.parametrize("page, box, limit", [("app_pages/your_sentence.py", "text", 250),
                                              ("app_pages/next_token.py", "next_text", 250),
                                              ("app_pages/chat_loss.py", "chat_answer", 450)])
def test_a_session_over_its_minute_gets_a_sentence_and_keeps_what_it_had(chars_per_minute_of, page, box, limit):
    at = open_page(page)
    chars_per_minute_of(str(limit))  # (set after the page's first text: the minute starts now)
    first, second = (f"{word} " * 24 + f"{uuid.uuid4().hex[:16]}." for word in ("Cats", "Dogs"))  # 137 characters each
    at.session_state[box] = first
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    at.session_state[box] = second  # a new text: over the minute's limit
    at.run()
    assert not at.exception and not at.error
    refused = [w.value for w in at.warning if "characters to be scored in the last minute" in w.value]
    said = unescaped(refused[0]) if refused else [w.value for w in at.warning]
    assert re.search(rf"at most {limit} a minute for each visitor.* Try again in \d+ s\.", str(said)), said
    at.session_state[box] = first  # back to the text scored before: shown from the cache, no refusal left behind
    at.run()
    assert not at.exception and not [w for w in at.warning if "last minute" in w.value] and at.metric
