import html
import math

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import choose_causal_lm, scored_with_cpu_fallback, stop_without_chat_template
from lmviz.app.chrome import intro, key_table, numbers_hidden, result_or_stop, term, terms_linked
from lmviz.app.path import CHAT_PAIR, check_yourself, link_to_lesson
from lmviz.app.problems import show_problem
from lmviz.app.widgets import metric_row, result_panel, show_code
from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import CHECK_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.chat_loss import ROLE_WORDS, build_questions
from lmviz.errors import BadInput, ChatTemplateError, NothingToScore
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import CHAT_ROLE_COLOURS
from lmviz.lessons.chat_loss import (
    ANSWER,
    COMPLETION,
    CPO_ALPHA,
    DEFAULT_BETA,
    DEFAULT_CHOSEN,
    DEFAULT_QUESTION,
    DEFAULT_REJECTED,
    EVERY,
    KTO_BETA,
    ORPO_LAMBDA,
    SIMPO_BETA,
    SIMPO_GAMMA,
    SIMPO_PAPER_BETA,
    analyse_sft,
    answer_and_all_token_losses,
    answer_only_labels,
    compare_answers,
    completion_extra,
    completion_labels,
    difference_sentence,
    dpo_loss,
    end_of_turn_positions,
    end_of_turn_sentence,
    generation_block_sentence,
    preference_losses,
    template_sentence,
    typed_sentence,
)
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 1000
DEFAULTS = {"chat_user": DEFAULT_QUESTION, "chat_answer": DEFAULT_CHOSEN, "chat_other": DEFAULT_REJECTED,
            "chat_system": ""}
# The three labellings, as the radio names them, and who uses each (read from TRL's SFTTrainer and SFTConfig:
# completion_only_loss=None means "the completion only" for a prompt-completion dataset, every token otherwise)
LABELLINGS = {ANSWER: "the answer and its end-of-turn token (lmviz's labels)",
              COMPLETION: "every token after the generation prompt (TRL's completion-only loss)",
              EVERY: "the prompt counts too: every token (TRL's default for a plain conversation dataset)"}
USED_BY = {ANSWER: "lmviz: this page's and the CLI's answer-only loss",
           COMPLETION: "TRL's SFTTrainer with completion_only_loss (its default for a prompt-completion dataset); "
                       "TRL's DPOTrainer sums log p over the same tokens",
           EVERY: "TRL's SFTTrainer on a plain conversation (messages) dataset, by default"}


# Sections 3 and 4 in the default mode, where their grids have 818 px at 1280 with the sidebar open: each column
# a width, the long texts wrapped in rows tall enough for them (a grid wraps only rows over 4 rem), and the longest
# headers shorter on screen, the full name under the header's "?" (a grid's header does not wrap). The download
# and presentation mode's HTML table, which wraps, keep the full names.
LOSSES_ROW_PX = 108
LOSSES_COLUMNS = {
    "labels": st.column_config.TextColumn(width=196),
    "labels that count": st.column_config.NumberColumn(width=116),
    "mean of the table's -log p": st.column_config.TextColumn(width=166),
    "the model's own loss (out.loss)": st.column_config.TextColumn(
        "out.loss", width=86, help="The model's own loss (out.loss), from its forward pass with these labels."),
    "who counts these": st.column_config.TextColumn(width=248),
}
ANSWERS_ROW_PX = 66
ANSWERS_COLUMNS = {
    "answer": st.column_config.TextColumn(width=170),
    "tokens counted": st.column_config.NumberColumn(width=110),
    "Σ log p (log p of the whole answer)": st.column_config.TextColumn(
        "Σ log p (whole answer)", width=152, help="Σ log p (log p of the whole answer)"),
    "mean -log p (its answer-only loss)": st.column_config.TextColumn(
        "mean -log p (answer-only loss)", width=198, help="mean -log p (its answer-only loss)"),
    "Σ log p after the generation prompt (TRL's DPOTrainer)": st.column_config.TextColumn(
        "Σ log p (TRL's DPOTrainer)", width=172, help="Σ log p after the generation prompt (TRL's DPOTrainer)"),
}


