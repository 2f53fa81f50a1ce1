import pandas as pd
import streamlit as st

from lmviz import plots, toy
from lmviz.losses import clm_loss, token_cross_entropy
from lmviz.numbers import fmt
from lmviz.ui import show_code

TRUE_LABEL_STYLE = "background-color: #c7e9c0; font-weight: bold"
GREEDY_STYLE = "text-decoration: underline; color: #08519c"

st.title("Toy example: the loss of one sentence, by hand")
st.markdown(
    "A tiny language model knows 10 words. It reads `<s> I love dogs not cats` "
    "(`<s>` marks the start) and, at every position, gives a probability to each of "
    "its 10 words for *the next word*. Training compares those probabilities with the "
    "words that really come next. This is the worked example of the article lmviz grew from."
)

st.subheader("1. The vocabulary")
st.dataframe(pd.DataFrame([toy.VOCAB], index=["word"]), hide_index=False)
st.caption("Each word has an index; the model's output at a position is one probability per index.")

st.subheader("2. Inputs and labels: the labels are the input shifted one place left")
labels = toy.label_ids().tolist()
st.dataframe(
    pd.DataFrame({
        "position": range(len(labels)),
        "input word": toy.INPUT_WORDS[:-1],
        "label (the next word)": [toy.VOCAB[i] for i in labels],
        "label index": labels,
    }),
    hide_index=True,
)
st.caption(
    'The last input word, "cats", has no next word, so it gets no label: '
    "6 input words give 5 predictions."
)

st.subheader("3. The model's probabilities")
st.markdown(
    "One row per position, one column per word. **Edit any cell** to see what happens: "
    "each row is rescaled to sum to 1 before the loss is computed."
)
if st.button("Reset to the article's numbers"):
    st.session_state["toy_table_version"] = st.session_state.get("toy_table_version", 0) + 1
row_names = [f"{t}: {toy.INPUT_WORDS[t]} → {toy.VOCAB[labels[t]]}" for t in range(len(labels))]
edited = st.data_editor(
    pd.DataFrame(toy.PROBABILITIES, columns=toy.VOCAB, index=row_names),
    key=f"toy_table_{st.session_state.get('toy_table_version', 0)}",
    column_config={w: st.column_config.NumberColumn(w, min_value=0.0, max_value=1e6, step=0.001, format="%.3f")
                   for w in toy.VOCAB},
    disabled=False,
)
try:
    probs, rescaled = toy.check_probability_table(edited.to_numpy(dtype=float))
except ValueError as problem:
    st.error(str(problem))
    st.stop()
if rescaled:
    st.info(f"Rows {', '.join(map(str, rescaled))} did not sum to 1, so they were divided by their sum.")

walk = toy.walkthrough(probs)

st.subheader("Step 1 and 2: find the true label in each row and take its probability")


def highlight(table: pd.DataFrame) -> pd.DataFrame:
    styles = pd.DataFrame("", index=table.index, columns=table.columns)
    for t, (label, greedy) in enumerate(zip(walk["labels"], walk["greedy"])):
        styles.iloc[t, toy.VOCAB.index(greedy)] = GREEDY_STYLE
        styles.iloc[t, toy.VOCAB.index(label)] = TRUE_LABEL_STYLE
    return styles


shown = pd.DataFrame(probs.numpy(), columns=toy.VOCAB, index=row_names)
st.dataframe(shown.style.apply(highlight, axis=None).format("{:.4f}"))
st.caption("Green, bold: the true label's probability. Blue, underlined: the model's favourite word (greedy decoding).")
for t, (label, greedy) in enumerate(zip(walk["labels"], walk["greedy"])):
    if label != greedy:
        st.warning(
            f"Position {t}: greedy decoding would pick \"{greedy}\" "
            f"(p = {fmt(float(probs[t, toy.VOCAB.index(greedy)]), 4)}), but the true next word is \"{label}\" "
            f"(p = {fmt(walk['p_label'][t], 4)}). The loss only looks at the true word's probability."
        )

st.subheader("Step 3: take -log of each, then the mean")
st.dataframe(
    pd.DataFrame({
        "position": walk["positions"],
        "label": walk["labels"],
        "p(label)": [fmt(p) for p in walk["p_label"]],
        "-log p(label)": [fmt(v) for v in walk["nll"]],
    }),
    hide_index=True,
)
terms = " + ".join(fmt(v) for v in walk["nll"])
st.markdown(f"**loss** = ({terms}) / {len(walk['nll'])} = **{fmt(walk['loss'])}**")

left, middle, right = st.columns(3)
left.metric("Loss: mean(-log p)", fmt(walk["loss"]))
middle.metric("Perplexity: exp(loss)", fmt(walk["perplexity"]))
right.metric("Uniform guess: ln 10", fmt(walk["uniform_loss"], 6))
st.caption(
    "Perplexity is the loss turned back into a number of words: the model is as unsure as if it "
    f"chose uniformly among {walk['perplexity']:.2f} words. A model that gives every word 1/10 scores "
    f"ln 10 = {fmt(walk['uniform_loss'])}, with perplexity 10."
)

st.subheader("Why small probabilities cost so much")
st.plotly_chart(
    plots.nll_curve(walk["p_label"], [f"{t}: {w}" for t, w in enumerate(walk["labels"])], walk["loss"],
                    walk["uniform_loss"]),
    key="toy_nll_curve",
)
st.caption("-log p is 0 when the model is certain and right (p = 1) and grows without bound as p falls to 0.")

show_code(toy.toy_loss, clm_loss, token_cross_entropy)
