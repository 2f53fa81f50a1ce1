from functools import partial

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import default_scorer, scored_with_cpu_fallback
from lmviz.app.chrome import intro, key_table, result_or_stop, stop_page, term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_code
from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.losses import perplexity
from lmviz.core.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_gap
from lmviz.core.text import boundary_token_note, end_token_id, escape_markdown, readable_token
from lmviz.course.questions.batches import build_questions
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.lessons.batches import (
    DOCUMENT_MASK,
    MAX_BATCH_SENTENCES,
    NAIVE,
    PACKINGS,
    POSITIONS_ONLY,
    TRANSFORMERS_VERSION,
    batch_losses,
    count_items,
    encode_sentences,
    gradient_accumulation,
    labels_for,
    nll_under_labels,
    pack,
    packed_losses,
    pad_batch,
    position_ids_for,
    reorderings,
    slots,
)
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 2000
DEFAULT_SENTENCES = ("The cat sat on the mat.\n"
                     "Mat the on cat sat the.\n"
                     "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife.")
SIDES = ("right", "left")
SENTENCE_PX = 300  # the sentence column of section 1: a long sentence ends in "…" there, the numbers stay in view


@st.cache_data(show_spinner=False, max_entries=64)
def score_batches(_scorer: CausalScorer, model_key: tuple, text: str, sequences: list, pad_id: int,
                  end_id: int | None) -> dict:
    """Per text, per model: the right- and left-padded batches, and the labels when pad = the end token."""
    def padded_both_ways(loaded) -> dict:
        results = {}
        for side in SIDES:
            ids, mask = pad_batch(sequences, pad_id, side)
            labels = labels_for(ids, mask)
            results[side] = (ids, mask, labels, batch_losses(loaded.model, ids, mask, labels))
        if end_id is not None:
            ids, mask = pad_batch(sequences, end_id, "right")
            labels = labels_for(ids, mask, mask_by="pad_id", pad_id=end_id)
            results["pad = end"] = (ids, mask, labels, batch_losses(loaded.model, ids, mask, labels))
        return results
    return _scorer.run(padded_both_ways, text)


@st.cache_data(show_spinner=False, max_entries=64)
def accumulate(_scorer: CausalScorer, model_key: tuple, text: str, sequences: list, pad_id: int,
               micro_batch_size: int):
    ids, mask = pad_batch(sequences, pad_id, "right")
    return _scorer.run(lambda loaded: gradient_accumulation(loaded.model, ids, mask, labels_for(ids, mask),
                                                            micro_batch_size), text)


@st.cache_data(show_spinner=False, max_entries=64)
def packed_rows(_scorer: CausalScorer, model_key: tuple, text: str, sequences: list) -> dict:
    """Per text, per model: the sentences packed in one row, each way."""
    return _scorer.run(lambda loaded: {way: packed_losses(loaded.model, sequences, way) for way in PACKINGS}, text)


def pad_assignment(tokenizer, end_id: int) -> str:
    """The line of Python that makes ``end_id`` the pad token, as this tokenizer names it: shown with st.code, so
    that it can be copied as it is (repr writes the token as a valid string literal, whatever its characters)."""
    if end_id == tokenizer.eos_token_id:
        return "tokenizer.pad_token = tokenizer.eos_token"
    return f"tokenizer.pad_token = {tokenizer.convert_ids_to_tokens(end_id)!r}"


def show_grid(values: list[list], names: list[str], file_name: str) -> None:
    """A (B, T) tensor of the batch on its side: one row per position, one column per sentence. A batch is far
    longer than it is tall, and its T positions side by side overflow a projector's width (24 positions of the
    default sentences took 1,300 to 1,900 px where 818 were free); a column per sentence fits, and every
    position, the pads included, is a row of the page."""
    table = pd.DataFrame(list(zip(*values)), index=pd.RangeIndex(len(values[0]), name="position"), columns=names)
    # every row shown (and the position column, which st.table would drop): a grid that scrolls inside hides rows
    key_table(table, file_name, hide_index=False, height="content")


# What section 2 can show of a padded batch (ids, mask, labels, losses), one grid at a time, with what it means
GRIDS = {
    "tokens": (lambda ids, mask, labels, result: [[token(i) for i in row] for row in ids.tolist()],
               "The tokens of each sentence, pads included."),
    "input_ids": (lambda ids, mask, labels, result: ids.tolist(), "input_ids: each token's id."),
    "attention_mask": (lambda ids, mask, labels, result: mask.tolist(),
                       "attention_mask: 1 on a real token, 0 on a pad (no real token attends to it)."),
    "labels": (lambda ids, mask, labels, result: labels.tolist(),
               f"labels: the input_ids, with {IGNORE_INDEX} on a pad ({IGNORE_INDEX} = this label never counts)."),
    "-log p": (lambda ids, mask, labels, result: [["" if v is None else fmt(v) for v in row]
                                                  for row in nll_under_labels(result)],
               "-log p of each label, as the model's loss counts it (the prediction made one position before); "
               "empty where no prediction of that label counts."),
}


