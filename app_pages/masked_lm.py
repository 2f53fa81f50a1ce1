import pandas as pd
import streamlit as st

from lmviz.analysis import NothingToScore
from lmviz.bert_analysis import analyse_mlm
from lmviz.corpus import generate_corpus
from lmviz.losses import mlm_loss
from lmviz.masking import create_mlm_mask
from lmviz.numbers import CHECK_DIGITS, fmt, fmt_prob
from lmviz.ui import choose_bert, escape_markdown, show_code

BRANCH_COLOURS = {"not selected": "gray", "[MASK]": "blue", "random token": "orange", "kept": "green"}


@st.cache_data(show_spinner=False)
def corpus_samples() -> list[str]:
    return [s.text for s in generate_corpus(num_train=0, num_validation=50, seed=0).validation]


st.title("Masked LM: BERT's fill-in-the-blanks loss")
st.markdown(
    "BERT reads the whole sentence at once, so predicting the next word would be cheating. Instead about "
    "**15 %** of the tokens are *selected*; of those, **80 %** become `[MASK]`, **10 %** a random token and "
    "**10 %** stay as they are. The model must recover the original token at every selected position, and "
    "the loss is the mean of -log p(original) **over the selected positions only**."
)
loaded = choose_bert()



def next_sample() -> None:
    st.session_state["mlm_sample"] = (st.session_state.get("mlm_sample", 0) + 1) % len(corpus_samples())
    st.session_state["mlm_text"] = corpus_samples()[st.session_state["mlm_sample"]]


st.session_state.setdefault("mlm_text", corpus_samples()[0])
st.button("A story the model knows", help="A held-out story from lmviz's generated corpus", on_click=next_sample)
text = st.text_area("Text", key="mlm_text", max_chars=1000)

left, middle, right = st.columns(3)
mask_prob = left.slider("Selection rate", 0.0, 1.0, 0.15, 0.01, key="mlm_rate")
seed = middle.number_input("Seed", min_value=0, max_value=10**9, value=0, key="mlm_seed")
right.button("Re-roll: a new mask", help="The next seed. The same seed always gives the same mask.",
             on_click=lambda: st.session_state.update(mlm_seed=st.session_state["mlm_seed"] + 1))
split = st.columns(3)
shares = [split[i].number_input(f"{name} (%)", 0, 100, value, key=f"mlm_share_{i}")
          for i, (name, value) in enumerate((("[MASK]", 80), ("random token", 10), ("kept", 10)))]
if sum(shares) != 100:
    st.error(f"The three shares must add up to 100 %; they add up to {sum(shares)} %.")
    st.stop()

force_one = st.session_state.get("mlm_force_one") == text  # asked for this very text
try:
    result = analyse_mlm(loaded, text, seed=int(seed), mask_prob=mask_prob, random_replace_prob=shares[1] / 100,
                         keep_original_prob=shares[2] / 100, min_selected=1 if force_one else 0)
except NothingToScore as problem:
    st.warning(str(problem))
    if "No position was selected" in str(problem):
        st.button("Mask one position", on_click=lambda: st.session_state.update(mlm_force_one=text))
    st.stop()

st.subheader("1. What the model reads")
st.markdown(" ".join(f":{BRANCH_COLOURS[r.branch]}-background[{escape_markdown(r.shown)}]" for r in result.rows))
st.caption("Legend: " + ", ".join(f"{colour} = {branch}" for branch, colour in BRANCH_COLOURS.items())
           + ". [CLS] and [SEP] are special tokens, never selected.")
if result.unknown_tokens:
    st.info(escape_markdown(
        f"The tokenizer does not know {', '.join(sorted(set(result.unknown_tokens)))}: it becomes [UNK], "
        "one token for everything unknown, and the model cannot tell such words apart."))

st.subheader("2. Labels and predictions")
st.dataframe(pd.DataFrame({
    "position": [r.position for r in result.rows],
    "token": [r.token for r in result.rows],
    "branch": [r.branch for r in result.rows],
    "model reads": [r.shown for r in result.rows],
    "label": [r.label for r in result.rows],
    "p(original)": [fmt_prob(r.prob) if r.prob is not None else "" for r in result.rows],
    "-log p": [fmt(r.nll) if r.nll is not None else "" for r in result.rows],
    "top 5 guesses": [", ".join(f"{t} {fmt_prob(p)}" for t, p in r.top_k) for r in result.rows],
}), hide_index=True)
st.caption("label = -100 means: this position does not count (Hugging Face's ignore_index). "
           "At a kept position the model sees the right token but must still say it.")
with st.expander("How lmviz's masking compares with Hugging Face's and the original BERT's"):
    st.markdown(
        f"- **Random tokens.** lmviz draws a random replacement from the {result.replacement_pool_size:,} ids of "
        f"this vocabulary that are not special tokens. Hugging Face's `DataCollatorForLanguageModeling` draws from "
        f"all {result.tokenizer_size:,} ids of the tokenizer, special tokens included, and so did Google's "
        "original BERT code (from its whole vocabulary).\n"
        "- **How many positions.** lmviz, like Hugging Face's collator, selects each token on its own with the "
        "selection rate, so the number selected varies from one seed to the next. The original BERT code "
        "selects exactly max(1, round(0.15 × n)) positions, n counting every token of the sequence, [CLS] and "
        "[SEP] included (at most max_predictions_per_seq, 20 by default), chosen at random among the "
        "tokens that are not [CLS] or [SEP].")

st.subheader("3. The loss over the selected positions")
nlls = [r.nll for r in result.rows if r.nll is not None]
st.markdown(f"({' + '.join(fmt(v) for v in nlls)}) / {len(nlls)} = **{fmt(result.loss)}**")
st.dataframe(pd.DataFrame({
    "computed by": ["lmviz create_mlm_mask + mlm_loss", "the model's own loss (BertForMaskedLM, labels with -100)"],
    "loss": [fmt(result.loss, CHECK_DIGITS), fmt(result.loss_model, CHECK_DIGITS)],
}), hide_index=True)
st.metric("Masked-LM loss", fmt(result.loss))
tokens = result.num_eligible
st.info(f"A causal LM would score {tokens - 1} predictions in these {tokens} tokens, one per position; "
        f"the masked LM scored {result.num_selected} ({result.num_selected / tokens:.0%}). "
        "BERT sees more context per prediction but learns from fewer predictions per sentence.")

show_code(create_mlm_mask, mlm_loss)