@st.cache_data(show_spinner=False, max_entries=64)
def get_analysis(_scorer: CausalScorer, model_key: tuple, user: str, answer: str, system: str | None):
    return _scorer.run(lambda loaded: analyse_sft(loaded, user, answer, system), user, answer, system)


@st.cache_data(show_spinner=False, max_entries=64)
def get_comparison(_scorer: CausalScorer, model_key: tuple, user: str, chosen: str, rejected: str,
                   system: str | None):
    return _scorer.run(lambda loaded: compare_answers(loaded, user, chosen, rejected, system),
                       user, chosen, rejected, system)


def linked_text(key: str, widget, label: str) -> str:
    """A message box, kept in the link."""
    return url_state.linked(url_state.text(key, DEFAULTS[key], MAX_CHARS), widget, label, max_chars=MAX_CHARS)


def counted_positions(labels: list[int]) -> set[int]:
    return {p for p, label in enumerate(labels) if label != IGNORE_INDEX}


def conversation_chips(chat, labels: list[int]) -> str:
    """Each token over its role; the tokens that count have a solid border and a ✓ (not colour alone)."""
    counted = counted_positions(labels) - {0}  # the first token is never predicted, whatever its label says
    chips = [stacked_chip(html.escape(token), ("✓ " if p in counted else "") + ROLE_WORDS[role],
                          CHAT_ROLE_COLOURS[role], border="2px solid #000000" if p in counted else "none")
             for p, (token, role) in enumerate(zip(chat.tokens, chat.roles))]
    return chip_row(chips)


def role_legend() -> str:
    chips = [stacked_chip(words, "", CHAT_ROLE_COLOURS[role]) for role, words in ROLE_WORDS.items()]
    counted = stacked_chip("✓", "", CHAT_ROLE_COLOURS["assistant"], border="2px solid #000000")
    return chip_row(["<span>who wrote the token (the word under each chip):</span>", *chips,
                     f"<span>{counted} counted in the loss (✓ and a solid border)</span>"], "lmviz-legend")


intro(terms_linked(
    "A chat model is fine-tuned on conversations. Its tokenizer's chat template writes each conversation out as one "
    "text, with tokens of its own around every turn. The supervised fine-tuning (SFT) loss is the mean of -log p "
    "over the tokens whose label counts, where log p is the log of the probability the model gave the token; every "
    "other label is -100, and those positions add nothing to the loss. "
    "Which tokens count is a choice, and libraries choose differently. lmviz counts the assistant's answer and the "
    "end-of-turn token after it, which is how the model learns to stop. TRL's completion-only loss counts every "
    "token after the prompt, which with some templates takes in a token after the end of the turn as well. TRL's "
    "default on a plain conversation dataset counts every token, the system message and the user's question too. "
    "Choose below which one the page marks: section 3 gives the loss of each."))

scorer = choose_causal_lm()
stop_without_chat_template(scorer, "it has no chat format to fine-tune")
loaded, tokenizer = scorer.loaded, scorer.loaded.tokenizer
panel = result_panel()
url_state.reset_button()
user = linked_text("chat_user", st.text_input, "User message")
answer = linked_text("chat_answer", st.text_input, "Assistant's answer (the text fine-tuning teaches)")
system = linked_text("chat_system", st.text_input, "System message (optional)") or None

scorer, result = result_or_stop(  # in the pinned panel: on screen with the boxes
    lambda: scored_with_cpu_fallback(scorer, lambda s: get_analysis(s, s.cache_key, user, answer, system)),
    (NothingToScore, ChatTemplateError, BadInput), "Try shorter messages.", panel)
chat = result.chat

