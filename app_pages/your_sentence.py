import html
import math
from statistics import mean

import pandas as pd
import streamlit as st

from lmviz.app import live, url_state
from lmviz.app.byte_pieces import explain_byte_pieces
from lmviz.app.choosers import choose_causal_lm, scored_with_cpu_fallback
from lmviz.app.chrome import RESULT_PANEL, intro, key_table, result_or_stop, run_script, term, text_table
from lmviz.app.path import check_yourself, is_answered
from lmviz.app.problems import show_problem
from lmviz.app.widgets import guess_cell, metric_row, result_panel, show_chart, show_code
from lmviz.core.compare import (
    a_variant,
    align,
    aligned_table,
    clm_version,
    compare,
    how_the_shares_add_up,
    signed,
    summary,
)
from lmviz.core.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import boundary_token_note, escape_markdown, readable_token, start_token_id
from lmviz.course.questions.your_sentence import build_questions
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.figures import plots
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import LOSS_SCALE, loss_colour
from lmviz.lessons.causal_lm import (
    REFERENCE_TEXT,
    analyse_clm,
    length_limit,
    loss_three_ways,
    records_from_logits,
    score_positions,
)
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 2000
DEFAULT_TEXT = "The capital of France is Paris."
START_LABEL = "Start with a start-of-text token"
PREDICTION = "sentence-prediction"  # the container of Predict first's question
REVEALED, REVEALED_SHOWN = "sentence-revealed", "sentence-revealed-shown"  # session state: answers, and brought up
# The answer's top to just under the pinned panel's bottom edge; tried again as the table and chart below it draw.
# The last try sets window.lmvizAnswerBrought, so that a test measures once it has been made.
ANSWER_UNDER_PANEL = """const bring = () => {{
  const answer = document.querySelector('.st-key-{prediction} [data-testid="stAlert"]');
  const panel = document.querySelector('.st-key-{panel}');
  const main = document.querySelector('[data-testid="stMain"]');
  if (!answer || !panel || !main) return;
  main.scrollBy(0, answer.getBoundingClientRect().top - panel.getBoundingClientRect().bottom - 16);
}};
[0, 150, 500].forEach((ms) => setTimeout(bring, ms));
setTimeout(() => {{ bring(); window.lmvizAnswerBrought = true; }}, 1200);"""


@st.cache_data(show_spinner=False, max_entries=256)
def get_analysis(_scorer: CausalScorer, model_key: tuple, text: str, add_bos: bool, top_k: int):
    """Per text, per model: a sentence typed twice (or by two students) is scored once. The visitor's text
    counts against their fair share; lmviz's own paragraph, scored once per model for the whole server, does not."""
    return _scorer.analyse(text, add_bos, top_k, counted=text != REFERENCE_TEXT)


def coloured_sentence(result) -> str:
    """Each predicted token over its -log p, filled with its step of the loss scale. HTML, for
    st.html: the tokens are escaped, so "<script>" or "$x$" is shown as typed, never run or typeset."""
    chips = [stacked_chip(html.escape(row.target_token), fmt(row.nll), loss_colour(row.nll),
                          f"p = {fmt_prob(row.prob)}")
             for row in result.rows]
    return chip_row(chips)


def guesses_table(result) -> pd.DataFrame:
    """The model's likeliest next tokens at each position, a column per guess, each token in quotes. An HTML table
    (st.table), whose cells wrap: in one column of st.dataframe's canvas the guesses were cut at 1280 px, and
    written "“,” 0.12, “.” 0.10" without quotes a comma token read as a separator (text_table shows the tokens as
    text)."""
    guesses = list(zip(*(r.top_k for r in result.rows)))  # guesses[k]: every position's (k + 1)-th likeliest token
    return pd.DataFrame({
        "position": [r.position for r in result.rows],
        "label (next token)": [r.target_token for r in result.rows],
        "rank": [r.rank for r in result.rows],
        **{f"guess {k + 1}": [guess_cell(token, p) for token, p in column]
           for k, column in enumerate(guesses)},
    })


def loss_scale_legend() -> str:
    """The scale's steps as chips, with the p each edge stands for (p = e^-loss)."""
    chips, lower = [], 0.0
    for upper, colour in LOSS_SCALE:
        if lower == 0:
            top, bottom = f"&lt; {upper:g}", f"p &gt; {fmt_prob(math.exp(-upper))}"
        elif math.isinf(upper):
            top, bottom = f"≥ {lower:g}", f"p &lt; {fmt_prob(math.exp(-lower))}"
        else:
            top, bottom = f"{lower:g} to {upper:g}", f"p {fmt_prob(math.exp(-lower))} to {fmt_prob(math.exp(-upper))}"
        chips.append(stacked_chip(top, bottom, colour))
        lower = upper
    return chip_row(["<span>-log p, low = likely:</span>", *chips, "<span>high = surprising</span>"], "lmviz-legend")


