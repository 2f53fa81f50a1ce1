import math

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.chrome import SHOWN_WHILE_HIDDEN, chart_font_px, intro, key_table, readable_table, stop_page, term
from lmviz.app.loss_options import loss_options
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_chart, show_code
from lmviz.core import toy
from lmviz.core.losses import clm_loss, token_cross_entropy
from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.toy_example import build_questions
from lmviz.figures import plots
from lmviz.figures.palettes import TOY_CELL_BACKGROUND, TOY_CELL_TEXT, TOY_GREEDY_TEXT, TOY_TRUE_LABEL_BACKGROUND

SMALLEST_P = 1e-6  # the editor's step: the smallest probability above 0 a learner can type
# Colour never carries the meaning alone: each highlighted cell also starts with a mark.
TRUE_MARK, GREEDY_MARK = "✓", "★"
# Each style sets the text's colour and its cell's both: a dark theme's light text on the light cell was unreadable.
TRUE_LABEL_STYLE = f"background-color: {TOY_TRUE_LABEL_BACKGROUND}; color: {TOY_CELL_TEXT}; font-weight: bold"
GREEDY_STYLE = f"background-color: {TOY_CELL_BACKGROUND}; color: {TOY_GREEDY_TEXT}"
EDITOR_KEY = "toy_table_"  # and the reset count: a new key is a fresh editor, with the article's numbers
# A step moves a logit by η·|g| and every |g| is at most 1/N = 1/5: at 0.1 the loss barely moves, around 1 to 10 it
# visibly falls, at 30 every p(label) is near 1. About a factor of 3 between choices: a log scale.
LEARNING_RATES = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
GRADIENT_KEY = "toy-gradient"  # the gradient table's container, for its line height in presentation mode
MOST_P = 1e6  # the editor's largest number


def read_edits(raw: str) -> dict[tuple[int, str], float]:
    """The cells a link changes from the article's table, "position:word:p" joined by commas; ValueError where one
    is not a cell the editor would take."""
    edits = {}
    for cell in filter(None, raw.split(",")):
        position, word, value = cell.split(":")
        t, p = int(position), float(value)
        if not 0 <= t < len(toy.PROBABILITIES) or word not in toy.VOCAB or not 0 <= p <= MOST_P:
            raise ValueError(f"{cell!r} is not a cell of the table")
        edits[t, word] = p
    return edits


def write_edits(edits: dict[tuple[int, str], float]) -> str:
    return ",".join(f"{t}:{word}:{url_state.number_text(p)}" for (t, word), p in edits.items())


# The cells changed from the article's, in the link (at most 50 numbers): the table the session starts from.
EDITS = url_state.Kept("toy_edits", {}, read_edits, write_edits)


def new_table_editor() -> None:
    """A fresh editor, with the article's numbers: an editor keeps its own edits, which cannot be set, under its key."""
    st.session_state["toy_table_version"] = st.session_state.get("toy_table_version", 0) + 1


intro(
    "A tiny language model knows 10 words. It reads `<s> I love dogs not cats` "
    "(`<s>` marks the start) and, at every position, gives a probability to each of "
    "its 10 words for *the next word*. Training compares those probabilities with the "
    "words that really come next. This is the worked example of the article lmviz grew from."
)
panel = result_panel()  # the loss, pinned: edit a probability far below and watch it change
url_state.reset_button(also=new_table_editor)

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
    f'The last input word, "cats", has no next word, so it gets no {term("label", "label")}: '
    "6 input words give 5 predictions."
)

st.subheader("3. The model's probabilities")
st.markdown(
    "One row per position, one column per word. **Edit any cell** to see what happens: "
    "each row is rescaled to sum to 1 before the loss is computed."
)
url_state.seed(EDITS)
if st.button("Reset to the article's numbers"):
    new_table_editor()
    st.session_state[EDITS.key] = {}
row_names = [f"{t}: {toy.INPUT_WORDS[t]} → {toy.VOCAB[labels[t]]}" for t in range(len(labels))]
# A click on a column's header sorts the editor's rows, and the teacher's positions come out of order. Streamlit
# 1.67 has no switch for that: its grid sorts unless num_rows is "add" or "dynamic", which would let a sixth
# "position" be added (streamlit/streamlit#10015 asks for one). So a transparent band lies over the header row
# (its height is Streamlit's row height, 2.1875 rem): the header takes no click, hence no sort, column drag or
# header menu, while every cell below stays editable.
st.html(f"""<style>[class*="st-key-{EDITOR_KEY}"] [data-testid="stDataFrameResizable"]::after {{
  content: ""; position: absolute; top: 0; left: 0; right: 0; height: 2.1875rem; z-index: 1; }}</style>""")