# TRL's split needs the prompt's tokens to be the start of the conversation's; where they are not, it is not offered
offered = [which for which in LABELLINGS if chat.labels_for(which) is not None]
labelling = url_state.choice("chat_labels", ANSWER, list(LABELLINGS))
url_state.seed(labelling)  # before the check below, which needs the link's choice
if st.session_state["chat_labels"] not in offered:
    st.session_state["chat_labels"] = ANSWER
which = url_state.linked(labelling, st.radio, "Which labels count", offered, format_func=LABELLINGS.get)
if chat.completion_labels is None:
    st.caption(escape_markdown(
        f"TRL's completion-only labels are not offered: the prompt's tokens, rendered by {loaded.name}'s chat "
        "template with add_generation_prompt=True, are not the start of the conversation's tokens, so where the "
        "completion starts cannot be told."))
labels = chat.labels_for(which)
counted = result.loss(which)[2]

with panel:
    sft, trl, every, how_many = st.columns(4)
    # the help of a hidden metric still shows: the answer-only count, a check-yourself answer, is left out of it
    sft.metric("Answer-only loss (SFT)", fmt(result.loss_answer),
               help="lmviz's labels: the mean -log p over the answer's tokens and its end-of-turn token"
                    + ("." if numbers_hidden() else f" ({result.counted_answer} labels)."))
    trl.metric("Completion-only loss (TRL)",
               "–" if result.loss_completion is None else fmt(result.loss_completion),
               help="TRL's completion-only labels: the mean -log p over every token after the generation prompt"
                    + ("." if result.counted_completion is None else f" ({result.counted_completion} labels)."))
    every.metric("Loss if nothing were masked", fmt(result.loss_all),
                 help=f"Every token counts, the prompt too ({result.counted_all} labels): TRL's default for a plain "
                      "conversation dataset.")
    how_many.metric("Labels that count", f"{counted} of {result.counted_all}",
                    help="With the labels chosen under Which labels count.")

st.subheader("1. The conversation as the model reads it")
st.html(conversation_chips(chat, labels))
st.html(role_legend())
st.caption(escape_markdown(f"{template_sentence(chat, loaded.name)} {end_of_turn_sentence(chat)}"))
if chat.default_system is not None:
    st.caption(escape_markdown(f"No system message was given, so the template added its own, marked system: "
                               f"“{chat.default_system}”"))
if chat.markers_typed:
    st.info(escape_markdown(typed_sentence(chat, loaded.name)))

st.subheader("2. Inputs and labels: -100 where a token does not count")
only_counted = url_state.linked(url_state.flag("chat_only_counted"), st.toggle, "Only the positions that count")
rows = [(r, labels[r.position + 1]) for r in result.rows]  # row t is scored on token t + 1: its label is there
rows = [(r, label) for r, label in rows if label != IGNORE_INDEX] if only_counted else rows
key_table(pd.DataFrame({
    "position": [r.position for r, _ in rows],
    "input token": [r.input_token for r, _ in rows],
    "next token": [r.target_token for r, _ in rows],
    "its role": [ROLE_WORDS[r.target_role] for r, _ in rows],
    "label": [label for _, label in rows],
    "counts": ["✓ yes" if label != IGNORE_INDEX else "no" for _, label in rows],
    "p(next token)": [fmt_prob(r.prob) for r, _ in rows],
    "-log p": [fmt(r.nll) for r, _ in rows],
}), "chat-loss-labels.csv", hide_index=True, height=320)
st.caption(escape_markdown(
    f"The labels of {LABELLINGS[which]}: the input ids where a token counts and {IGNORE_INDEX} elsewhere. The model "
    "shifts them by one inside, so each row's label is the id of the next token. Every position still gets a p: "
    "the labels change what is averaged, not what the model computes."))

