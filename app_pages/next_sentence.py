import html
from functools import partial

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import choose_bert
from lmviz.app.chrome import intro, key_table, stop_page, term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_code, warn_unknown_words
from lmviz.core.losses import flip_nsp_labels, nsp_loss
from lmviz.core.numbers import CHECK_DIGITS, fmt, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.next_sentence import build_questions, nsp_label_words
from lmviz.errors import NothingToScore
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import BLACK, LIGHT_GREY, WHITE
from lmviz.lessons.bert import (
    analyse_nsp,
    draw_nsp_pair,
    held_out_stories,
    panel_note,
    tiny_bert_nsp_about,
    unknown_words,
)

MAX_CHARS = 500
SEGMENT_FILLS = {0: LIGHT_GREY, 1: WHITE}
SEGMENT_BORDERS = {0: "2px solid transparent", 1: f"2px solid {BLACK}"}


def draw_pair(follows: bool) -> None:
    """Put the next held-out pair in the text boxes, drawn as the tiny BERT's training pairs were: a story's
    first sentences as A and, as B, the sentence after them or a sentence of another story. Each click
    is the next draw: the same clicks give the same pairs."""
    draw = st.session_state.get("nsp_draw", 0) + 1
    a, b = draw_nsp_pair(follows, draw)
    st.session_state.update(nsp_draw=draw, nsp_a=a, nsp_b=b, nsp_follows="yes" if follows else "no")


intro(
    "BERT's second pre-training task. Two sentences are packed into one input, "
    f"{term('[CLS] A [SEP] B [SEP]', '[CLS] / [SEP] / [MASK]')}; half the time B really follows A, half the time "
    f"it is a sentence from elsewhere. A small head on top of the [CLS] {term('token', 'token')} gives two scores, "
    f"and the loss is a two-way {term('cross-entropy', 'cross-entropy')}."
)
loaded = choose_bert()
panel = result_panel()
url_state.reset_button()

# the first held-out story's first sentence and the next: a pair as in training too, its span one sentence long
first_a, first_b = held_out_stories()[0].sentences[:2]
left, right = st.columns(2)
left.button("A true continuation from the corpus", on_click=draw_pair, args=(True,))
right.button("A sentence from another story", on_click=draw_pair, args=(False,))
sentence_a = url_state.linked(url_state.text("nsp_a", first_a, MAX_CHARS), st.text_input, "Sentence A",
                              max_chars=MAX_CHARS)
sentence_b = url_state.linked(url_state.text("nsp_b", first_b, MAX_CHARS), st.text_input, "Sentence B",
                              max_chars=MAX_CHARS)
follows = url_state.linked(url_state.choice("nsp_follows", "yes", ["yes", "no"]), st.radio,
                           "Does B really follow A? (this sets the label)", ["yes", "no"], horizontal=True) == "yes"

try:
    result = analyse_nsp(loaded, sentence_a, sentence_b, follows)
except NothingToScore as problem:
    show_problem(problem)
    stop_page()

known = unknown_words(loaded.tokenizer, sentence_a, sentence_b)
with panel, st.container(gap=None):  # no gap above the metrics: the panel stays short
    note = panel_note(loaded, known, next_sentence=True)
    if note:
        st.caption(escape_markdown(note))
    loss, p_next, label = st.columns([1, 1, 2])  # the label is said in words: "1: B does not follow A"
    loss.metric("Next-sentence loss", fmt(result.loss_two_logits))
    p_next.metric("p(B follows A)", fmt_prob(result.probs[0]))
    label.metric("Label (next_sentence_label)", f"{result.label}: {nsp_label_words(result.label)}")
warn_unknown_words(loaded, known, partial(draw_pair, True), key="nsp_known_text")
about = tiny_bert_nsp_about(loaded)
if about:
    st.caption(escape_markdown(about))

st.subheader("1. One input, two segments")
st.html(chip_row([stacked_chip(html.escape(token), f"segment {segment}", SEGMENT_FILLS[segment],
                               border=SEGMENT_BORDERS[segment])
                  for token, segment in zip(result.tokens, result.segment_ids)]))
cls, sep = loaded.tokenizer.cls_token, loaded.tokenizer.sep_token
st.caption(escape_markdown(f"Under each token, its segment id (token_type_ids), which tells the model which sentence "
                           f"the token belongs to: 0 for {cls} A {sep}, 1 (framed) for B {sep}."))

st.subheader("2. Two scores, their softmax, and the loss")
key_table(pd.DataFrame({
    "class": ["0: B follows A", "1: B is from elsewhere"],
    "logit": [fmt(v) for v in result.logits],
    "softmax": [fmt_prob(v) for v in result.probs],
}), file_name="next-sentence-scores.csv", hide_index=True)
st.markdown(f"The {term('label', 'label')} is **{result.label}** ({nsp_label_words(result.label)}), so "
            f"loss = -log p(class {result.label}) = -log {fmt_prob(result.probs[result.label])} = "
            f"**{fmt(result.loss_two_logits)}**")
st.dataframe(pd.DataFrame({
    "computed as": ["2-logit cross-entropy (lmviz nsp_loss)",
                    "1-logit binary cross-entropy on logit[1] - logit[0] (lmviz nsp_loss)",
                    "the model's own loss (BertForNextSentencePrediction)", "torch F.cross_entropy"],
    "loss": [fmt(v, CHECK_DIGITS) for v in (result.loss_two_logits, result.loss_one_logit, result.loss_model,
                                            result.loss_torch)],
}), hide_index=True)
st.markdown(
    f"**Why one {term('logit', 'logit')} gives the same loss as two:** {term('softmax', 'softmax')}([a, b])[1] = "
    f"e^b / (e^a + e^b) = 1 / (1 + e^-(b-a)) = {term('sigmoid', 'sigmoid')}(b - a), where sigmoid(x) = "
    "1 / (1 + e^-x) turns any score into a probability between 0 and 1. Only the difference of the two scores "
    "matters. So a single score s = b - a gives the same classifier: p(class 1) = sigmoid(s), and its loss, the "
    f"{term('binary cross-entropy', 'binary cross-entropy')}, is -log sigmoid(s) when the label is 1 and "
    "-log (1 - sigmoid(s)) when it is 0: the same number as the two-logit loss, as the table above shows."
)
st.info("Label convention: this page follows Hugging Face's BertForPreTraining, where **0 means B follows A**. "
        "language_modeling_losses.py, the module lmviz grew from, used the opposite, 1 = B follows A; lmviz "
        "converts with `flip_nsp_labels` (label → 1 - label). Mixing the two up trains the head backwards.")

show_code(nsp_loss, flip_nsp_labels)
check_yourself("nsp", build_questions(result))
