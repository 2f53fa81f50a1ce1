"""What the README states about lmviz, its models and its code, checked against them:
a sentence that becomes untrue fails here."""

import json
import re
from pathlib import Path

from lmviz.analysis import MAX_TOKENS
from lmviz.models import ASSETS
from lmviz.text import readable_token, start_token_id

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def spaced(number: int) -> str:
    """1024 as the README writes it: 1 024."""
    return f"{number:,}".replace(",", " ")


def test_the_three_ways_are_named_as_the_code_computes_them():
    assert "log_softmax → gather at the label → negate → mean" in README
    assert not re.search(r"(?<!log_)softmax → gather", README)  # the article's order, which lmviz does not use


def test_the_start_token_and_length_limit_are_the_bundled_models(bundled):
    tokenizer = bundled.tokenizer
    start = readable_token(tokenizer, start_token_id(tokenizer))
    assert f"(`{start}` for the bundled model, whose own `bos_token` is the chat\n  marker `{tokenizer.bos_token}`)" in README
    assert tokenizer.bos_token in (tokenizer.chat_template or "")
    own = bundled.model.config.max_position_embeddings
    assert f"Texts are cut at {spaced(MAX_TOKENS)} tokens, lmviz's\n  own limit (the bundled model takes {spaced(own)})" in README


def test_the_datas_entropy_is_called_a_bound_for_next_token_prediction_only():
    assert "floor no model can beat" not in README
    assert "a masked LM,\n  which sees both sides, goes below it" in README


def test_the_tiny_models_figures_are_the_recorded_ones():
    report = json.loads((ASSETS / "tiny-models.json").read_text())
    bert = next(m for m in report["models"] if m["objective"] == "mlm+nsp")
    gpt = next(m for m in report["models"] if m["objective"] == "clm")
    assert f"masked-LM accuracy {bert['token_accuracy']:.1%}" in README
    assert f"next-sentence accuracy {bert['nsp_accuracy']:.1%}" in README
    assert f"validation loss {gpt['token_loss']:.3f}" in README
    for model in report["models"]:
        assert model["command"].startswith("python -m scripts.pretrain_tiny")


def test_the_home_page_says_what_is_scored_and_what_bounds_the_loss():
    """Issue 13, points 2 and 10: not "every position is scored", not a floor for every objective."""
    from streamlit.testing.v1 import AppTest

    from tests.helpers import APP

    at = AppTest.from_file(APP, default_timeout=60).run()
    home = " ".join(m.value for m in at.markdown)
    assert "every position is scored" not in home and "floor" not in home
    assert "each token but the last is asked for the one after it" in home
    assert "for next-token prediction, toward the stories' own entropy" in home
