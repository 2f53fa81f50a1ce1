import html
import math

import pandas as pd
import streamlit as st

from lmviz.app.choosers import choose_causal_lm, scored_with_cpu_fallback
from lmviz.app.chrome import term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_code
from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import CHECK_DIGITS, fmt, fmt_gap, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.questions.chat_loss import build_questions
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import CHAT_ROLE_COLOURS
from lmviz.lessons.chat_loss import (
    DEFAULT_BETA,
    ChatTemplateError,
    analyse_sft,
    answer_and_all_token_losses,
    answer_only_labels,
    compare_answers,
    control_tokens,
    dpo_loss,
    end_of_turn_positions,
)
from lmviz.lessons.next_token import BadInput
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 1000
DEFAULTS = {"chat_user": "What is the capital of France?", "chat_answer": "The capital of France is Paris.",
            "chat_other": "The capital of France is Berlin.", "chat_system": ""}
ROLE_WORDS = {"system": "system", "user": "user", "assistant": "answer", "template": "template"}


@st.cache_data(show_spinner=False, max_entries=64)
def get_analysis(_scorer: CausalScorer, model_key: tuple, user: str, answer: str, system: str | None):
    return _scorer.run(lambda loaded: analyse_sft(loaded, user, answer, system), user, answer, system)


@st.cache_data(show_spinner=False, max_entries=64)
def get_comparison(_scorer: CausalScorer, model_key: tuple, user: str, chosen: str, rejected: str,
                   system: str | None):
    return _scorer.run(lambda loaded: compare_answers(loaded, user, chosen, rejected, system),
                       user, chosen, rejected, system)


def conversation_chips(chat) -> str:
    """Each token over its role; the tokens that count have a solid border and a ✓ (not colour alone)."""
    counted = set(chat.counted)
    chips = [stacked_chip(html.escape(token), ("✓ " if p in counted else "") + ROLE_WORDS[role],
                          CHAT_ROLE_COLOURS[role], border="2px solid #000000" if p in counted else "none")
             for p, (token, role) in enumerate(zip(chat.tokens, chat.roles))]
    return chip_row(chips)


def role_legend() -> str:
    chips = [stacked_chip(words, "", CHAT_ROLE_COLOURS[role]) for role, words in ROLE_WORDS.items()]
    counted = stacked_chip("✓", "", CHAT_ROLE_COLOURS["assistant"], border="2px solid #000000")
    return chip_row(["<span>who wrote the token:</span>", *chips,
                     f"<span>{counted} counted in the loss (solid border)</span>"], "lmviz-legend")


st.markdown(
    "A chat model is fine-tuned on conversations. Its tokenizer's chat template writes each conversation out "
    f"as one text, with marker {term('tokens', 'token')} around every turn. In supervised fine-tuning (SFT) the "
    "model should learn to write the assistant's answer, not the user's question, so every "
    f"{term('label', 'label')} outside the answer is {term('-100', '-100 / ignore_index')}: those positions add "
    f"nothing to the loss, which is the mean of -{term('log p', 'log-probability')} over the answer's tokens. "
    "The answer's end-of-turn token counts too: it is how the model learns to stop."
)

scorer = choose_causal_lm()
loaded, tokenizer = scorer.loaded, scorer.loaded.tokenizer
if not getattr(tokenizer, "chat_template", None):
    # used in place of the model asked for (choose_causal_lm keeps that in the link), which could not be loaded
    fell_back = loaded.name != st.query_params["model"]
    advice = ("The model asked for could not be loaded here (see above), and no chat model could take its place."
              if fell_back else "Choose a chat model under Model above, such as the bundled SmolLM2-135M-Instruct.")
    st.warning(escape_markdown(
        f"{loaded.name}'s tokenizer has no chat template, so it has no chat format to fine-tune. {advice}"))
    st.stop()
panel = result_panel()
for key, value in DEFAULTS.items():
    st.session_state.setdefault(key, value)
user = st.text_input("User message", key="chat_user", max_chars=MAX_CHARS)
answer = st.text_input("Assistant's answer (the text fine-tuning teaches)", key="chat_answer", max_chars=MAX_CHARS)
system = st.text_input("System message (optional)", key="chat_system", max_chars=MAX_CHARS) or None

try:
    scorer, result = scored_with_cpu_fallback(scorer, lambda s: get_analysis(s, s.cache_key, user, answer, system))
except (NothingToScore, ChatTemplateError, BadInput) as problem:  # in the pinned panel: on screen with the boxes
    show_problem(problem, panel)
    st.stop()
except NotEnoughMemory as problem:
    show_problem(f"{problem} Try shorter messages.", panel)
    st.stop()
chat = result.chat

with panel:
    sft, counted, every = st.columns(3)
    sft.metric("Answer-only loss (SFT)", fmt(result.loss_answer),
               help="The mean -log p over the answer's tokens and its end-of-turn token.")
    counted.metric("Labels that count", f"{result.counted_answer} of {result.counted_all}")
    every.metric("Loss if nothing were masked", fmt(result.loss_all))

st.subheader("1. The conversation as the model reads it")
st.html(conversation_chips(chat))
st.html(role_legend())
controls = set(control_tokens(tokenizer))
markers = ", ".join(dict.fromkeys(t for t in chat.tokens if t in controls))  # the ones this conversation uses
end = " ".join(chat.tokens[p] for p in chat.end_of_turn_positions)
st.caption(escape_markdown(
    f"{loaded.name}'s chat template wrote the grey tokens, including its marker tokens ({markers}). The answer ends "
    f"with {end}, the first marker the template writes after it: the end-of-turn token the model must learn to "
    "write to stop."))