start = pd.DataFrame(toy.PROBABILITIES, columns=toy.VOCAB, index=row_names)
for (t, word), p in st.session_state[EDITS.key].items():
    start.iloc[t, toy.VOCAB.index(word)] = p
# the editor's data stays the session's first table: its edits are kept by the editor itself, and in the link
with st.container(key=f"{SHOWN_WHILE_HIDDEN}-toy-table"):  # a control: it stays while the numbers are hidden
    edited = st.data_editor(
        start,
        key=f"{EDITOR_KEY}{st.session_state.get('toy_table_version', 0)}",
        # step: the editor keeps as many decimals as the step has (0.001 turned a typed 0.0004 into 0);
        # "plain": each number as typed (0.5, 0.0004, 0.000001), not padded to six decimals.
        column_config={w: st.column_config.NumberColumn(w, min_value=0.0, max_value=MOST_P, step=SMALLEST_P,
                                                        format="plain") for w in toy.VOCAB},
        disabled=False,
    )
st.caption(f"Any number from {SMALLEST_P:.6f} up, with up to six decimals, or 0: try 0 on a true label.")
try:
    probs, rescaled = toy.check_probability_table(edited.to_numpy(dtype=float))
except ValueError as problem:
    show_problem(problem, kind="error")
    stop_page()
table = edited.to_numpy(dtype=float)
url_state.write(EDITS, {(t, word): float(table[t, w]) for t in range(len(toy.PROBABILITIES))
                        for w, word in enumerate(toy.VOCAB) if table[t, w] != toy.PROBABILITIES[t][w]})
if rescaled:
    which = f"Row {rescaled[0]} does" if len(rescaled) == 1 else f"Rows {', '.join(map(str, rescaled))} do"
    st.info(f"{which} not sum to 1, so each was divided by its sum.")

walk = toy.walkthrough(probs)

st.subheader("Step 1 and 2: find the true label in each position's column and take its probability")


def marked_table() -> pd.DataFrame:
    """The table as text, one column per position (the editor's rows): ten word columns of marked numbers
    overflow 1280 px (917 px in 818), five position columns do not. Every p is written out, the true label's
    marked ✓ and the model's favourite ★."""
    cells = [[fmt_prob(p) for p in row] for row in probs.tolist()]
    for t, (label, greedy) in enumerate(zip(walk["labels"], walk["greedy"])):
        for word, mark in ((greedy, GREEDY_MARK), (label, TRUE_MARK)):  # ✓ ★ when the favourite is right
            column = toy.VOCAB.index(word)
            cells[t][column] = f"{mark} {cells[t][column]}"
    return pd.DataFrame(cells, columns=pd.Index(toy.VOCAB, name="word"), index=row_names).T


def highlight(table: pd.DataFrame) -> pd.DataFrame:
    styles = pd.DataFrame("", index=table.index, columns=table.columns)
    for t, (label, greedy) in enumerate(zip(walk["labels"], walk["greedy"])):
        styles.iloc[toy.VOCAB.index(greedy), t] = GREEDY_STYLE
        styles.iloc[toy.VOCAB.index(label), t] = TRUE_LABEL_STYLE
    return styles


readable_table(marked_table().style.apply(highlight, axis=None))  # the class plan shows it: read from the back
# the marks, not the colours, say which cell is which: a colour-blind student reads the same caption
st.caption(f"{TRUE_MARK} marks the true label's probability, the only one the loss uses. "
           f"{GREEDY_MARK} marks the model's favourite word, the one {term('greedy decoding', 'greedy decoding')} "
           "would pick. "
           f"{TRUE_MARK} {GREEDY_MARK}: the favourite is the true word.")
for t, (label, greedy) in enumerate(zip(walk["labels"], walk["greedy"])):
    if label != greedy:
        st.warning(
            f"Position {t}: greedy decoding would pick \"{escape_markdown(greedy)}\" "
            f"(p = {fmt_prob(float(probs[t, toy.VOCAB.index(greedy)]))}), but the true next word is "
            f"\"{escape_markdown(label)}\" (p = {fmt_prob(walk['p_label'][t])}). "
            "The loss only looks at the true word's probability."
        )

st.subheader("Step 3: take -log of each, then the mean")
steps = pd.DataFrame({
    "position": walk["positions"],
    "label": walk["labels"],
    "p(label)": [fmt_prob(p) for p in walk["p_label"]],
    "-log p(label)": [fmt(v) for v in walk["nll"]],
})
if walk["impossible"]:  # said beside the ∞ itself, not only in a box further down
    steps["why"] = ["p = 0, and -log 0 = ∞" if t in walk["impossible"] else "" for t in walk["positions"]]
