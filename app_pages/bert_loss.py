import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import choose_bert, english_bert_offered
from lmviz.app.chrome import intro, key_table, stop_page, term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_code, show_masked_tokens, warn_unknown_words
from lmviz.core.corpus import generate_corpus
from lmviz.core.losses import bert_loss
from lmviz.core.numbers import CHECK_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.bert_loss import build_questions
from lmviz.errors import NothingToScore
from lmviz.lessons.bert import analyse_bert_loss, panel_note, tiny_bert_about, unknown_words

MAX_CHARS = 500


@st.cache_data(show_spinner=False)
def first_story() -> list[str]:
    return generate_corpus(num_train=0, num_validation=1, seed=0).validation[0].sentences


intro(
    "BERT was pre-trained on both tasks at once: one forward pass over a *masked* sentence pair gives the "
    "masked-LM predictions at the selected positions and the next-sentence scores at "
    f"{term('[CLS]', '[CLS] / [SEP] / [MASK]')}. "
    "The training loss is their sum, and you can weigh the two parts."
)
loaded = choose_bert()
panel = result_panel()
url_state.reset_button()


def use_the_story() -> None:
    """The first two sentences of one of lmviz's stories: words this page's tiny BERT knows."""
    st.session_state.update(bert_a=first_story()[0], bert_b=first_story()[1])


# seeded in the session state (by url_state), not given as value=, so that a button can put the story back
sentence_a = url_state.linked(url_state.text("bert_a", first_story()[0], MAX_CHARS), st.text_input, "Sentence A",
                              max_chars=MAX_CHARS)
sentence_b = url_state.linked(url_state.text("bert_b", first_story()[1], MAX_CHARS), st.text_input, "Sentence B",
                              max_chars=MAX_CHARS)
left, middle, right = st.columns(3)
follows = url_state.linked(url_state.choice("bert_follows", "yes", ["yes", "no"]), left.radio, "Does B follow A?",
                           ["yes", "no"], horizontal=True) == "yes"
mlm_weight = url_state.linked(url_state.number("bert_mlm_weight", 1.0, 0.0, 2.0, 0.1), middle.slider, "MLM weight",
                              0.0, 2.0, step=0.1)
nsp_weight = url_state.linked(url_state.number("bert_nsp_weight", 1.0, 0.0, 2.0, 0.1), right.slider, "NSP weight",
                              0.0, 2.0, step=0.1)
seed = url_state.linked(url_state.number("bert_seed", 0, 0, 10**9), st.number_input, "Mask seed", min_value=0,
                        max_value=10**9)

try:
    result = analyse_bert_loss(loaded, sentence_a, sentence_b, follows, int(seed), mlm_weight, nsp_weight)
except NothingToScore as problem:
    show_problem(problem)
    stop_page()

known = unknown_words(loaded.tokenizer, sentence_a, sentence_b)
with panel, st.container(gap=None):  # no gap above the metrics: the panel stays short
    note = panel_note(loaded, known)
    if note:
        st.caption(escape_markdown(note))
    a, b, c = st.columns(3)
    a.metric("Masked-LM loss", fmt(result.mlm_loss))
    b.metric("Next-sentence loss", fmt(result.nsp_loss))
    c.metric("Total", fmt(result.total))
warn_unknown_words(loaded, known, use_the_story, key="bert_known_text")
about = tiny_bert_about(loaded, english_bert_offered())
if about and not known.most:  # when it does not know the text, the warning above says all this and more
    st.caption(escape_markdown(about))

st.markdown("The masked pair, as the model reads it:")
show_masked_tokens(result.rows, loaded.tokenizer.mask_token)
st.caption("Every marked position counts in the masked-LM loss (at least one is always selected here).")
st.markdown(f"The {term('MLM weight', 'MLM weight / NSP weight')} multiplies the masked-LM loss (MLM: masked "
            "language modelling) and the NSP weight the next-sentence loss (NSP: next-sentence prediction) before "
            "the two are added. BERT was trained with both weights 1; the sliders let you change them.")
st.markdown(f"total = MLM weight × masked-LM loss + NSP weight × next-sentence loss = {mlm_weight:g} × "
            f"{fmt(result.mlm_loss)} + {nsp_weight:g} × {fmt(result.nsp_loss)} = **{fmt(result.total)}**")
key_table(pd.DataFrame({
    "computed by": ["lmviz bert_loss (these weights)", "BertForPreTraining's own loss (both weights 1)"],
    "loss": [fmt(result.total, CHECK_DIGITS), fmt(result.total_model, CHECK_DIGITS)],
}), file_name="bert-loss.csv", hide_index=True)
if mlm_weight == 1.0 and nsp_weight == 1.0:
    st.caption(f"With both weights 1 they agree: the difference is {fmt_gap(abs(result.total - result.total_model))}.")
else:
    st.caption("Hugging Face's model always adds the two parts with weight 1; set both sliders to 1 to compare.")
st.caption(f"p(B follows A) on the masked pair: {fmt_prob(result.p_is_next)} ({term('label', 'label')} {result.label}: "
           "Hugging Face's convention, 0 = B follows A).")

show_code(bert_loss)
check_yourself("bert-loss", build_questions(result))