def start_marker_sentence(tokenizer, result) -> str:
    """Which start token was added (read from the scored ids), or which one the checkbox would add."""
    if result.bos_added:
        return ("The first token is the start marker you asked for: "
                f"{boundary_token_note(tokenizer, result.input_ids[0])}")
    try:
        start = readable_token(tokenizer, start_token_id(tokenizer))
    except NothingToScore as problem:  # a tokenizer with no start or end token at all
        return str(problem)
    return f"Tick '{START_LABEL}' to put {start} before the text, so that the first word is predicted too."


def first_label_sentence(without, with_start) -> str:
    """What the start token changes at the beginning of this text, with both analyses' own numbers."""
    if len(without.rows) < 1 or len(with_start.rows) < 2:
        return ""
    first, label = without.tokens[0], without.rows[0]
    return (f"Without a start token, the first token, {first}, is never a label, and the first label, "
            f"{label.target_token}, is predicted from {first} alone: -log p = {fmt(label.nll)}. With "
            f"'{START_LABEL}' ({with_start.tokens[0]}), {first} becomes a label too, predicted from the start token "
            f"alone (-log p = {fmt(with_start.rows[0].nll)}), and {label.target_token} costs "
            f"{fmt(with_start.rows[1].nll)}." + ("" if len(without.rows) < 2 else
            f" The first positions have the least to go on: the rest of the text costs "
            f"{fmt(mean(r.nll for r in without.rows[1:]))} per token."))


intro(
    "Type a sentence. A real language model reads it and, at every position, gives a probability "
    f"to every {term('token', 'token')} of its vocabulary for what comes next. The loss at a position is "
    f"-{term('log p', 'log-probability')}(the token that really comes next, the {term('label', 'label')}); "
    "the sentence's loss is their mean."
)

scorer = choose_causal_lm()
panel = result_panel()
url_state.reset_button()
text = url_state.linked(url_state.text("text", DEFAULT_TEXT, MAX_CHARS), st.text_area, "Your text",
                        max_chars=MAX_CHARS)
add_bos = url_state.linked(
    url_state.flag("bos"), st.checkbox, START_LABEL,
    help="Without it, the first token has nothing before it to be predicted from, so it is never a label "
         "and gets no loss. Which token is added is said under the tokens.",
)
predicting = url_state.linked(
    url_state.flag("sentence_predict"), st.checkbox,
    "Predict first: hide each token's loss until I guess which costs the most",
    help="Hidden until you answer (or show the answer): the table of section 2, the chart and the coloured sentence of "
         "section 3, and, while comparing with another version, each token's -log p in both versions and the "
         "sentence saying where their difference comes from. The losses of the whole texts stay shown. For learning "
         "alone, or for asking the room before showing it.")
# a checkbox, like the start token's just above: the two settings of what is scored
comparing = url_state.linked(
    url_state.flag("sentence_compare"), st.checkbox, "Compare with another version",
    help="A second text, scored by the same model: both losses, their difference split into the tokens whose -log p "
         "changed and the different number of tokens scored, and the two texts' tokens side by side.")
if comparing:
    url_state.linked(url_state.text("sentence_b", a_variant(text), MAX_CHARS), st.text_area,
                     "Second version", max_chars=MAX_CHARS)
    comparison_slot = st.container()  # filled once the first version is scored: directly under its box

def ask_the_prediction(questions) -> None:
    """Predict first's question, where section 2 is asked before it is answered, and above section 2 after. In the
    run that follows its answer, the answer is brought up to just under the pinned panel, with the table it was
    about straight after it: the page grows a table and a chart as it reruns, and the view was thrown to the bottom
    of the page, or to the table's last rows, with its first, the costliest label's here, under the panel."""
    with st.container(key=PREDICTION):
        check_yourself("sentence", [q for q in questions if q.key == "highest"], heading="Your prediction")
    shown = st.session_state.get(REVEALED, 0)
    if is_answered("sentence", "highest") and st.session_state.get(REVEALED_SHOWN) != shown:
        st.session_state[REVEALED_SHOWN] = shown  # once per answer: later reruns keep the learner's place
        run_script("lmviz-answer-under-panel", ANSWER_UNDER_PANEL.format(prediction=PREDICTION, panel=RESULT_PANEL),
                   element_id=f"lmviz-answer-under-panel-{shown}")