st.subheader("3. The loss with each choice of labels")
st.markdown(
    f"lmviz's answer-only loss is the mean of its {result.counted_answer} counted -log p: "
    f"**{fmt(result.loss_answer)}**. Averaged over all {result.counted_all} positions it would be "
    f"{fmt(result.loss_all)}: the model would also be trained to write the template's tokens and the user's "
    "question. Each loss below is computed twice: as the mean of section 2's -log p over the labels that count, "
    "and by the model's own loss function (what out.loss is) with those labels.")
computed = [w for w in LABELLINGS if result.loss(w)[0] is not None]
key_table(pd.DataFrame({
    "labels": [LABELLINGS[w] for w in computed],
    "labels that count": [result.loss(w)[2] for w in computed],
    "mean of the table's -log p": [fmt(result.loss(w)[0], CHECK_DIGITS) for w in computed],
    "the model's own loss (out.loss)": [fmt(result.loss(w)[1], CHECK_DIGITS) for w in computed],
    "who counts these": [USED_BY[w] for w in computed],
}), "chat-loss-by-labelling.csv", hide_index=True, row_height=LOSSES_ROW_PX, column_config=LOSSES_COLUMNS)
gap = max(abs(result.loss(w)[0] - result.loss(w)[1]) for w in computed)
st.caption(f"Largest difference: {fmt_gap(gap)} (float32 rounding).")
with st.expander("How TRL's labels differ from lmviz's: completion-only, and assistant_only_loss"):  # folded
    if chat.completion_labels is not None:
        st.markdown(escape_markdown(difference_sentence(chat)))
    st.markdown(escape_markdown(generation_block_sentence(chat, loaded.name)))

st.subheader("4. Two answers to the same question")
other = linked_text("chat_other", st.text_input, "Another answer, to compare")
scorer, compared = result_or_stop(
    lambda: scored_with_cpu_fallback(scorer, lambda s: get_comparison(s, s.cache_key, user, answer, other, system)),
    (NothingToScore, ChatTemplateError, BadInput), "Try shorter answers.")
pair = (compared.chosen, compared.rejected)
columns = {
    "answer": [s.answer for s in pair],
    "tokens counted": [s.counted for s in pair],  # the first answer's is the answer-only count
    "Σ log p (log p of the whole answer)": [fmt(s.sum_logp) for s in pair],
    "mean -log p (its answer-only loss)": [fmt(s.mean_nll) for s in pair],
}
with_trl = all(s.sum_logp_completion is not None for s in pair)
if with_trl:
    columns["Σ log p after the generation prompt (TRL's DPOTrainer)"] = [fmt(s.sum_logp_completion) for s in pair]
key_table(pd.DataFrame(columns), "chat-loss-two-answers.csv", hide_index=True, row_height=ANSWERS_ROW_PX,
          column_config=ANSWERS_COLUMNS)
if compared.preferred == "neither":
    st.markdown("The model gives both answers the same probability.")
else:
    winner = compared.chosen if compared.preferred == "chosen" else compared.rejected
    ratio = "more than 10^300" if math.isinf(compared.probability_ratio) else f"{compared.probability_ratio:,.1f}"
    st.markdown(escape_markdown(
        f"The model prefers “{winner.answer}”: its Σ log p is higher by {fmt(abs(compared.margin))}, so it is "
        f"e^{fmt(abs(compared.margin))} = {ratio} times as likely.")
        + ("" if compared.preferred_by_mean == compared.preferred else
           " By the mean -log p, which does not favour shorter answers, it prefers the other one."))

