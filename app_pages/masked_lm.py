import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import choose_bert, english_bert_offered
from lmviz.app.chrome import intro, key_table, stop_page, term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import guess_cell, result_panel, show_code, show_masked_tokens, warn_unknown_words
from lmviz.core.compare import (
    a_variant,
    align,
    aligned_table,
    compare,
    how_the_shares_add_up,
    mlm_version,
    positions_in_b,
    signed,
    summary,
)
from lmviz.core.corpus import generate_corpus
from lmviz.core.losses import mlm_loss
from lmviz.core.masking import create_mlm_mask
from lmviz.core.numbers import CHECK_DIGITS, fmt, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.masked_lm import build_questions
from lmviz.errors import NothingToScore
from lmviz.lessons.bert import (
    NothingSelected,
    analyse_mlm,
    analyse_mlm_at,
    mask_positions,
    maskable_positions,
    panel_note,
    tiny_bert_about,
    unknown_words,
)

MAX_CHARS = 1000


@st.cache_data(show_spinner=False)
def corpus_samples() -> list[str]:
    return [s.text for s in generate_corpus(num_train=0, num_validation=50, seed=0).validation]


def split_inputs() -> tuple[int, int, str | None]:
    """The 80/10/10 split as two inputs, kept being what is left: the shares always add up to 100.
    Returns the random and kept shares used, and a sentence when random had to be cut."""
    mask_col, random_col, kept_col = st.columns(3)
    masked = url_state.linked(url_state.number("mlm_share_0", 80, 0, 100), mask_col.number_input, "[MASK] (%)", 0, 100)
    asked = url_state.linked(url_state.number("mlm_share_1", 10, 0, 100), random_col.number_input,
                             "random token (%)", 0, 100)
    random_share = min(asked, 100 - masked)  # [MASK] first: a random share past 100 % is cut to what is left
    kept = 100 - masked - random_share
    kept_col.markdown(f"kept (%)\n\n**{kept}** = 100 − {masked} − {random_share}",
                      help="Kept is what is left of the selected positions, so the three always add up to 100 %.")
    if random_share == asked:
        return random_share, kept, None
    return random_share, kept, (f"{masked} % + {asked} % is more than 100 %: this page uses random token "
                                f"{random_share} %, what is left after [MASK], and keeps none.")


intro(
    "BERT reads the whole sentence at once, so predicting the next word would be cheating. Instead about "
    f"**15 %** of the {term('tokens', 'token')} are *selected*; of those, **80 %** become "
    f"{term('[MASK]', '[CLS] / [SEP] / [MASK]')}, **10 %** a random token and "
    "**10 %** stay as they are. The model must recover the original token at every selected position, and "
    "the loss is the mean of -log p(original) **over the selected positions only**."
)
loaded = choose_bert()


def next_sample() -> None:
    st.session_state["mlm_sample"] = (st.session_state.get("mlm_sample", 0) + 1) % len(corpus_samples())
    st.session_state["mlm_text"] = corpus_samples()[st.session_state["mlm_sample"]]


panel = result_panel()
url_state.reset_button()
st.button("A story the model knows", help="A held-out story from lmviz's generated corpus", on_click=next_sample)
text = url_state.linked(url_state.text("mlm_text", corpus_samples()[0], MAX_CHARS), st.text_area, "Text",
                        max_chars=MAX_CHARS)

RANDOM, CHOSEN = "15 % at random, BERT's way", "the tokens I choose (fill in the blank)"
mode = url_state.linked(url_state.choice("mlm_mode", RANDOM, [RANDOM, CHOSEN]), st.radio, "Which tokens are masked",
                        [RANDOM, CHOSEN], horizontal=True)
if mode == RANDOM:
    st.caption(f"To compare two versions of the text, choose '{CHOSEN}': a random mask would pick different "
               "positions in the two texts.")


def force_one_mask() -> None:
    """The button's callback: the text in the box at the click gets one masked position. Not this run's text: a
    text typed as the button is clicked is the one meant (the click lands on the last run's button)."""
    st.session_state["mlm_force_one"] = st.session_state["mlm_text"]


