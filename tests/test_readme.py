"""What the README states about lmviz, its models and its code, checked against them:
a sentence that becomes untrue fails here."""

import json
import re
from pathlib import Path

from lmviz.core.text import readable_token, start_token_id
from lmviz.lessons.causal_lm import MAX_TOKENS
from lmviz.models.loading import ASSETS

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
    assert (f"(`{start}` for the bundled model, whose own `bos_token` is the chat\n  "
            f"marker `{tokenizer.bos_token}`)") in README
    assert tokenizer.bos_token in (tokenizer.chat_template or "")
    own = bundled.model.config.max_position_embeddings
    assert (f"Texts are cut at {spaced(MAX_TOKENS)} tokens, lmviz's\n  "
            f"own limit (the bundled model takes {spaced(own)})") in README


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


def page_max_chars() -> dict[str, int]:
    """Each page's longest text a box takes (its MAX_CHARS), read from its source: importing a page runs it."""
    pages = Path(__file__).resolve().parent.parent / "app_pages"
    found = {page.stem: re.search(r"^MAX_CHARS = (\d+)$", page.read_text(), re.M) for page in pages.glob("*.py")}
    return {name: int(match[1]) for name, match in found.items() if match}


def test_the_noisy_neighbour_sends_the_longest_text_your_sentence_takes():
    from benchmarks.noisy_neighbour import TEXT_BOX_CHARS

    assert TEXT_BOX_CHARS == page_max_chars()["your_sentence"]


def test_the_limits_of_a_shared_server_are_the_codes():
    from lmviz.lessons.batches import MAX_BATCH_SENTENCES, MAX_TOKENS_PER_SENTENCE
    from lmviz.lessons.bert import MAX_PAIR_TOKENS
    from lmviz.models.settings import DEFAULT_CHARS_PER_MINUTE
    from lmviz.serving.batcher import ALONE_PIECES_LONGER, CLASS_AT_WORK_SECONDS, LONG_WAITS_AT_MOST_SECONDS
    from lmviz.serving.fair_share import PROCESS_CHARS_IN_FLIGHT, TURN_SECONDS
    from lmviz.serving.scoring import PIECE_TOKENS

    hosting = " ".join(README[README.index("## Hosting"):].split())
    assert f"(default `{DEFAULT_CHARS_PER_MINUTE}`: five texts of the longest a page takes;" in hosting
    assert DEFAULT_CHARS_PER_MINUTE == 5 * max(page_max_chars().values())
    assert (f"While a class is at work (a short text scored there in the last {CLASS_AT_WORK_SECONDS:g} s), a long "
            f"text is read {PIECE_TOKENS} tokens at a time; otherwise {ALONE_PIECES_LONGER * PIECE_TOKENS} at a time"
            ) in hosting
    assert f"first (for at most {LONG_WAITS_AT_MOST_SECONDS:g} s at a time" in hosting
    assert f"waits its turn, for up to {TURN_SECONDS:g} s" in hosting
    assert f"the process has at most {spaced(PROCESS_CHARS_IN_FLIGHT)} characters being scored at once" in hosting
    assert (f"they score at most {MAX_PAIR_TOKENS} tokens a text, and {MAX_BATCH_SENTENCES} sentences of at most "
            f"{MAX_TOKENS_PER_SENTENCE} tokens") in hosting


def test_the_library_table_names_every_folder_of_the_package():
    package = Path(__file__).resolve().parent.parent / "lmviz"
    folders = sorted(f"`{path.name}/`" for path in package.iterdir() if (path / "__init__.py").exists())
    assert [folder for folder in folders if f"| {folder} |" not in README] == []