intro(
    "Training scores several sentences at once. They have different lengths, so the short ones are "
    f"**{term('padded', 'padding')}**, an **attention mask** says which {term('tokens', 'token')} are real, and "
    f"the **{term('labels', 'label')}** are {term('-100', '-100 / ignore_index')} wherever nothing should count. "
    "Then the batch's loss is a mean, and *which* mean matters."
)
panel = result_panel()
url_state.reset_button()
text = url_state.linked(url_state.text("batch_text", DEFAULT_SENTENCES, MAX_CHARS), st.text_area,
                        f"Sentences, one per line (at most {MAX_BATCH_SENTENCES})", max_chars=MAX_CHARS)

scorer = default_scorer()  # the model every page shares
tokenizer = scorer.loaded.tokenizer
token = partial(readable_token, tokenizer)  # id -> readable text
try:
    sequences = encode_sentences(tokenizer, text.splitlines())
except NothingToScore as problem:
    show_problem(problem)
    stop_page()
start_id, end_id = sequences[0][0], end_token_id(tokenizer)
pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_id
scorer, results = result_or_stop(  # NothingToScore: more text than this visitor's fair share
    lambda: scored_with_cpu_fallback(scorer, lambda s: score_batches(s, s.cache_key, text, sequences, pad_id, end_id)),
    (NothingToScore,), "Try fewer or shorter sentences.", panel)
loaded = scorer.loaded
sentences = [line.strip() for line in text.splitlines() if line.strip()]
names = [f"sentence {n + 1}" for n in range(len(sequences))]
markers = [boundary_token_note(tokenizer, i) for i in dict.fromkeys((start_id, end_id)) if i is not None]
st.caption(
    escape_markdown(f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}. Each sentence is written as a "
                    "pre-training document (plain text, with no ")
    + term("chat template", "chat template")
    + escape_markdown(f"): it starts with {token(start_id)}"
                      + (f" and ends with {token(end_id)}. " if end_id is not None else ". ") + " ".join(markers)
                      + " So a sentence's loss here differs from Your sentence's, which adds no end token and a start "
                        "token only when asked."))

right = results["right"][3]
with panel:
    left, middle, end = st.columns(3)
    left.metric("Batch loss (right padding)", fmt(right.model_loss))
    middle.metric("Mean of the sentences' own losses", fmt(right.mean_of_means))
    end.metric("Predictions counted", sum(right.sentence_counts))

st.subheader("1. Each sentence on its own")
key_table(pd.DataFrame({
    "sentence": [f"{n + 1}: {s}" for n, s in enumerate(sentences)],
    "length (tokens)": [len(ids) for ids in sequences],
    "predictions counted": right.sentence_counts,
    "mean loss": [fmt(v) for v in right.sentence_losses],
    "perplexity": [fmt(perplexity(v), PERPLEXITY_DIGITS) for v in right.sentence_losses],
}), "batch-sentences.csv", hide_index=True, column_config={"sentence": st.column_config.TextColumn(width=SENTENCE_PX)})
for i, j in reorderings(sentences):
    higher = "higher" if right.sentence_losses[j] > right.sentence_losses[i] else "lower"
    st.caption(f"Sentence {j + 1} has the words of sentence {i + 1} in another order: its mean loss per token is "
               f"{higher}, {fmt(right.sentence_losses[j])} against {fmt(right.sentence_losses[i])}.")
st.caption("These numbers come from the padded batch below and equal each sentence scored alone.")

st.subheader("2. The padded batch")
shown = url_state.linked(url_state.choice("batch_grid", list(GRIDS)[0], list(GRIDS)), st.radio, "Show", list(GRIDS),
                         horizontal=True)
values, caption = GRIDS[shown]
for tab, side in zip(st.tabs(["Right padding", "Left padding"]), SIDES):
    with tab:
        st.caption(caption)
        show_grid(values(*results[side]), names, f"batch-{side}-padding-{shown.strip('-').replace(' ', '-')}.csv")
st.caption(escape_markdown(f"The pad token here is {token(pad_id)} (id {pad_id}). With left padding the model is "
                           "also given position_ids that start at each sentence's first real token, so the words "
                           "keep their positions."))

