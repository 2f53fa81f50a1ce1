import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.byte_pieces import explain_byte_pieces
from lmviz.app.choosers import choose_causal_lm, scored_with_cpu_fallback
from lmviz.app.chrome import intro, key_table, result_or_stop, term
from lmviz.app.loss_options import loss_options
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import metric_row, result_panel, show_chart, show_code
from lmviz.core.numbers import LOSS_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import escape_markdown, readable_token
from lmviz.course.questions.next_token import build_questions, candidate_name
from lmviz.errors import BadInput, NotEnoughMemory, NothingToScore
from lmviz.figures import plots
from lmviz.lessons.next_token import (
    DEFAULT_TOP_K,
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    MOST_HAND_DIGITS,
    distribution,
    greedy_token,
    hand_digits,
    hand_exponent,
    if_true_next,
    next_token_logits,
    question_inputs,
    row_in_whole_text,
    sample_token,
    softmax_with_temperature,
)
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 2000
DEFAULT_PREFIX = "The capital of France is"
TYPE_A_WORD = "a word I type…"
SHOWN_CHARS = 300  # of the text under the Generate buttons: its end, where tokens are appended


@st.cache_data(show_spinner=False, max_entries=64)
def get_logits(_scorer: CausalScorer, model_key: tuple, text: str, add_bos: bool):
    """Per prefix, per model: one forward pass; every temperature and sample reuses its logits."""
    return _scorer.run(lambda loaded: next_token_logits(loaded, text, add_bos), text)


@st.cache_data(show_spinner=False, max_entries=64)
def get_whole_text(_scorer: CausalScorer, model_key: tuple, text: str, add_bos: bool):
    """The continued text as Your sentence scores it (the same scorer path, one pass over the whole text): the
    figure this page names as Your sentence's is that page's own computation, not this page's one-position pass."""
    return _scorer.analyse(text, add_bos)


def continued(tokenizer, logits, text: str, token_id: int) -> str:
    """``text`` with the token appended as text: what the prefix's tokens plus this one decode to, beyond
    what the prefix's tokens alone decode to (a token often carries the space before its word)."""
    ids = logits.input_ids[1:] if logits.bos_added else logits.input_ids
    before, after = tokenizer.decode(ids), tokenizer.decode([*ids, token_id])
    return text + after[len(before):] if after.startswith(before) else after


def chosen_true_next(scored) -> str | None:
    """The true next token chosen under 1, as shown, read from the widgets' state: see ``append``."""
    picked = st.session_state.get("next_true")
    if picked == TYPE_A_WORD:
        word = st.session_state.get("next_word", "")
        picked = word if word.strip() else None  # as under 1: a blank word scores nothing
    if picked is None:
        return None
    try:
        return if_true_next(scored, tokenizer, picked).token
    except BadInput:  # a word the page said it cannot score: there was no true next token to clear
        return None


def append(how: str) -> None:
    """A button's callback: the greedy or a sampled token joins the text box, and the page says what was appended.
    The true next token chosen for the text before is cleared, and the page says so: it was the one after that
    text, and kept, it was scored after the longer text as if it came next there too ("␣Lyon" after "…is Paris").

    Everything is read from the widgets' state, as it is at the click: a callback runs before the script, and a
    click that lands while the page is still drawn (a text typed and the button clicked at once, a token chosen
    under 1 and Append clicked) is on the last run's button, so neither that run's variables nor the button's
    arguments know what changed. Read from them, the typed text was replaced by the old one continued, and the
    sentence about the cleared token was missing (tests/app/test_next_token_page.py)."""
    now, temperature = st.session_state["next_text"], st.session_state["next_temperature"]
    try:
        scored = get_logits(scorer, scorer.cache_key, now, st.session_state["next_bos"])
    except (NothingToScore, NotEnoughMemory):
        return  # nothing to append to: the script says why, under the box
    if how == "greedy":
        token_id = greedy_token(scored.logits)
    else:
        seed = int(st.session_state["next_seed"])
        token_id = sample_token(scored.logits, temperature, seed)
        p = softmax_with_temperature(scored.logits, temperature)[token_id].item()
        how = f"sampled with seed {seed} at T = {temperature:g}, p = {fmt_prob(p)}"
        st.session_state["next_seed"] += 1  # the next draw is another one, and the sequence stays reproducible
    said = f"Appended {readable_token(tokenizer, token_id)} ({how})."
    chosen = chosen_true_next(scored)
    if chosen is not None:
        said += (f" The true next token you chose for the text before, {chosen}, is cleared: choose one "
                 "for this text under 1.")
    st.session_state["next_text"] = continued(tokenizer, scored, now, token_id)
    st.session_state["next_true"] = None
    st.session_state.pop("next_word", None)
    if "next" in st.query_params:  # a link's true next token goes too: the link now carries the longer text
        del st.query_params["next"]
    st.session_state["next_appended"] = said