def masked_at_random():
    """BERT's pre-training masking: the selection rate, the seed and the 80/10/10 split."""
    left, middle, right = st.columns(3)
    mask_prob = url_state.linked(url_state.number("mlm_rate", 0.15, 0.0, 1.0, 0.01), left.slider, "Selection rate",
                                 0.0, 1.0, step=0.01)
    seed = url_state.linked(url_state.number("mlm_seed", 0, 0, 10**9), middle.number_input, "Seed", min_value=0,
                            max_value=10**9)
    right.button("Re-roll: a new mask", key="mlm_reroll",
                 help="The next seed. The same seed always gives the same mask.",
                 on_click=lambda: st.session_state.update(mlm_seed=st.session_state["mlm_seed"] + 1))
    random_share, kept_share, cut = split_inputs()
    if cut:
        st.warning(cut)
    force_one = st.session_state.get("mlm_force_one") == text  # asked for this very text
    try:
        return analyse_mlm(loaded, text, seed=int(seed), mask_prob=mask_prob, random_replace_prob=random_share / 100,
                           keep_original_prob=kept_share / 100, min_selected=1 if force_one else 0)
    except NothingSelected as problem:
        show_problem(problem)
        st.button("Mask one position", on_click=force_one_mask)
        stop_page()


def masked_where_chosen():
    """The classic demo: [MASK] exactly where the learner says; special tokens are never offered."""
    tokens = maskable_positions(loaded.tokenizer, text)
    chosen_in_link = url_state.positions("mlm_positions", MAX_CHARS + 2)  # a token per character, [CLS] and [SEP]
    url_state.seed(chosen_in_link)
    # positions of an earlier text that this one does not have are dropped, not an error
    st.session_state["mlm_positions"] = [t for t in st.session_state["mlm_positions"] if t in tokens]
    chosen = url_state.linked(chosen_in_link, st.multiselect, "Tokens to mask (position: token)", list(tokens),
                              format_func=lambda t: f"{t}: {tokens[t]}", placeholder="Choose one or more tokens")
    result = analyse_mlm_at(loaded, text, chosen)
    compare_versions(result, tokens, chosen)
    return result


BOTH_MASKED = ("Both versions are masked at the same places: the tokens you chose, and in the second version the "
               "token on the same row of the table above (the same token, or the one that took its place). A token "
               "only the second version has is never masked. A random 15 % would pick different positions in two "
               "texts, and their losses would then differ by the draw as much as by the words.")


def known_second_version() -> None:
    st.session_state["mlm_text_b"] = a_variant(corpus_samples()[0])


def compare_versions(result, tokens: dict[int, str], chosen: list[int]) -> None:
    """Directly under the choice: a second version, masked where it shares a row with the chosen tokens,
    against the first. A second text with nothing to mask gets the main box's sentence."""
    if not url_state.linked(url_state.flag("mlm_compare"), st.toggle, "Compare with another version"):
        return
    second = url_state.linked(url_state.text("mlm_text_b", a_variant(text), MAX_CHARS), st.text_area,
                              "Second version", max_chars=MAX_CHARS)
    tokens_b = maskable_positions(loaded.tokenizer, second)
    mapped = positions_in_b(tokens, tokens_b, chosen)
    try:
        if tokens_b and not mapped:
            raise NothingToScore("None of the tokens you chose is in the second version: choose one both have.")
        other = analyse_mlm_at(loaded, second, mapped)
    except NothingToScore as problem:
        show_problem(problem)
        return
    warn_unknown_words(loaded, unknown_words(loaded.tokenizer, second), known_second_version, key="mlm_known_text_b")
    comparison = compare(mlm_version(result, tokens), mlm_version(other, tokens_b))
    first_loss, second_loss, gap = st.columns(3)
    first_loss.metric("Loss, first version", fmt(comparison.loss_a))
    second_loss.metric("Loss, second version", fmt(comparison.loss_b))
    gap.metric("Difference: second − first", signed(comparison.difference))
    st.markdown(escape_markdown(summary(comparison)))
    masked = [r for r in comparison.rows if r.nll_a is not None or r.nll_b is not None]  # the rows that count
    st.dataframe(pd.DataFrame(aligned_table(masked)), hide_index=True)
    st.caption(escape_markdown(how_the_shares_add_up(comparison) + " Only the masked rows are shown: the others "
                               "count 0.") + " " + BOTH_MASKED)  # under the result, which stays next to its box


try:
    result = masked_at_random() if mode == RANDOM else masked_where_chosen()