st.subheader("3. The batch's loss: a mean over tokens, not over sentences")
left, middle, end = st.columns(3)
left.metric("The model's loss (out.loss)", fmt(right.model_loss))
middle.metric("Token-weighted mean", fmt(right.token_weighted_mean))
end.metric("Mean of the sentences' means", fmt(right.mean_of_means))
st.markdown(f"The model adds up all {sum(right.sentence_counts)} -log p and divides by "
            f"{sum(right.sentence_counts)}, so a sentence with more tokens weighs more; the mean of means gives "
            f"each of the {len(sequences)} sentences the same weight, whatever its length.")
with st.expander("Right and left padding's losses side by side (a table), and why left padding counts more "
                 "predictions"):  # folded (issue 39): the metrics above are the section's result, with right padding
    key_table(pd.DataFrame({
        "padding": SIDES,
        "out.loss": [fmt(results[s][3].model_loss, CHECK_DIGITS) for s in SIDES],
        "token-weighted mean": [fmt(results[s][3].token_weighted_mean, CHECK_DIGITS) for s in SIDES],
        "predictions counted": [sum(results[s][3].sentence_counts) for s in SIDES],
        "of which predicted at a pad": [int(results[s][3].from_padding.sum()) for s in SIDES],
    }), "batch-means.csv", hide_index=True)
    st.caption("With left padding the last pad 'predicts' each padded sentence's first real token; that label is not "
               "-100, so Hugging Face's loss counts it. Set that label to -100 too (lmviz's clm_loss does, from the "
               "attention mask) and left padding gives the right-padding numbers.")

st.subheader("4. Gradient accumulation: the same batch in micro-batches")
micro = url_state.linked(url_state.number("micro_batch_size", 1, 1, MAX_BATCH_SENTENCES), st.number_input,
                         "Sentences per micro-batch", min_value=1, max_value=MAX_BATCH_SENTENCES)
scorer, accumulation = result_or_stop(lambda: scored_with_cpu_fallback(
    scorer, lambda s: accumulate(s, s.cache_key, text, sequences, pad_id, min(int(micro), len(sequences)))),
    (NothingToScore,), "Try fewer or shorter sentences.")
left, middle, end = st.columns(3)  # the control's result, on screen with it
left.metric("(a) Mean of the micro-batch means", fmt(accumulation.averaged))
middle.metric("(b) Sum ÷ all counted tokens", fmt(accumulation.summed))
end.metric("The full batch's loss", fmt(right.model_loss))
with st.expander("Each micro-batch's tokens and losses (a table)"):  # folded (issue 39)
    key_table(pd.DataFrame({
        "micro-batch": [("sentence " if len(part) == 1 else "sentences ") + ", ".join(str(i + 1) for i in part)
                        for part in accumulation.micro_batches],
        "tokens counted": accumulation.micro_counts,
        "its own mean loss": [fmt(v) for v in accumulation.micro_means],
        "sum of -log p ÷ num_items_in_batch": [fmt(v) for v in accumulation.micro_shares],
    }), "batch-micro-batches.csv", hide_index=True)
st.markdown(f"(a) − (b) = {fmt(accumulation.averaged - accumulation.summed)}. Dividing each "
            "micro-batch's loss by the number of micro-batches weighs micro-batches equally, however many tokens "
            f"they hold; giving the loss num_items_in_batch = {count_items(results['right'][2])} (the tokens "
            "counted in the whole batch) makes the sum of the micro-batches equal the full batch's loss "
            f"(they differ by {fmt_gap(abs(accumulation.summed - right.model_loss))}: float32 rounding, as the "
            "micro-batches add their numbers in another order).")

st.subheader("5. When the pad token is the end-of-text token")
if end_id is None:
    st.info("This tokenizer has no end-of-text token, so this trap cannot happen with it.")