intro(
    f"At the last position of a text, the model gives every {term('token', 'token')} of its vocabulary a raw score, "
    f"a {term('logit', 'logit')} z. The {term('softmax', 'softmax')} turns the scores into probabilities: "
    f"p = e^(z/T) / Σ e^(z/T) over the whole vocabulary, where T is the {term('temperature', 'temperature')}. "
    "A generator picks the next token from them; "
    f"training asks how much probability the model gave the token that really came next: its "
    f"-{term('log p', 'log-probability')} is the loss of that position."
)

params = st.query_params
scorer = choose_causal_lm()
panel = result_panel()
url_state.reset_button()
text = url_state.linked(url_state.text("next_text", DEFAULT_PREFIX, MAX_CHARS), st.text_area,
                        "The beginning of a text", max_chars=MAX_CHARS, height=80)
left, right = st.columns([1, 2])
add_bos = url_state.linked(url_state.flag("next_bos"), left.checkbox, "Start with a start-of-text token")
temperature = url_state.linked(
    url_state.number("next_temperature", 1.0, MIN_TEMPERATURE, MAX_TEMPERATURE, 0.1), right.slider,
    "Temperature T", MIN_TEMPERATURE, MAX_TEMPERATURE, step=0.1,
    help="The logits are divided by T before the softmax. T < 1 sharpens the distribution, T > 1 flattens it; "
         "T = 1 is the model's own distribution, the one training scores.")

scorer, logits = result_or_stop(  # said in the pinned panel, where the result would be: on screen with the box
    lambda: scored_with_cpu_fallback(scorer, lambda s: get_logits(s, s.cache_key, text, add_bos)),
    (NothingToScore,), "Try a shorter text.", panel)
loaded, tokenizer = scorer.loaded, scorer.loaded.tokenizer
shown = distribution(logits, tokenizer, temperature, DEFAULT_TOP_K)
top_ids = [c.token_id for c in shown.top]

if logits.truncated_from:
    st.info(f"The text has {logits.truncated_from:,} tokens; the model reads only its last {len(logits.input_ids):,}, "
            "the ones the next token follows.")

st.subheader("1. If the true next token is …")
asked_next = params.get("next", "")
options = [None, *top_ids]
if asked_next.isdigit() and int(asked_next) < logits.vocab_size and int(asked_next) not in top_ids:
    options.append(int(asked_next))  # a link from Your sentence: the label at that position, whatever its rank
options.append(TYPE_A_WORD)
picked = st.selectbox(
    "If the text really continued with", options, key="next_true",
    index=options.index(int(asked_next)) if asked_next.isdigit() and int(asked_next) in options else 0,
    format_func=lambda o: "(choose a token to see its loss)" if o is None else o if o == TYPE_A_WORD
    else candidate_name(readable_token(tokenizer, o), o))
true_next = None
try:
    if picked == TYPE_A_WORD:
        word = st.text_input("The word that comes next", key="next_word", max_chars=100)
        true_next = if_true_next(logits, tokenizer, word) if word.strip() else None
    elif picked is not None:
        true_next = if_true_next(logits, tokenizer, picked)
