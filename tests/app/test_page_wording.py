"""Issue 28's classroom rehearsal, on the pages it named: the marks a caption names instead of colours, code that
can be copied as it is shown, and the words (sigmoid, binary cross-entropy, MLM and NSP weights) said on the page
that uses them. Their glossary links are checked by tests/course/test_glossary.py."""

import copy
import math
import re

import pytest

from lmviz.core.text import end_token_id
from lmviz.course.registry import PATH
from tests.helpers import default_page, open_page, unescaped

COLOUR_WORDS = re.compile(r"\b(green|blue|red|grey|gray|orange|yellow|purple|pink|vermilion|violet)\b", re.IGNORECASE)
PAGES = [lesson.page for lesson in PATH]  # a rule for every lesson: the registry's, so that a new one is checked too


# Streamlit's colour markup, :gray-background[token], which the reader sees as the token on a shade, not the word
DIRECTIVE = re.compile(r":[a-z]+(?:-background)?\[")


def prose(at) -> list[str]:
    """The page's words as the reader sees them: unescaped, without Streamlit's colour markup."""
    return [DIRECTIVE.sub("[", unescaped(e.value)) for e in [*at.markdown, *at.caption, *at.info, *at.warning,
                                                          *at.success, *at.error]]


@pytest.mark.parametrize("page", PAGES)
def test_no_caption_names_a_colour_to_tell_things_apart(page):
    """A colour-blind student cannot use "✓ on green" or "★ in blue": a caption names the mark."""
    at = default_page(page)
    assert not at.exception
    named = [line for line in prose(at) if COLOUR_WORDS.search(line)]
    assert not named, named


def test_the_toy_tables_caption_names_its_marks():
    at = open_page("app_pages/toy_example.py")
    caption = " ".join(prose(at))
    assert "✓ marks the true label's probability" in caption and "★ marks the model's favourite word" in caption
    assert "on green" not in caption and "in blue" not in caption
    marked = next(d.value for d in at.dataframe if any("✓" in str(v) for v in d.value.to_numpy().ravel()))
    assert any("★" in str(v) for v in marked.to_numpy().ravel())  # the marks the caption names are in the table


def test_the_pad_token_line_can_be_copied_and_run_as_it_is_shown(bundled):
    """Issue 28: section 5 showed `tokenizer.pad_token = "\\<\\|endoftext\\|\\>"`, escaped for Markdown inside a code
    span, where the backslashes are shown. It is st.code now: run as shown, it makes the end token the pad token."""
    at = open_page("app_pages/batches.py")
    assert not at.exception
    lines = [c.value for c in at.code if c.value.startswith("tokenizer.pad_token")]
    assert lines == ["tokenizer.pad_token = '<|endoftext|>'"]
    assert not any("pad_token = " in m for m in (e.value for e in at.markdown))  # not in the prose any more
    tokenizer = copy.deepcopy(bundled.tokenizer)
    exec(lines[0], {"tokenizer": tokenizer})  # the page's own line, as a learner pastes it
    assert tokenizer.pad_token_id == end_token_id(bundled.tokenizer) != bundled.tokenizer.pad_token_id


def test_next_sentence_says_what_the_sigmoid_and_binary_cross_entropy_are():
    at = open_page("app_pages/next_sentence.py")
    assert not at.exception
    text = " ".join(prose(at))
    assert "sigmoid(x) = 1 / (1 + e^-x)" in text
    assert "is -log sigmoid(s) when the label is 1 and -log (1 - sigmoid(s)) when it is 0" in text
    # the definition, applied to the two logits the page shows, gives its p(class 1)
    scores = at.dataframe[0].value
    a, b = (float(v) for v in scores["logit"])
    assert float(scores["softmax"].tolist()[1]) == pytest.approx(1 / (1 + math.exp(-(b - a))), abs=2e-5)
    losses = at.dataframe[1].value
    two_logit, one_logit = (float(v) for v in losses["loss"].tolist()[:2])
    assert one_logit == pytest.approx(two_logit, abs=1e-6)  # the same loss, as the sentence says


@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.5, 2.0)])
def test_bert_loss_spells_out_its_two_weights(weights):
    at = open_page("app_pages/bert_loss.py")
    at.slider(key="bert_mlm_weight").set_value(weights[0])
    at.slider(key="bert_nsp_weight").set_value(weights[1]).run()
    assert not at.exception
    text = " ".join(prose(at))
    assert "MLM: masked language modelling" in text and "NSP: next-sentence prediction" in text
    found = re.search(r"total = MLM weight × masked-LM loss \+ NSP weight × next-sentence loss = ([\d.]+) × "
                      r"([\d.]+) \+ ([\d.]+) × ([\d.]+) = \*\*([\d.]+)\*\*", text)
    assert found
    w_mlm, mlm, w_nsp, nsp, total = (float(v) for v in found.groups())
    assert (w_mlm, w_nsp) == weights
    assert w_mlm * mlm + w_nsp * nsp == pytest.approx(total, abs=3e-5)  # from the digits shown, up to their rounding
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["Masked-LM loss"]) == mlm and float(metrics["Total"]) == total