if chat.default_system is not None:
    st.caption(escape_markdown(f"No system message was given, so the template added its own: “{chat.default_system}”"))
if chat.markers_typed:
    st.info(escape_markdown(
        f"The messages contain {', '.join(chat.markers_typed)}, which this template uses as a marker. Typed text "
        "is read as plain characters, as transformers does with sanitize_control_tokens=True: it opens no turn."))

st.subheader("2. Inputs and labels: -100 everywhere but the answer")
only_counted = st.toggle("Only the positions that count", value=False, key="chat_only_counted")
rows = [r for r in result.rows if r.counted] if only_counted else result.rows
st.dataframe(pd.DataFrame({
    "position": [r.position for r in rows],
    "input token": [r.input_token for r in rows],
    "next token": [r.target_token for r in rows],
    "its role": [ROLE_WORDS[r.target_role] for r in rows],
    "label": [r.label for r in rows],
    "counts": ["✓ yes" if r.counted else "no" for r in rows],
    "p(next token)": [fmt_prob(r.prob) for r in rows],
    "-log p": [fmt(r.nll) for r in rows],
}), hide_index=True, height=320)
st.caption(f"The labels are the input ids where a token counts and {IGNORE_INDEX} elsewhere; the model shifts them "
           "by one inside, so each row's label is the id of the next token. Every position still gets a p: "
           "masking changes what is averaged, not what the model computes.")

st.subheader("3. The answer-only loss, and the loss if the prompt were not masked")
st.markdown(
    f"The answer-only loss is the mean of the {result.counted_answer} counted -log p: **{fmt(result.loss_answer)}**. "
    f"Averaged over all {result.counted_all} positions it would be {fmt(result.loss_all)}: the model would also "
    "be trained to write the template and the user's question.")
st.dataframe(pd.DataFrame({
    "loss": ["answer only (labels -100 outside the answer)", "every token (labels = input ids)"],
    "mean of the table's -log p": [fmt(result.loss_answer, CHECK_DIGITS), fmt(result.loss_all, CHECK_DIGITS)],
    "the model's own loss (out.loss)": [fmt(result.loss_answer_model, CHECK_DIGITS),
                                        fmt(result.loss_all_model, CHECK_DIGITS)],
}), hide_index=True)
gap = max(abs(result.loss_answer - result.loss_answer_model), abs(result.loss_all - result.loss_all_model))
st.caption(f"Largest difference: {fmt_gap(gap)} (float32 rounding).")

st.subheader("4. Two answers to the same question")
other = st.text_input("Another answer, to compare", key="chat_other", max_chars=MAX_CHARS)
try:
    scorer, compared = scored_with_cpu_fallback(
        scorer, lambda s: get_comparison(s, s.cache_key, user, answer, other, system))
except (NothingToScore, ChatTemplateError, BadInput) as problem:
    show_problem(problem)
    st.stop()
except NotEnoughMemory as problem:
    show_problem(f"{problem} Try shorter answers.")
    st.stop()
st.dataframe(pd.DataFrame({
    "answer": [compared.chosen.answer, compared.rejected.answer],
    "tokens counted": [compared.chosen.counted, compared.rejected.counted],
    "Σ log p (log p of the whole answer)": [fmt(compared.chosen.sum_logp), fmt(compared.rejected.sum_logp)],
    "mean -log p (its SFT loss)": [fmt(compared.chosen.mean_nll), fmt(compared.rejected.mean_nll)],
}), hide_index=True)
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

st.subheader("5. Preference training (DPO) is built from the same sums")
st.markdown(
    "Direct preference optimisation trains a model (the policy π) to prefer a chosen answer over a rejected one, "
    "measured against a frozen copy of the model before this training (the reference π₀). Its loss for one "
    "pair is −log σ(β · ((log π(chosen) − log π₀(chosen)) − (log π(rejected) − log π₀(rejected)))), where each "
    "log π is exactly a Σ log p above, here with the first answer as the chosen one, and σ is the sigmoid.")
raised = st.slider("Suppose training has raised log π of the first answer by (nats)", -5.0, 5.0, 0.0, 0.5,
                   key="chat_dpo_raise")
dpo = dpo_loss(compared.chosen.sum_logp + raised, compared.rejected.sum_logp,
               compared.chosen.sum_logp, compared.rejected.sum_logp, DEFAULT_BETA)
st.markdown(
    f"With β = {DEFAULT_BETA:g}: −log σ({DEFAULT_BETA:g} · (({fmt(dpo.policy_chosen_logps)} − "
    f"({fmt(dpo.reference_chosen_logps)})) − ({fmt(dpo.policy_rejected_logps)} − "
    f"({fmt(dpo.reference_rejected_logps)})))) = −log σ({fmt(DEFAULT_BETA * dpo.margin)}) = **{fmt(dpo.loss)}**.")
st.caption(f"At 0 the policy is the reference itself, {loaded.name}: every log-ratio is 0 and the loss is "
           f"ln 2 = {fmt(math.log(2))}, whichever answer the model prefers. DPO's loss measures how far training "
           "has moved the model's preference from where it started, not the preference itself.")

show_code(answer_only_labels, end_of_turn_positions, answer_and_all_token_losses, dpo_loss)
check_yourself("chat-loss", build_questions(result))