except BadInput as problem:
    show_problem(problem)
if true_next is not None:
    st.query_params["next"] = str(true_next.token_id)
    if true_next.note:
        st.caption(escape_markdown(true_next.note))
elif "next" in st.query_params:
    del st.query_params["next"]

with panel:
    row = metric_row()
    row.metric("Greedy choice (the highest logit)", shown.greedy.token, width="content")
    row.metric(f"p(greedy) at T = {temperature:g}", fmt_prob(shown.greedy.prob), width="content")
    if true_next is None:
        row.metric("Loss if the true next token is …", "choose one", help="Choose a token under 1.", width="content")
    else:
        row.metric(f"-log p({true_next.token}), T = 1", fmt(true_next.nll), width="content",
                   help="The loss this position adds in training, where T is always 1.")
        # the vocabulary's size in the label: "1,400 of 49,152" was cut to "1,400 of…" in a quarter of 818 px
        row.metric(f"Rank of {true_next.token} among {logits.vocab_size:,}", f"{true_next.rank:,}", width="content")
explain_byte_pieces([*(c.token for c in shown.top), *([true_next.token] if true_next is not None else [])])

if true_next is not None:
    st.markdown(
        f"The model gives {escape_markdown(true_next.token)} p = {fmt_prob(true_next.prob)} at T = 1, so the loss "
        f"of this position is -log p = **{fmt(true_next.nll)}**, computed here in float64 (training's float32 "
        "figure and Your sentence's are under this line). The temperature changes what a generator picks, never "
        "the loss: training always uses T = 1.")
    whole_text = continued(tokenizer, logits, text, true_next.token_id)
    try:
        scorer, whole = scored_with_cpu_fallback(scorer, lambda s: get_whole_text(s, s.cache_key, whole_text, add_bos))
        row = row_in_whole_text(logits, true_next.token_id, whole)
        if row is not None:
            theirs = f"it shows -log p = {fmt(row.nll)} for this position."
        elif whole.truncated_from:
            theirs = (f"it reads only the first {len(whole.input_ids):,} tokens of that text, so none of its "
                      "positions is this one.")
        else:
            theirs = ("its tokenizer writes this text and this token together as other tokens, so none of its "
                      "positions is exactly this one.")
    except (NothingToScore, NotEnoughMemory) as problem:
        theirs = f"its figure is not computed here: {escape_markdown(str(problem))}"
    # Measured for this text, not bounded: float32's rounding over V logits depends on V and on the logits.
    st.caption(f"This page computes log p in float64 from the model's logits, kept in float32. Training computes "
               f"it in float32, as the model's own loss does: the float32 log_softmax of the same "
               f"{logits.vocab_size:,} logits gives -log p = {fmt(true_next.nll_float32)}, float32 − float64 = "
               f"{fmt_gap(true_next.nll_float32 - true_next.nll)} for this token. Your sentence scores the whole "
               "text in a forward pass of its own, whose kernels round differently again: " + theirs)
    st.page_link("app_pages/your_sentence.py", label="Score the whole text with Your sentence",
                 icon=":material/edit_note:", query_params={
                     "text": whole_text, "bos": "1" if add_bos else "0", "model": loaded.name})
    loss_options("next", logits.logits.double().unsqueeze(0), [true_next.token_id],
                 [f"the next token {true_next.token}"])

st.subheader(f"2. The {DEFAULT_TOP_K} most likely next tokens at T = {temperature:g}")
true_index = top_ids.index(true_next.token_id) if true_next is not None and true_next.token_id in top_ids else None
show_chart(plots.next_token_bars([c.token for c in shown.top], [c.prob for c in shown.top], shown.rest_prob,
                                 shown.rest_count, greedy=0, true_next=true_index), key="next_token_bars")
