"""What the pages draw the same way: the pinned result panel, charts readable from the back of the room,
"Show the code", the masked tokens, and the warning that a BERT does not know most of a text's words."""

from __future__ import annotations

import html
import inspect
from typing import Callable

import streamlit as st

from lmviz.app.chrome import FOLDED_NOTE, RESULT_PANEL, chart_font_px, hide_numbers_button, numbers_hidden
from lmviz.core.labels import Branch
from lmviz.core.numbers import fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.figures import plots
from lmviz.figures.chips import BRANCH_MEANINGS, branch_chip, chip_row


def result_panel():
    """The container for a page's headline result, pinned under the header (see
    lmviz.app.chrome.PAGE_CSS). Create it before the controls, fill it once computed.

    With it, the button (or the key H) that hides its numbers while the room is asked (lmviz.app.chrome.hide_numbers),
    at the top of the screen."""
    hide_numbers_button()
    if numbers_hidden():  # above the panel, whose height does not change
        st.caption(FOLDED_NOTE)
    return st.container(key=RESULT_PANEL)


def guess_cell(token: str, prob: float) -> str:
    """A guess in a table of the model's likeliest tokens, its token in quotes: written "“,” 0.12", not ", 0.12",
    where a comma or a space token would read as a separator (the teacher's rehearsal)."""
    return f"“{token}” {fmt_prob(prob)}"


def metric_row():
    """A row for the pinned panel's numbers, each drawn with ``width="content"``: as wide as its label and value
    need, the row's room spread between them, and a second line where they do not fit. In st.columns' equal parts,
    with the sidebar open at 1280 px, a longer label or number was cut ("Loss if the true next token i…",
    a perplexity of "1919.68…")."""
    return st.container(horizontal=True, horizontal_alignment="distribute")


def show_masked_tokens(rows, mask_token: str) -> None:
    """The masked input, chip by chip (rows: lmviz.lessons.bert.MlmRow), and the legend of the four marks."""
    st.html(chip_row([branch_chip(r.branch, r.token, r.shown) for r in rows]))
    examples = {Branch.NOT_SELECTED: ("original", "original"), Branch.MASKED: ("original", mask_token),
                Branch.RANDOM: ("original", "random"), Branch.KEPT: ("original", "original")}
    st.html(chip_row([f"<span>{branch_chip(branch, *examples[branch])} "
                      f"{html.escape(f'{branch.words}: {meaning}')}</span>"
                      for branch, meaning in BRANCH_MEANINGS.items()], "lmviz-legend", gap="1rem"))


def show_chart(figure, key: str):
    """A Plotly figure with text readable from the back of the room: at least 14 px,
    18 px in presentation mode (axis titles, ticks, labels and annotations alike), and its title (plots.readable).
    Returns the chart's element: a chart drawn later inside it (``with element:``) replaces it."""
    plots.readable(figure, chart_font_px())
    # the chart's own "Download plot as a PNG" (top right, on hover) names the file after the chart, at twice the
    # screen's resolution for a handout
    return st.plotly_chart(figure, key=key, config={"toImageButtonOptions": {"filename": f"lmviz-{key}", "scale": 2}})


def show_code(*functions, label: str = "Show the code") -> None:
    """An expander with the real source of the lmviz functions that made the numbers."""
    with st.expander(label):
        for function in functions:
            st.caption(f"{function.__module__}.{function.__qualname__}")
            st.code(inspect.getsource(function), language="python")


def warn_unknown_words(loaded, check, use_known_text: Callable, key: str) -> None:
    """Under a BERT page's pinned panel, when its model does not know most of the text's words
    (check: lmviz.lessons.bert.UnknownWords): which words, and the two ways out, a text it
    knows (one click, ``use_known_text``) or a model that knows English. A loss over letters
    spelled out one by one says little, and the page must not let it pass for a real one."""
    if not check.most:
        return
    from lmviz.app.choosers import english_bert_offered
    from lmviz.app.chrome import term  # (imported here, beside the one function of ui.py that needs them)
    from lmviz.lessons.bert import english_bert_advice
    from lmviz.models.loading import BERT_HUB_ID

    shown = 5  # enough to see the pattern, short enough for the pinned panel on a 720-pixel projector
    words = ", ".join(f"“{escape_markdown(w)}”" for w in check.words[:shown])
    if len(check.words) > shown:
        words += f" and {len(check.words) - shown} more"
    english = "" if loaded.name == BERT_HUB_ID else " " + english_bert_advice(english_bert_offered())
    st.warning(
        f"**{escape_markdown(loaded.name)}, with {len(loaded.tokenizer):,} tokens, does not know most of these "
        f"words** ({check.num_unknown} of {check.num_words}: {words}): the numbers on this page come from "
        f"{term('WordPiece', 'WordPiece ##')} pieces and letters, not words. Use a text it knows.{english}")
    st.button("Use a text it knows", key=key, on_click=use_known_text,
              help="Text from lmviz's own generated stories, the words this model was trained on")
