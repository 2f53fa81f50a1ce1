import math
from functools import partial

import pandas as pd
import streamlit as st

from lmviz import plots
from lmviz.analysis import (NotEnoughMemory, NothingToScore, analyse_batch, analyse_clm, boundary_token_note,
                            length_limit, readable_token, score_positions, start_token_id, valid_text)
from lmviz.models import DEFAULT_MODEL, DTYPES, allowed_models, available_devices, default_dtype
from lmviz.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_prob
from lmviz.ui import escape_markdown, load_with_progress, show_code

MAX_CHARS = 2000
DEFAULT_TEXT = "The capital of France is Paris."
START_LABEL = "Start with a start-of-text token"
# -log p thresholds for the coloured sentence, and what each colour means.
LOSS_COLOURS = [(1.0, "green", "< 1 (p > 0.37)"), (3.0, "orange", "1 to 3"), (6.0, "red", "3 to 6"),
                (float("inf"), "violet", "≥ 6 (p < 0.0025)")]


@st.cache_data(show_spinner=False, max_entries=256)
def get_analysis(_analyse, model_key: tuple, text: str, add_bos: bool, top_k: int):
    """Per text, per model: a sentence typed twice (or by two students) is scored once."""
    return _analyse(text, add_bos=add_bos, top_k=top_k)


def coloured_sentence(result) -> str:
    pieces = []
    for row in result.rows:
        colour = next((c for limit, c, _ in LOSS_COLOURS if row.nll < limit), LOSS_COLOURS[-1][1])
        pieces.append(f":{colour}-background[{escape_markdown(row.target_token)}]")
    return " ".join(pieces)


def start_marker_sentence(tokenizer, result) -> str:
    """Which start token was added (read from the scored ids), or which one the checkbox would add."""
    if result.bos_added:
        return f"The first token is the start marker you asked for: {boundary_token_note(tokenizer, result.input_ids[0])}"
    try:
        start = readable_token(tokenizer, start_token_id(tokenizer))
    except NothingToScore as problem:  # a tokenizer with no start or end token at all
        return str(problem)
    return f"Tick '{START_LABEL}' to put {start} before the text, so that the first word is predicted too."