st.caption(f"{term('Greedy decoding', 'greedy decoding')} picks the token marked {plots.GREEDY_MARK}, the highest "
           "logit at every temperature. "
           + (f"{plots.TRUE_NEXT_MARK}: the token you chose under 1. " if true_index is not None else "")
           + f"The hatched bar adds up the other {shown.rest_count:,} tokens of the vocabulary.")

st.subheader("3. From logits to probabilities: the softmax, written out")
table = pd.DataFrame({
    "rank": [c.rank for c in shown.top],
    "token": [c.token for c in shown.top],
    "id": [c.token_id for c in shown.top],
    "logit z": [fmt(c.logit) for c in shown.top],
    "z / T": [fmt(c.scaled_logit) for c in shown.top],
    "p = e^(z/T) / Σ": [fmt_prob(c.prob) for c in shown.top],
    "-log p": [fmt(c.nll) for c in shown.top],
})
key_table(table, "next-token-top.csv", hide_index=True, height=300)
first = shown.top[0]
listed = sum(c.prob for c in shown.top)
# Written with the decimals that give p back by hand (lmviz.lessons.next_token.hand_digits), not always the table's.
digits = hand_digits(first, shown.log_normalizer)
written = digits or MOST_HAND_DIGITS
z_shown, sum_shown = fmt(first.scaled_logit, written), fmt(shown.log_normalizer, written)
exponent = fmt(hand_exponent(first.scaled_logit, shown.log_normalizer, written), written)
if digits == LOSS_DIGITS:
    how = ""
elif digits is not None:
    how = (f" (written with {digits} decimals, the fewest from which this p comes back by hand; the table rounds "
           f"to {LOSS_DIGITS})")
else:
    how = " (computed from the unrounded logits: these digits give a p that differs in its last place)"
st.markdown(
    f"Σ runs over all {logits.vocab_size:,} tokens: Σ e^(z/T) = e^{sum_shown}. So for "
    f"{escape_markdown(first.token)}: p = e^{z_shown} / e^{sum_shown} = e^({z_shown} − {sum_shown}) = "
    f"e^{exponent} = **{fmt_prob(first.prob)}**{how}. "
    f"The {DEFAULT_TOP_K} listed tokens hold {fmt_prob(listed)} of the probability; everything else "
    f"{fmt_prob(shown.rest_prob)}; together {fmt_prob(listed + shown.rest_prob)}.")
st.caption("lmviz computes log p with log_softmax (z/T minus log Σ e^(z/T)), never log(softmax), which rounds "
           "a tiny probability to 0 and its log to −∞.")

st.subheader("4. Generate, one token at a time")
st.markdown("Generating text is this page, repeated: score the text, choose a token, append it, score again. "
            f"Greedy always takes the top token; {term('sampling', 'sampling')} draws one at random from the "
            f"probabilities above, so the temperature decides how adventurous it is. A {term('seed', 'seed')} "
            "makes the draw reproducible.")
greedy_col, seed_col, sample_col = st.columns([2, 1, 2])
seed = url_state.linked(url_state.number("next_seed", 0, 0, 2**31 - 1), seed_col.number_input, "Seed",
                        min_value=0, max_value=2**31 - 1, step=1, label_visibility="collapsed",
                        help="The seed of the next draw (each draw adds 1).")
greedy_col.button(f"Append the greedy token, {escape_markdown(shown.greedy.token)}", on_click=append,
                  args=("greedy",))
sample_col.button(f"Sample a token (seed {int(seed)})", on_click=append, args=("sampled",))
# The text the buttons continue, under them: on a projector the result of a click is on screen with the button.
with st.container(border=True, key="next-generated"):
    appended = st.session_state.pop("next_appended", "")
    st.caption(escape_markdown(f"{appended} The text now:".strip()))
    st.text(text if len(text) <= SHOWN_CHARS else "…" + text[-SHOWN_CHARS:])

show_code(softmax_with_temperature, distribution, sample_token, if_true_next)
check_yourself("next-token", build_questions(shown, *question_inputs(logits, tokenizer, shown, true_next)))