readable_table(steps, hide_index=True)
terms = " + ".join(fmt(v) for v in walk["nll"])
st.markdown(f"**loss** = ({terms}) / {len(walk['nll'])} = **{fmt(walk['loss'])}**")


def infinite_loss_explained() -> str:
    """Why one probability of 0 makes the whole loss infinite, for the positions where it happened."""
    words = [f"\"{escape_markdown(walk['labels'][t])}\" at position {t}" for t in walk["impossible"]]
    return (
        f"The true word {' and the true word '.join(words)} {'has' if len(words) == 1 else 'each have'} "
        "probability 0. -log 0 = ∞: the model is infinitely "
        "surprised by something it said could not happen. The mean of numbers that include ∞ is ∞, so the "
        "loss is ∞, and so is the perplexity, e^∞. Give the true word any probability above 0, even "
        f"{SMALLEST_P:.6f} (-log {SMALLEST_P:.6f} = {fmt(-math.log(SMALLEST_P))}), and the loss is a number again. "
        "(A real model's softmax gives every word a probability above 0.)"
    )


if walk["impossible"]:
    st.warning(infinite_loss_explained(), icon="♾️")

with panel:
    left, middle, right = st.columns(3)
    left.metric("Loss: mean(-log p)", fmt(walk["loss"]))
    middle.metric("Perplexity: exp(loss)", fmt(walk["perplexity"], PERPLEXITY_DIGITS))
    right.metric("Uniform guess: ln 10", fmt(walk["uniform_loss"]))
if math.isfinite(walk["perplexity"]):
    unsure = f"the model is as unsure as if it chose uniformly among {fmt(walk['perplexity'], PERPLEXITY_DIGITS)} words"
else:
    unsure = "here e^∞ = ∞, and no number of equally likely words is that unsure"
st.caption(
    f"{term('Perplexity', 'perplexity')}, e^loss, is the loss turned back into a number of words: {unsure}. "
    "A model that gives "
    f"every word 1/10 scores ln 10 = {fmt(walk['uniform_loss'])}, with perplexity 10."
)

st.subheader("Why small probabilities cost so much")
st.markdown("-log p is 0 when the model is certain and right (p = 1) and grows without bound as p falls to 0"
            + (": a p of 0 is off the top of any chart, marked by the arrow." if walk["impossible"] else "."))
with st.expander("The curve of -log p, with this sentence's five labels on it (a chart)"):  # folded (issue 39)
    names = [f"{t}: {w}" for t, w in enumerate(walk["labels"])]
    show_chart(plots.nll_curve(walk["p_label"], names, walk["loss"], walk["uniform_loss"], font_px=chart_font_px()),
               key="toy_nll_curve")

st.subheader("4. How training lowers the loss: the gradient, and one step")
st.markdown(
    f"Training changes a model so that its loss falls. Here the model's only numbers are its "
    f"{term('logits', 'logit')}, z = {term('log p', 'log-probability')}: {term('softmax', 'softmax')}(log p) = "
    f"p / Σp = p, because each row sums to 1. The {term('gradient', 'gradient')} of the loss with respect to a "
    "logit is how fast the loss changes as that logit alone is raised. For the mean over the 5 labels it is "
    "(p − y)/5, where y is 1 on the true word and 0 on the others:"
)


def fmt_gradient(g: float) -> str:
    """A gradient entry as fmt_prob writes a probability (p/5 is a fifth of one), with its sign."""
    return ("-" if g < 0 else "") + fmt_prob(abs(g))


def gradient_table(gradient: list[list[float]]) -> pd.DataFrame:
    """(p − y)/5 with one column per position, as in Step 1 and 2's table (ten word columns would not fit a
    projector), the true label's entry marked ✓; and under the words, each column's sum."""
    cells = [[fmt_gradient(g) for g in row] for row in gradient]
    for t, label in enumerate(labels):
        cells[t][label] = f"{TRUE_MARK} {cells[t][label]}"
    # rounded to the entries' 6 decimals: float64 leaves about 1e-17 of the exact 0, which the caption states
    sums = [fmt_gradient(round(sum(row), 6)) for row in gradient]
    return pd.DataFrame([*zip(*cells), sums], columns=row_names, index=pd.Index([*toy.VOCAB, "sum"], name="word"))