st.subheader("5. Preference training (DPO) is built from summed log-probabilities")
# folded (issue 39): the slider and its loss below are the section's result; this is what the formula's terms are
definitions = st.expander("What DPO's loss is: the policy π, the reference π_ref, σ and β, and the log π used here")
definitions.markdown(terms_linked(
    "Direct preference optimisation (DPO) trains a model, called the policy π, to prefer a chosen answer over a "
    "rejected one. π(answer) is the probability the policy gives the whole answer after the prompt, so log π(answer) "
    "is a sum of log p over the answer's tokens. The reference π_ref is a frozen copy of the model as it was before "
    "this training. The DPO loss of one pair is −log σ(β · ((log π(chosen) − log π_ref(chosen)) − (log π(rejected) "
    "− log π_ref(rejected)))). σ is the sigmoid, σ(x) = 1 / (1 + e^(−x)), which turns any number into one between "
    "0 and 1. β (beta) sets how strongly the loss reacts when the policy moves away from the reference; this page "
    f"uses {DEFAULT_BETA:g}, the default of TRL's DPOConfig. The logarithms are natural ones, so log-probabilities "
    "are measured in nats: an answer whose log π rises by 1 nat becomes e ≈ 2.718 times as likely."))
trl_sums = ""
if with_trl:  # TRL's sums run over the completion labels' tokens (section 4's last column)
    extra = completion_extra(chat)
    trl_sums = (" TRL's DPOTrainer sums log p over every token after the generation prompt instead, those of TRL's "
                "completion-only labels (section 4's last column)"
                + (f", which here adds {' '.join(chat.tokens[p] for p in extra)} to each sum." if extra else "."))
definitions.markdown(escape_markdown(
    "On this page each log π is a Σ log p of section 4's table, over the answer and its end-of-turn token, with the "
    f"first answer as the chosen one.{trl_sums}"))
raised = url_state.linked(url_state.number("chat_dpo_raise", 0.0, -5.0, 5.0, 0.5), st.slider,
                          "Suppose training has raised log π of the first answer by (nats)", -5.0, 5.0, step=0.5)
dpo = dpo_loss(compared.chosen.sum_logp + raised, compared.rejected.sum_logp,
               compared.chosen.sum_logp, compared.rejected.sum_logp, DEFAULT_BETA)
st.markdown(
    f"With β = {DEFAULT_BETA:g}: −log σ({DEFAULT_BETA:g} · (({fmt(dpo.policy_chosen_logps)} − "
    f"({fmt(dpo.reference_chosen_logps)})) − ({fmt(dpo.policy_rejected_logps)} − "
    f"({fmt(dpo.reference_rejected_logps)})))) = −log σ({fmt(DEFAULT_BETA * dpo.margin)}) = **{fmt(dpo.loss)}**.")
st.caption(f"At 0 the policy is the reference itself, {loaded.name}: every log-ratio is 0 and the loss is "
           f"ln 2 = {fmt(math.log(2))}, whichever answer the model prefers. DPO's loss measures how far training "
           "has moved the model's preference from where it started, not the preference itself.")