else:
    ids, mask, labels, bug = results["pad = end"]
    end_shown = escape_markdown(token(end_id))
    lost = sum(right.sentence_counts) - sum(bug.sentence_counts)
    if pad_id == end_id:
        st.markdown(f"This model's tokenizer pads with {end_shown}, the token each sentence ends with.")
    else:
        st.markdown(f"This model's tokenizer pads with {escape_markdown(token(pad_id))}. Suppose it padded with "
                    f"{end_shown}, the token each sentence ends with, as code often does for a tokenizer that has "
                    "no pad token:")
        st.code(pad_assignment(tokenizer, end_id), language="python")
    st.markdown("Hugging Face's `DataCollatorForLanguageModeling(mlm=False)`, the usual collator for causal-LM "
                "training, builds the labels with `labels[labels == pad_token_id] = -100`: it masks each "
                f"sentence's real end token too. Here that drops {lost} of the batch's "
                f"{sum(right.sentence_counts)} predictions, the end of every sentence.")
    left, middle, end = st.columns(3)
    left.metric("Loss, labels from the attention mask", fmt(right.model_loss))
    middle.metric("Loss, labels that mask every pad id", fmt(bug.model_loss))
    end.metric("End-of-text predictions lost", lost)
    with st.expander(f"The labels that mask every pad id: {IGNORE_INDEX} at each sentence's end too (a grid)"):
        show_grid(labels.tolist(), names, "batch-labels-pad-is-end.csv")  # folded (issue 39): one row per position
    st.markdown("The model is never asked to predict the end of a text, so it never learns to stop. "
                "Build the labels from the attention mask, or pad with a token that never ends a text.")

st.subheader("6. Packing: the sentences in one row, without padding")
try:
    scorer, packed = scored_with_cpu_fallback(scorer, lambda s: packed_rows(s, s.cache_key, text, sequences))
except (NothingToScore, NotEnoughMemory) as problem:
    show_problem(problem)
    stop_page()
room = slots(sequences)
st.markdown(f"The padded batch has {len(sequences)} rows × {room.padded // len(sequences)} positions = "
            f"{room.padded} slots for {room.tokens} tokens: the model computes {room.padding} pads the loss ignores. "
            f"{term('Packing', 'packing')} puts the {room.tokens} tokens in one row instead, one sentence after "
            f"another; it is correct only with a {term('document mask', 'document mask')}.")
left, middle, end, last = st.columns(4)
left.metric("Padded batch", fmt(right.token_weighted_mean))
middle.metric("Packed, document mask", fmt(packed[DOCUMENT_MASK].loss))
end.metric("Packed, positions only", fmt(packed[POSITIONS_ONLY].loss))
last.metric("Packed naively", fmt(packed[NAIVE].loss))
masked, naive = packed[DOCUMENT_MASK], packed[NAIVE]
st.markdown(
    f"- **Document mask**: the positions restart at 0 with each sentence, each sentence attends only to its own "
    f"tokens, and each sentence's first token gets the label {IGNORE_INDEX}. It counts {masked.counted} "
    f"predictions and gives the padded batch's loss (they differ by "
    f"{fmt_gap(abs(masked.loss - right.token_weighted_mean))}, float32 rounding of another forward).\n"
    f"- **Position ids only**: the same positions and labels, but each sentence after the first attends to the "
    f"ones before it in the row, so its -log p are not its own: {fmt(packed[POSITIONS_ONLY].loss)}.\n"
    f"- **Naive**: one causal mask over the whole row, positions 0 to {len(naive.input_ids) - 1}, and every next "
    f"token is a label, the next sentence's first token too, predicted from the end of the one before: "
    f"{naive.counted} predictions, {naive.counted - masked.counted} of them across a boundary, and "
    f"{fmt(naive.loss)}.")
st.caption(f"transformers {TRANSFORMERS_VERSION} builds the document mask itself from position ids that restart, "
           "but only when the model is given no attention mask and no cache: an attention mask of ones, or "
           "use_cache=True (a causal LM's default outside training), silently turns it off, and the row is scored "
           "as “position ids only”. This page's forward passes neither, with use_cache=False.")
with st.expander("Every token of the packed row, three ways, beside the padded batch (a table)"):
    ids, positions, labels, documents = pack(sequences, DOCUMENT_MASK)
    padded_under = [v for row, length in zip(nll_under_labels(right), map(len, sequences)) for v in row[:length]]

    def shown_nll(values: list) -> list[str]:
        return ["" if v is None else fmt(v) for v in values]

    key_table(pd.DataFrame({
        "sentence": [d + 1 for d in documents], "token": [token(i) for i in ids], "position id": positions,
        "label": labels, "-log p, padded batch": shown_nll(padded_under),
        "document mask": shown_nll(masked.nll), "position ids only": shown_nll(packed[POSITIONS_ONLY].nll),
        "naive": shown_nll(naive.nll),
    }), "batch-packed.csv", hide_index=True)
    st.caption(f"Each -log p stands under the label it scores. The label {IGNORE_INDEX} at each sentence's first "
               "token is what transformers' DataCollatorWithFlattening puts there; naive packing scores that token.")

show_code(pad_batch, labels_for, position_ids_for, count_items, batch_losses, gradient_accumulation, encode_sentences,
          pack, packed_losses)
check_yourself("batches", build_questions(*results["right"][1:]))  # its mask, labels and losses