gradient = toy.loss_gradient(probs)
# In presentation mode its 12 rows of 24 px text were 565 px high, and under the pinned panel 550 px of a 720 px
# screen are left: a tighter line (1.25, not 1.5) shows the whole table, sum row and all, at once.
st.html(f"""<style>.st-key-{GRADIENT_KEY} [data-testid="stTable"] :is(th, td) {{ line-height: 1.25; }}</style>""")
# folded (issue 39): the sentence above gives the formula, the step below its effect
with st.expander("The gradient entry by entry: (p − y)/5 for every word at every position (a table)"):
    with st.container(key=GRADIENT_KEY):
        key_table(gradient_table(gradient.tolist()), "toy-gradient.csv", height="content")
    st.caption(
        f"{TRUE_MARK} marks the true word's entry, (p − 1)/5: negative, so raising that logit lowers the loss. Every "
        "other entry is p/5, so lowering those logits lowers it too. Each column adds up to (1 − 1)/5 = 0, up to "
        f"float64's rounding (the largest leftover here: {fmt_gap(gradient.sum(dim=-1).abs().max().item())})."
    )

st.markdown(
    "One step of gradient descent moves every logit against its gradient, z' = z − η·g, where η is the "
    f"{term('learning rate', 'learning rate')}. No entry of g is larger than 1/5 in size, so a rate from 1 to 10 "
    "moves the logits enough to see:"
)
rate_column, before_column, after_column = st.columns([2, 1, 1])
rate = url_state.linked(url_state.choice("toy_learning_rate", 1.0, LEARNING_RATES), rate_column.select_slider,
                        "Learning rate η", LEARNING_RATES, format_func=lambda r: f"{r:g}")
step = toy.one_step(probs, rate)
before_column.metric("Loss before", fmt(walk["loss"]))
after_column.metric("Loss after one step", fmt(step["loss_after"]))
key_table(pd.DataFrame(
    [[fmt_prob(p) for p in walk["p_label"]], [fmt_prob(p) for p in step["p_label_after"]],
     [fmt(v) for v in walk["nll"]], [fmt(v) for v in step["nll_after"]]],
    index=["p(label) before", "p(label) after", "-log p before", "-log p after"], columns=row_names,
), "toy-one-step.csv")


def loss_change() -> str:
    """What the step did to the loss, and why; said also when it did not fall."""
    how = ("The step raised each true word's logit by η(1 − p)/5 and lowered every other logit by η·p/5, so no "
           "p(label) can fall: each row here has logits of its own.")
    if walk["impossible"]:
        return (f"{how} The loss stays ∞: a true word with p = 0 has the logit log 0 = −∞, and a step of any "
                "finite size leaves it at −∞, so its p stays 0.")
    if step["loss_after"] >= walk["loss"]:
        return (f"{how} The loss did not fall: every true word already has p = 1, or so nearly 1 that the step's "
                "change is too small for float64 to hold.")
    return (f"{how} The loss fell by {fmt(walk['loss'] - step['loss_after'])}. In a real model the logits come "
            "from weights that every position shares, and a step too large can make the loss rise.")


st.markdown(loss_change())


def one_row_by_hand(t: int) -> str:
    """Row t's step written out, every number within a calculator's reach."""
    label, p = labels[t], walk["p_label"][t]
    z, g, after = step["logits"][t][label], step["gradient"][t][label], step["logits_after"][t][label]
    return (
        f"By hand, row {escape_markdown(row_names[t])}: the true word's logit is z = ln {fmt_prob(p)} = {fmt(z)} and "
        f"its gradient ({fmt_prob(p)} − 1)/5 = {fmt_gradient(g)}, so z' = {fmt(z)} − {rate:g} × ({fmt_gradient(g)}) = "
        f"{fmt(after)}. Every other logit becomes z' = ln p − {rate:g} × p/5. Then p(label) after = e^z' / Σ e^z' = "
        f"{fmt(math.exp(after))} / {fmt(step['exp_sums_after'][t])} = {fmt_prob(step['p_label_after'][t])}."
    )


shown = next((t for t, p in enumerate(walk["p_label"]) if p > 0), None)  # ln 0 = −∞: no arithmetic to show
with st.expander("One row's step by hand, and how a real model's step differs"):  # folded (issue 39)
    if shown is not None:
        st.markdown(one_row_by_hand(shown))
    st.caption(
        f"z' = z − η·g is the update of {term('SGD', 'SGD')}, one {term('optimizer step', 'optimizer step')} with "
        "the logits as the weights. A real model's step moves its weights instead, and the logits follow; the Train "
        f"page trains its models with {term('AdamW', 'AdamW')}, which divides each weight's step by the size of "
        "that weight's recent gradients."
    )

loss_options("toy", toy.logits(probs), labels, row_names, noun="word")

show_code(toy.toy_loss, toy.loss_gradient, toy.one_step, clm_loss, token_cross_entropy)
check_yourself("toy", build_questions(walk, step))
