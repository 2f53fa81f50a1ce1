"""Every case of tests/data/bad_inputs.jsonl through the CLI and every page that takes text:
the normal result or one clear sentence; never a traceback, a NaN, a blank page or live markup."""

import json
import math
import re
from pathlib import Path

import pytest

from lmviz.__main__ import main
from tests.test_pages import APP, AppTest, open_page

CASES = [json.loads(line) for line in (Path(__file__).parent / "data" / "bad_inputs.jsonl").read_text().splitlines()]
IDS = [c["case"] for c in CASES]
# the hostile inputs' markup, where it would still be live: not preceded by Markdown's escaping backslash
LIVE_MARKUP = [re.compile(p) for p in (r"(?<!\\)<script", r"(?<!\\)<img", r"(?<!\\)\*(?<!\\)\*bold", r"(?<!\\)\$x\^2",
                                       r"(?<!\\):red\[", r"(?<!\\)\](?<!\\)\(http", "\u202e")]
# A lone surrogate cannot come from a browser (it decodes invalid URL bytes and typed text to valid
# Unicode) and AppTest cannot even encode one into a URL or a widget: the CLI tests cover it.
PAGE_CASES = [c for c in CASES if c["case"] != "lone surrogate"]
PAGE_IDS = [c["case"] for c in PAGE_CASES]


def _finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return True


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("command", [["clm"], ["mlm", "--mask-one"]])
def test_cli(case, command, capsys):
    code = main([command[0], case["text"], "--json", *command[1:]])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code == 0:
        assert _finite_numbers(json.loads(out))
    else:
        assert code == 2 and err.strip().splitlines()[-1].startswith("lmviz: ")


def assert_sane(at: AppTest):
    assert not at.exception, at.exception
    said = [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]
    assert at.metric or said, "neither a result nor a sentence"
    assert all("nan" not in m.value.lower() for m in at.metric)
    assert_no_live_markup(at)


def assert_no_live_markup(at: AppTest):
    for element in list(at.markdown) + list(at.caption) + list(at.info) + list(at.warning) + list(at.error):
        assert not any(raw.search(element.value) for raw in LIVE_MARKUP), element.value


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
def test_your_sentence_page_from_a_link(case):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["text"] = case["text"]
    at.run()
    assert_sane(at.switch_page("app_pages/your_sentence.py").run())


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
@pytest.mark.parametrize("page, fill", [
    ("app_pages/masked_lm.py", lambda at, text: at.text_area(key="mlm_text").input(text[:1000])),
    ("app_pages/next_sentence.py", lambda at, text: at.text_input(key="nsp_a").input(text[:500])),
    ("app_pages/bert_loss.py", lambda at, text: at.text_input(key="bert_b").input(text[:500])),
    ("app_pages/batches.py", lambda at, text: at.text_area(key="batch_text").input(text[:1000] + "\nThe cat sat.")),
], ids=["masked-lm", "nsp", "bert-loss", "batches"])
def test_text_taking_pages(case, page, fill):
    at = open_page(page)
    fill(at, case["text"])
    assert_sane(at.run(timeout=120))


# Enough ordinary text to train on (45 sentences, in stories of five); a bad case goes in the middle,
# inside a training story (the first story is held out for validation).
ORDINARY = [f"The student reads page {i} of the book." for i in range(45)]


def among_ordinary(text: str) -> str:
    return " ".join([*ORDINARY[:22], text, *ORDINARY[22:]])


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
@pytest.mark.parametrize("among_ordinary_text", [False, True], ids=["alone", "among ordinary text"])
def test_train_page_with_pasted_text(case, among_ordinary_text):
    at = open_page("app_pages/train.py")
    at.radio(key="train_source").set_value("paste text").run()
    at.text_area(key="train_text").input(among_ordinary(case["text"]) if among_ordinary_text else case["text"]).run()
    at.number_input(key="train_steps").set_value(10)
    at.button[0].click().run(timeout=300)  # "Train"
    assert not at.exception, at.exception
    assert_no_live_markup(at)
    if at.error:  # too little text to train on: one sentence that says so
        assert len(at.error) == 1 and "sentences" in at.error[0].value
        assert not among_ordinary_text, at.error[0].value
        return
    history = at.session_state["trainer"].history
    assert len(history) == 11 and all(math.isfinite(r.validation_loss) for r in history[:1])
    assert all(math.isfinite(r.train_loss) for r in history[1:])
    assert any("Validation loss" in m.value for m in at.markdown)


@pytest.mark.parametrize("model", ["x" * 5000, "../../../etc", "https://evil.example/model", "gpt2\n<script>"])
def test_a_malformed_model_in_the_link_is_explained(model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["model"] = model
    at.run()
    at.switch_page("app_pages/your_sentence.py").run()
    assert_sane(at)
    assert at.error and at.metric  # one sentence, then the bundled model