def score(scorer: CausalScorer, scored_text: str | None = None, with_start: bool | None = None):
    return get_analysis(scorer, scorer.cache_key, text if scored_text is None else scored_text,
                        add_bos if with_start is None else with_start, 5)


def show_headline(panel, loaded, result, reference) -> None:
    """The loss, and the two numbers that say whether it is high: a uniform guess over the
    vocabulary, and this model on a paragraph of ordinary English."""
    vocabulary = loaded.model.config.vocab_size
    with panel:
        row = metric_row()
        row.metric("Loss: mean(-log p)", fmt(result.loss), width="content")
        row.metric("Perplexity: exp(loss)", fmt(result.perplexity, PERPLEXITY_DIGITS), width="content")
        row.metric("Predictions scored", len(result.rows), width="content")
        row.metric("Uniform guess: ln V", fmt(math.log(vocabulary)), width="content",
                   help=f"The loss of a model that gives each of the V = {vocabulary:,} tokens of its "
                        "vocabulary the same probability.")
        cut = (f" Only its first {len(reference.tokens)} of {reference.truncated_from} tokens fit this model."
               if reference.truncated_from else "")
        row.metric("Plain English", fmt(reference.loss), width="content",
                   help=f"This model's loss on a fixed paragraph of ordinary English: “{REFERENCE_TEXT}”{cut}")


def show_comparison(scorer: CausalScorer, result, hidden: bool) -> None:
    """The second version against the first: both losses, their difference, where it comes from, and the
    aligned table. A second text with nothing to score gets the main box's sentence. ``hidden``: Predict first
    is waiting for its answer, which each token's -log p (of either version: they share tokens) would give away."""
    try:
        _, other = scored_with_cpu_fallback(scorer, lambda s: score(s, st.session_state["sentence_b"]))
    except NothingToScore as problem:
        show_problem(problem)
        return
    except NotEnoughMemory as problem:
        show_problem(f"{problem} Try a shorter text.")
        return
    comparison = compare(clm_version(result), clm_version(other))
    first, second, gap = st.columns(3)
    first.metric("Loss, first version", fmt(comparison.loss_a))
    second.metric("Loss, second version", fmt(comparison.loss_b))
    gap.metric("Difference: second − first", signed(comparison.difference))
    table = pd.DataFrame(aligned_table(comparison.rows))
    if hidden:
        st.dataframe(table[["first version", "second version", "tokens"]], hide_index=True, height=300)
        st.caption("Each token's -log p in both versions, and where the difference comes from, appear once you "
                   "make your prediction in section 2.")
        return
    st.markdown(escape_markdown(summary(comparison)))
    st.dataframe(table, hide_index=True, height=300)
    st.caption(escape_markdown(how_the_shares_add_up(comparison) + " Tokens are matched by their ids; the same "
                               "token can cost more or less after a change, because what comes before it changed."))


scorer, result = result_or_stop(  # said in the pinned panel, where the result would be: on screen with the box
    lambda: scored_with_cpu_fallback(scorer, score), (NothingToScore,), "Try a shorter text.", panel)

loaded = scorer.loaded
hidden = predicting and not is_answered("sentence", "highest")  # the per-token losses wait for the prediction
if comparing:
    with comparison_slot:
        show_comparison(scorer, result, hidden)
show_headline(panel, loaded, result, score(scorer, REFERENCE_TEXT))
st.caption(escape_markdown(
    f"Model: {loaded.name}, {loaded.source}. Device: {result.device}, weights {loaded.dtype}. "
    f"Loaded in {loaded.load_seconds:.1f} s; this forward pass took {result.forward_seconds * 1000:.0f} ms."))
if result.truncated_from:
    st.info(escape_markdown(
        f"The text has {result.truncated_from:,} tokens; only the first {len(result.tokens):,} are scored "
        f"({length_limit(loaded.model)[1]}). The cut comes after: {' '.join(result.tokens[-5:])}"))
# a browser that joined a class (the join page, in this session) sends this text with the loss shown above
live.send_sentence_button(text, result.loss, [(row.target_token, row.nll) for row in result.rows], "text")

st.subheader("1. The tokens the model reads")
st.markdown(" ".join(f":gray-background[{escape_markdown(t)}]" for t in result.tokens))
st.caption("␣ is a space that belongs to the token. "
           + escape_markdown(start_marker_sentence(loaded.tokenizer, result)))
explain_byte_pieces(result.tokens)