except NothingToScore as problem:
    show_problem(problem)
    stop_page()

known = unknown_words(loaded.tokenizer, text)
with panel, st.container(gap=None):  # no gap above the metrics: the panel stays short
    note = panel_note(loaded, known)
    if note:
        st.caption(escape_markdown(note))
    loss, selected, eligible = st.columns(3)
    loss.metric("Masked-LM loss", fmt(result.loss))
    selected.metric("Positions selected (they count)", result.num_selected)
    eligible.metric("Tokens that could be selected", result.num_eligible)
warn_unknown_words(loaded, known, next_sample, key="mlm_known_text")
about = tiny_bert_about(loaded, english_bert_offered())
if about and not known.most:  # when it does not know the text, the warning above says all this and more
    st.caption(escape_markdown(about))

st.subheader("1. What the model reads")
show_masked_tokens(result.rows, loaded.tokenizer.mask_token)
st.caption(escape_markdown(f"{loaded.tokenizer.cls_token} and {loaded.tokenizer.sep_token} are special tokens, "
                           "never selected.") + f" A {term('token starting with ##', 'WordPiece ##')} continues the "
           "word before it.")
if result.unknown_tokens:
    st.info(escape_markdown(
        f"The tokenizer does not know {', '.join(sorted(set(result.unknown_tokens)))}: it becomes [UNK], "
        "one token for everything unknown, and the model cannot tell such words apart."))

st.subheader("2. Labels and predictions")
only_selected = url_state.linked(url_state.flag("mlm_only_selected", True), st.toggle,
                                 "Only the selected positions (the ones the loss counts)")
rows = [r for r in result.rows if r.nll is not None] if only_selected else result.rows
key_table(pd.DataFrame({
    "position": [r.position for r in rows],
    "token": [r.token for r in rows],
    "branch": [r.branch.words for r in rows],
    "model reads": [r.shown for r in rows],
    "label": [r.label for r in rows],
    "p(original)": [fmt_prob(r.prob) if r.prob is not None else "" for r in rows],
    "-log p": [fmt(r.nll) if r.nll is not None else "" for r in rows],
}), file_name="masked-lm-positions.csv", hide_index=True)
st.caption(f"{term('label', 'label')} = {term('-100', '-100 / ignore_index')} means: this position does not count "
           "(Hugging Face's ignore_index). "
           "At a kept position the model sees the right token but must still say it.")
guessed = [r for r in result.rows if r.top_k]  # the selected positions
guesses = list(zip(*(r.top_k for r in guessed)))  # guesses[k]: every position's (k + 1)-th likeliest token
st.markdown(f"The model's {len(guesses)} likeliest tokens at each selected position, with their probabilities:")
# a table of its own, a guess per column: beside the seven columns above, the guesses did not fit 1280 px
key_table(pd.DataFrame({
    "position": [r.position for r in guessed],
    "token": [r.token for r in guessed],
    **{f"guess {k + 1}": [guess_cell(t, p) for t, p in column] for k, column in enumerate(guesses)},
}), file_name="masked-lm-guesses.csv", hide_index=True)
with st.expander("How lmviz's masking compares with Hugging Face's and the original BERT's"):
    st.markdown(
        f"- **Random tokens.** lmviz draws a random replacement from the {result.replacement_pool_size:,} ids of "
        f"this vocabulary that are not special tokens. Hugging Face's `DataCollatorForLanguageModeling` draws from "
        f"all {result.tokenizer_size:,} ids of the tokenizer, special tokens included, and so did Google's "
        "original BERT code (from its whole vocabulary).\n"
        "- **How many positions.** lmviz, like Hugging Face's collator, selects each token on its own with the "
        f"selection rate, so the number selected varies from one {term('seed', 'seed')} to the next. "
        "The original BERT code "
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
tokens = result.num_eligible
st.info(f"A causal LM would score {tokens - 1} predictions in these {tokens} tokens, one per position; "
        f"the masked LM scored {result.num_selected} ({result.num_selected / tokens:.0%}). "
        "BERT sees more context per prediction but learns from fewer predictions per sentence.")

comparing = mode == CHOSEN and st.session_state.get("mlm_compare", False)
show_code(create_mlm_mask if mode == RANDOM else mask_positions, mlm_loss, *([compare, align] if comparing else []))
check_yourself("masked-lm", build_questions(result))