def spreadsheet_safe(value):
    """A token such as "=SUM(A1)" would run as a formula when the CSV is opened in a spreadsheet."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@") else value


st.title("Your sentence: a real model's loss, token by token")
st.markdown(
    "Type a sentence. A real language model reads it and, at every position, gives a probability "
    "to every token of its vocabulary for what comes next. The loss at a position is "
    "-log p(the token that really comes next); the sentence's loss is their mean."
)

params = st.query_params
with st.expander("Model", expanded=False):
    allowed, asked = allowed_models(), params.get("model", DEFAULT_MODEL)
    if allowed:  # a public deployment: a fixed list, whatever the link asks for
        model_name = st.selectbox("Model", allowed, index=allowed.index(asked) if asked in allowed else 0,
                                  key="model_name")
        if asked not in allowed:
            st.info(escape_markdown(f"The link asked for {asked!r}, which this deployment does not offer."))
    else:
        model_name = st.text_input(
            "Model: the bundled default, lmviz-tiny-gpt, a Hugging Face hub id (e.g. gpt2) or a local folder",
            value=asked, key="model_name",
        ).strip() or DEFAULT_MODEL
    left, right = st.columns(2)
    devices = ["auto", *available_devices()]
    device = left.selectbox("Device", devices, help="auto: the GPU when there is one, else the CPU")
    dtype = right.selectbox("Weights dtype", list(DTYPES), index=list(DTYPES).index(default_dtype()),
                            help="bfloat16 halves the memory; the loss is always computed in float32")
    token = st.text_input("Hugging Face access token (only for gated models such as Llama 2)", type="password") or None

url_text = valid_text(params.get("text", DEFAULT_TEXT))
if len(url_text) > MAX_CHARS:
    st.info(f"The text in the link was cut to its first {MAX_CHARS} characters.")
    url_text = url_text[:MAX_CHARS]
text = st.text_area("Your text", value=url_text, max_chars=MAX_CHARS, key="text")
add_bos = st.checkbox(
    START_LABEL, value=params.get("bos") == "1", key="bos",
    help="Without it, the first token has nothing before it to be predicted from, so it is never a label "
         "and gets no loss. Which token is added is said under the tokens.",
)
st.query_params.update({"text": text, "model": model_name, "bos": "1" if add_bos else "0"})

trained = st.session_state.get("trained_clm")
if trained is not None and st.toggle("Use the model you trained on the Train page", key="use_trained"):
    loaded, analyse = trained, partial(analyse_clm, trained)  # this session's own model: no sharing
else:
    batcher = load_with_progress(model_name, device, dtype, token)
    if batcher is None and model_name != DEFAULT_MODEL and (allowed is None or DEFAULT_MODEL in allowed):
        st.info(f"Using the bundled model, {DEFAULT_MODEL}, instead.")
        batcher = load_with_progress(DEFAULT_MODEL, device, dtype, None)
    if batcher is None:
        st.stop()
    loaded, analyse = batcher.loaded, batcher.analyse


def score(loaded, analyse):
    return get_analysis(analyse, (loaded.name, id(loaded.model), loaded.device, loaded.dtype), text, add_bos, 5)


try:
    try:
        result = score(loaded, analyse)
    except NotEnoughMemory as problem:
        if not problem.device.startswith("cuda") or trained is loaded:
            raise
        st.info(escape_markdown(f"{problem} This text is scored on the CPU instead."))
        batcher = load_with_progress(loaded.name, "cpu", dtype, token)  # the model in use, maybe the fallback
        if batcher is None:
            st.stop()
        loaded, analyse = batcher.loaded, batcher.analyse
        result = score(loaded, analyse)
except NothingToScore as problem:
    st.warning(str(problem))
    st.stop()
except NotEnoughMemory as problem:
    st.warning(escape_markdown(f"{problem} Try a shorter text."))
    st.stop()

st.caption(escape_markdown(
    f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}, weights {loaded.dtype}. "
    f"Loaded in {loaded.load_seconds:.1f} s; this forward pass took {result.forward_seconds * 1000:.0f} ms."))
if result.truncated_from:
    st.info(escape_markdown(
        f"The text has {result.truncated_from:,} tokens; only the first {len(result.tokens):,} are scored "
        f"({length_limit(loaded.model)[1]}). The cut comes after: {' '.join(result.tokens[-5:])}"))

st.subheader("1. The tokens the model reads")
st.markdown(" ".join(f":gray-background[{escape_markdown(t)}]" for t in result.tokens))
st.caption("␣ is a space that belongs to the token. " + escape_markdown(start_marker_sentence(loaded.tokenizer, result)))

st.subheader("2. Inputs and labels: the labels are the inputs shifted one place left")
table = pd.DataFrame({
    "position": [r.position for r in result.rows],
    "input token": [r.input_token for r in result.rows],
    "label (next token)": [r.target_token for r in result.rows],
    "label id": [r.target_id for r in result.rows],
    "p(label)": [fmt_prob(r.prob) for r in result.rows],
    "-log p(label)": [fmt(r.nll) for r in result.rows],
    "rank": [r.rank for r in result.rows],
})
show_top_k = st.toggle("Show the model's top 5 guesses at each position")
if show_top_k:
    table["top 5 guesses"] = [", ".join(f"{tok} {fmt_prob(p)}" for tok, p in r.top_k) for r in result.rows]
st.dataframe(table, hide_index=True)
st.caption(f"{len(result.tokens)} tokens give {len(result.rows)} predictions: the last token has no next token. "
           "Rank 1 means the label was the model's favourite.")
st.download_button("Download the table (CSV)", table.map(spreadsheet_safe).to_csv(index=False).encode(),
                   "lmviz_tokens.csv", "text/csv")

st.subheader("3. The loss at each position")
st.plotly_chart(
    plots.token_loss_bars([r.target_token for r in result.rows], [r.nll for r in result.rows], result.loss,
                          [r.prob for r in result.rows]),
    key="token_loss_bars",
)
st.markdown(coloured_sentence(result))
st.caption("Each predicted token coloured by its loss -log p: "
           + ", ".join(f"{colour} {words}" for _, colour, words in LOSS_COLOURS) + ".")

st.subheader("4. The mean, checked three ways")
left, middle, right = st.columns(3)
left.metric("Loss: mean(-log p)", fmt(result.loss))
middle.metric("Perplexity: exp(loss)", fmt(result.perplexity, PERPLEXITY_DIGITS))
right.metric("Predictions scored", len(result.rows))
st.dataframe(pd.DataFrame({
    "computed by": ["log-softmax → gather at the label → -log p → mean (the table above)",
                    "the model's own loss function (out.loss with labels = input_ids)",
                    "torch.nn.CrossEntropyLoss on shifted logits"],
    "loss": [fmt(v, CHECK_DIGITS) for v in (result.loss, result.loss_model, result.loss_cross_entropy)],
}), hide_index=True)
if math.isfinite(result.max_difference):
    st.caption(f"Largest difference between them: {result.max_difference:.1e} (float32 rounding). "
               "Hugging Face shifts the labels inside the model, exactly as the table above shows. "
               "The article takes softmax, then log; lmviz takes log_softmax directly, because a tiny "
               "probability rounds to 0 in float32 and log 0 = −∞.")
else:
    st.caption("One label has probability exactly 0 under this model (a logit of −∞), so the loss is infinite.")

show_code(analyse_clm, analyse_batch, score_positions)
