"""Every page through Streamlit's AppTest: no exception, and the numbers on screen."""

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")

PAGES = ["pages/home.py", "pages/toy_example.py", "pages/your_sentence.py"]


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    return at.switch_page(page).run()


def page_text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [m.value for m in at.metric] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_without_an_exception(page):
    at = open_page(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_toy_page_shows_the_articles_loss():
    at = open_page("pages/toy_example.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == "0.86302"
    assert metrics["Uniform guess: ln 10"] == "2.30259"
    assert metrics["Perplexity: exp(loss)"] == "2.37032"
    text = page_text(at)
    assert "(0.69315 + 1.20397 + 1.10866 + 0.79851 + 0.51083) / 5 = **0.86302**" in text
    assert any('greedy decoding would pick "am"' in w.value for w in at.warning)


def test_editing_a_probability_changes_the_loss():
    at = open_page("pages/toy_example.py")
    # position 1 ("I" -> "love"): raise p(love) from 0.30 to 0.90; the row then sums to 1.6 and is rescaled
    at.session_state["toy_table_0"] = {"edited_rows": {1: {"love": 0.9}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    p_love = 0.9 / 1.6
    expected = (-math.log(0.5) - math.log(p_love) - math.log(0.33) - math.log(0.45) - math.log(0.6)) / 5
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == f"{expected:.5f}" != "0.86302"
    assert any("Rows 1 did not sum to 1" in i.value for i in at.info)


def test_a_zero_true_label_probability_is_explained_not_computed():
    at = open_page("pages/toy_example.py")
    at.session_state["toy_table_0"] = {"edited_rows": {0: {"I": 0.0}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    assert any("-log p would be infinite" in e.value for e in at.error)
    assert not at.metric  # no number computed from an invalid table


def test_your_sentence_scores_a_typed_sentence(bundled):
    from lmviz.analysis import analyse_clm

    at = open_page("pages/your_sentence.py")
    assert not at.exception
    at.text_area(key="text").input("I love dogs not cats").run()
    assert not at.exception and not at.error
    expected = analyse_clm(bundled, "I love dogs not cats")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == f"{expected.loss:.5f}"
    assert metrics["Predictions scored"] == str(len(expected.rows))
    table = at.dataframe[0].value
    assert table["-log p(label)"].tolist() == pytest.approx([r.nll for r in expected.rows], abs=1e-9)
    assert at.query_params["text"] == ["I love dogs not cats"] or at.query_params["text"] == "I love dogs not cats"


def test_your_sentence_reads_the_sentence_from_the_url(bundled):
    from lmviz.analysis import analyse_clm

    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["text"] = "Paris is the capital of France."
    at.query_params["bos"] = "1"
    at.run()
    at.switch_page("pages/your_sentence.py").run()
    assert not at.exception
    assert at.text_area(key="text").value == "Paris is the capital of France."
    expected = analyse_clm(bundled, "Paris is the capital of France.", add_bos=True)
    assert {m.label: m.value for m in at.metric}["Loss: mean(-log p)"] == f"{expected.loss:.5f}"


@pytest.mark.parametrize("text, message", [("   ", "nothing to score"), ("Hi", "no next token")])
def test_your_sentence_explains_text_with_nothing_to_predict(text, message):
    at = open_page("pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    assert not at.exception
    assert any(message in w.value for w in at.warning)
    assert not at.metric


def test_your_sentence_falls_back_to_the_bundled_model_when_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = open_page("pages/your_sentence.py")
    at.text_input(key="model_name").input("gpt2-nobody-has").run()
    assert not at.exception
    assert any("cannot be reached" in e.value for e in at.error)
    assert any("Using the bundled model" in i.value for i in at.info)
    assert at.metric  # the analysis still ran