others = None  # for the questions: None where the losses cannot be computed, and then the fold says why
with st.expander("The preference losses beside DPO: IPO, SimPO, ORPO and KTO, on the same two answers"):
    n_chosen, n_rejected = compared.chosen.counted, compared.rejected.counted
    try:
        others = preference_losses(dpo.policy_chosen_logps, dpo.policy_rejected_logps, dpo.reference_chosen_logps,
                                   dpo.reference_rejected_logps, n_chosen, n_rejected, DEFAULT_BETA)
    except BadInput as problem:
        show_problem(problem)
    else:
        row = metric_row()
        for name, value in (("DPO", dpo.loss), ("IPO", others.ipo), ("SimPO", others.simpo),
                            ("CPO-SimPO", others.cpo_simpo), ("ORPO", others.orpo), ("KTO", others.kto)):
            row.metric(name, fmt(value), width="content")
        st.markdown(
            f"- **{term('IPO', 'IPO')}** (Azar et al. 2023; TRL's DPOTrainer, loss_type=\"ipo\") pulls the difference "
            "of the two answers' log-ratios towards a target, 1/(2β). TRL divides each log-ratio by its answer's "
            "tokens first, a normalisation its code says the IPO paper does not discuss explicitly but its results "
            "use: "
            f"h = {fmt(dpo.chosen_logratio)} / {n_chosen} − ({fmt(dpo.rejected_logratio)}) / "
            f"{n_rejected} = {fmt(others.ipo_margin)}, and the loss is (h − 1/(2β))² = "
            f"({fmt(others.ipo_margin)} − {fmt(1 / (2 * DEFAULT_BETA))})² = **{fmt(others.ipo)}**: a squared "
            "distance to a target margin, where DPO's −log σ keeps pushing the margin up for ever.\n"
            f"- **{term('SimPO', 'SimPO')}** (Meng et al. 2024) needs no reference: −log σ(β · "
            f"({fmt(others.chosen_mean_logp)} − ({fmt(others.rejected_mean_logp)})) − γ) = "
            f"**{fmt(others.simpo)}**, each log π divided by its answer's tokens. This page takes β = "
            f"{SIMPO_BETA:g} and γ = {SIMPO_GAMMA:g}, the defaults of TRL's CPOConfig (TRL computes SimPO in its "
            "CPOTrainer, loss_type=\"simpo\"); the SimPO paper trains with a far larger β, from "
            f"{SIMPO_PAPER_BETA[0]:g} to {SIMPO_PAPER_BETA[1]:g}. The paper's loss has no NLL term. TRL adds "
            "cpo_alpha × the chosen answer's NLL unless cpo_alpha = 0, and CPOConfig's default cpo_alpha = "
            f"{CPO_ALPHA:g} gives {CPO_ALPHA:g} × {fmt(-others.chosen_mean_logp)} more: "
            f"{fmt(others.cpo_simpo)}, what TRL's docs call CPO-SimPO.\n"
            f"- **{term('ORPO', 'ORPO')}** (Hong et al. 2024; TRL's ORPOTrainer, λ = beta = {ORPO_LAMBDA:g}) needs no "
            "reference either: with odds = p / (1 − p) of each answer's per-token probability, "
            f"log(odds(chosen) / odds(rejected)) = {fmt(others.log_odds)}, and the loss is the chosen answer's NLL "
            f"{fmt(-others.chosen_mean_logp)} + λ · (−log σ({fmt(others.log_odds)})) = **{fmt(others.orpo)}**. The NLL "
            "term is part of ORPO as its paper writes it; TRL's ORPOTrainer averages it over the prompt's tokens as "
            "well as the answer's, which this page leaves out.\n"
            f"- **{term('KTO', 'KTO')}** (β = {KTO_BETA:g}) scores each answer on its own, as desirable or "
            f"undesirable, against a reference point z₀: 1 − σ(β · ({fmt(dpo.chosen_logratio)} − z₀)) = "
            f"{fmt(others.kto_chosen)} and 1 − σ(β · (z₀ − ({fmt(dpo.rejected_logratio)}))) = "
            f"{fmt(others.kto_rejected)}, mean **{fmt(others.kto)}**. TRL estimates z₀ from the log-ratios of "
            "mismatched prompt–answer pairs, clamped at 0; this page supposes training changed only the first "
            f"answer, so z₀ = {fmt(others.z0)}.")
        st.caption("DPO and IPO compare the policy with the reference; SimPO and ORPO use the policy alone. ORPO adds "
                   "the chosen answer's NLL by design; SimPO does not, and TRL adds it to SimPO unless cpo_alpha is "
                   f"0 (its default is {CPO_ALPHA:g}). KTO needs no pair, only a label on each answer.")
st.session_state[CHAT_PAIR] = (user, answer, other, system, raised)
st.markdown(terms_linked(
    "A reward model is trained with the same loss on a score it gives each answer, −log σ(r(chosen) − r(rejected)): "
    "DPO is that loss with β · (log π − log π_ref) in place of the score. RL fine-tuning's section 6 works it out "
    "for these two answers."))
link_to_lesson("grpo", "RL fine-tuning (GRPO), section 6: the reward model")

show_code(answer_only_labels, end_of_turn_positions, completion_labels, answer_and_all_token_losses, dpo_loss,
          preference_losses)
check_yourself("chat-loss", build_questions(result, others))