questions = build_questions(result, losses_shown=not hidden)
if hidden:
    st.subheader("2. Predict first")
    st.markdown(f"Each token's loss is hidden{', in the comparison too,' if comparing else ''} until you say which "
                "one you expect to cost the most (or show the answer). The tokens are above; think of which next "
                "token the model could least expect.")
    ask_the_prediction(questions)
    if is_answered("sentence", "highest"):
        st.session_state[REVEALED] = st.session_state.get(REVEALED, 0) + 1
        st.rerun()  # answered in this run: show the losses now
else:
    if predicting:  # the question stays where it was asked, its answer given, above the section it was about
        ask_the_prediction(questions)
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
    key_table(table, "lmviz_tokens.csv", hide_index=True)
    # a table of their own: as an eighth column the guesses pushed the table past 1280 px
    if url_state.linked(url_state.flag("sentence_top"), st.toggle, "Show the model's top 5 guesses at each position"):
        text_table(guesses_table(result), hide_index=True)
        st.caption("Each guess: the token in quotes, then the probability the model gave it.")
    st.caption(f"{len(result.tokens)} tokens give {len(result.rows)} predictions: the last token has no next token. "
               "Rank 1 means the label was the model's favourite.")
    # A row's p is one entry of a whole distribution over the vocabulary: the Next token page shows it all.
    first_openable = 1 if result.bos_added else 0  # position 0 after a start token: no text before the label
    if len(result.rows) > first_openable:
        pick, link = st.columns([2, 3], vertical_alignment="bottom")
        # keyed by the text's tokens: with a key alone, Streamlit keeps the widget when its options change, and it
        # went on showing the previous text's tokens after a new text was typed
        position = pick.selectbox(
            "Where does a row's p come from? Position", range(first_openable, len(result.rows)),
            key=f"sentence_to_next-{hash(tuple(result.input_ids))}",
            format_func=lambda t: f"{t}: {result.rows[t].input_token} → {result.rows[t].target_token}")
        link.page_link("app_pages/next_token.py", icon=":material/casino:",
                       label=f"Every token the model weighed at position {position}, on the Next token page",
                       query_params={"text": loaded.tokenizer.decode(result.input_ids[first_openable:position + 1]),
                                     "bos": "1" if result.bos_added else "0",
                                     "next": str(result.rows[position].target_id),
                                     "model": loaded.name})

    st.subheader("3. The loss at each position")
    show_chart(plots.token_loss_bars([r.target_token for r in result.rows], [r.nll for r in result.rows], result.loss,
                                     [r.prob for r in result.rows]), key="token_loss_bars")
    st.html(loss_scale_legend())
    st.html(coloured_sentence(result))
    st.caption("Under each predicted token, its loss -log p; its colour is the step of the scale above that the "
               "loss falls in: the darker, the more the token surprised the model. Hover over a token for its p.")
    try:
        without, with_start = score(scorer, with_start=False), score(scorer, with_start=True)
        st.caption(escape_markdown(first_label_sentence(without, with_start)))
    except NothingToScore as problem:  # the other setting, refused by the server's limits: said in the caption's place
        show_problem(problem, kind="caption")


st.subheader("4. The mean, checked three ways")
where = "that section 2's table shows once you make your prediction" if hidden else "of the table of section 2"
st.markdown(f"The loss at the top of the page, **{fmt(result.loss)}**, is the mean of the {len(result.rows)} "
            f"-log p values {where}. The model's own loss function and PyTorch's "
            f"{term('cross-entropy', 'cross-entropy')} give the same:")
st.dataframe(pd.DataFrame({
    "computed by": ["log-softmax → gather at the label → -log p → mean (section 2's table)",
                    "the model's own loss function (out.loss with labels = input_ids)",
                    "torch.nn.CrossEntropyLoss on shifted logits"],
    "loss": [fmt(v, CHECK_DIGITS) for v in (result.loss, result.loss_model, result.loss_cross_entropy)],
}), hide_index=True)
if math.isfinite(result.max_difference):
    st.caption(f"Largest difference between them: {fmt_gap(result.max_difference)} (float32 rounding). "
               "Hugging Face shifts the labels inside the model, exactly as section 2's table "
               f"{'will show' if hidden else 'shows'}. "
               f"The article takes {term('softmax', 'softmax')}, then log; lmviz takes "
               f"{term('log_softmax', 'log-probability')} directly, because a tiny "
               "probability rounds to 0 in float32 and log 0 = −∞.")
else:
    st.caption("One label has probability exactly 0 under this model (a logit of −∞), so the loss is infinite.")

show_code(analyse_clm, records_from_logits, score_positions, loss_three_ways, *([compare, align] if comparing else []))
check_yourself("sentence", [q for q in questions if q.key != "highest" or not predicting])
