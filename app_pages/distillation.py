import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import (
    choose_causal_lm,
    comparable_causal_lms,
    other_causal_lm,
    scored_with_cpu_fallback,
    stop_without_chat_template,
)
from lmviz.app.chrome import intro, key_table, result_or_stop, term, text_table
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.steps import gated, step_status
from lmviz.app.widgets import guess_cell, metric_row, result_panel, show_code
from lmviz.core.numbers import fmt, fmt_norm, fmt_prob, fmt_signed
from lmviz.core.text import escape_markdown
from lmviz.core.trl import DISTILLATION
from lmviz.course.questions.distillation import build_questions
from lmviz.errors import ChatTemplateError, NotEnoughMemory, NothingToScore
from lmviz.lessons import distillation as d
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 500
SOURCES = {"GKD": "https://arxiv.org/abs/2306.13649",
           "Hinton": "https://arxiv.org/abs/1503.02531",
           "on-policy": "https://thinkingmachines.ai/blog/on-policy-distillation/"}


@st.cache_data(show_spinner=False, max_entries=64)
def get_scores(_scorer: CausalScorer, model_key: tuple, question: str, context: str, answer: str, beta: float,
               temperature: float, _teacher=None, teacher_key: tuple | None = None):
    """Per (model, teacher, context, answer): the teacher's and the student's scores, once for the whole class."""
    return _scorer.run(lambda loaded: d.score_answer(loaded, question, context, answer, beta, temperature,
                                                     _teacher), question, context, answer)


@st.cache_data(show_spinner=False, max_entries=32)
def get_hard_and_soft(_scorer: CausalScorer, model_key: tuple, question: str, context: str, beta: float,
                      temperature: float, _teacher=None, teacher_key: tuple | None = None):
    return _scorer.run(lambda loaded: d.hard_and_soft(loaded, question, context, beta, temperature,
                                                      teacher=_teacher), question, context)


@st.cache_data(show_spinner=False, max_entries=16)
def get_on_policy(_scorer: CausalScorer, model_key: tuple, question: str, context: str, size: int, seed: int,
                  lr: float, _teacher=None, teacher_key: tuple | None = None):
    return _scorer.run(lambda loaded: gated("distillation", loaded, lambda: d.on_policy_step(
        loaded, question, context, size, seed, lr, teacher=_teacher)), question, context)


def tops(pairs) -> str:
    return ", ".join(guess_cell(token, p) for token, p in pairs[:3])


def positions_table(result) -> pd.DataFrame:
    return pd.DataFrame({
        "position": [p.position for p in result.positions],
        "answer token": [p.token for p in result.positions],
        "p_T (teacher)": [fmt_prob(p.p_teacher) for p in result.positions],
        "p_S (student)": [fmt_prob(p.p_student) for p in result.positions],
        "teacher's top 3": [tops(p.teacher_top) for p in result.positions],
        "student's top 3": [tops(p.student_top) for p in result.positions],
        "KL(p_T ‖ p_S)": [fmt(p.forward_kl) for p in result.positions],
        "KL(p_S ‖ p_T)": [fmt(p.reverse_kl) for p in result.positions],
        f"JSD, β = {result.beta:g}": [fmt(p.jsd) for p in result.positions],
    })


def terms_table(terms) -> pd.DataFrame:
    return pd.DataFrame({"token": [t.token for t in terms], "p_T": [fmt_prob(t.p_teacher) for t in terms],
                         "p_S": [fmt_prob(t.p_student) for t in terms], "term": [fmt_signed(t.term) for t in terms]})


intro(
    f"In {term('distillation', 'distillation')} a {term('student model', 'student model')} learns from a "
    f"{term('teacher model', 'teacher model')}'s whole distribution at each position, not from one true "
    f"{term('token', 'token')}. Here both are one chat model: the teacher reads a context the student does not "
    "(context distillation), and both score the same answer, token by token."
)

scorer = choose_causal_lm()
stop_without_chat_template(scorer, "it cannot be given a context as a system message")
panel = result_panel()
url_state.reset_button()
question = url_state.linked(url_state.text("distill_question", d.DEFAULT_QUESTION, MAX_CHARS), st.text_input,
                            "Question (both models)", max_chars=MAX_CHARS)
context = url_state.linked(url_state.text("distill_context", d.DEFAULT_CONTEXT, MAX_CHARS), st.text_area,
                           "The teacher's context: a system message the student does not see", max_chars=MAX_CHARS,
                           height=80)
answer = url_state.linked(url_state.text("distill_answer", d.DEFAULT_ANSWER, MAX_CHARS), st.text_input,
                          "Answer (scored by both)", max_chars=MAX_CHARS)
SAME = "the same model, after the context"
others = comparable_causal_lms(scorer.loaded.name)
chosen_teacher = url_state.linked(url_state.choice("distill_teacher", SAME, [SAME, *others]), st.selectbox,
                                  "Teacher", [SAME, *others],
                                  help="Another model with the same tokenizer can teach instead (a larger SmolLM2 "
                                       "after `python -m lmviz prepare`); it reads the context too.")
teacher, teacher_key = None, None
if chosen_teacher != SAME:
    other = other_causal_lm(chosen_teacher, scorer)
    if isinstance(other, str):
        show_problem(f"{other} The same model teaches instead.")
    else:
        teacher, teacher_key = other.loaded, other.cache_key
left, middle, right = st.columns([2, 2, 1], vertical_alignment="bottom")
beta = url_state.linked(url_state.number("distill_beta", d.DEFAULT_BETA, 0.0, 1.0, 0.05), left.slider,
                        "β: 0 = forward KL, 1 = reverse KL", min_value=0.0, max_value=1.0, step=0.05,
                        help=f"It starts at {d.DEFAULT_BETA:g}, the default of TRL's experimental GKDConfig; TRL "
                             f"{DISTILLATION.version}'s DistillationTrainer defaults to β = {DISTILLATION.beta:g}, the "
                             "reverse KL.")
temperature = url_state.linked(url_state.number("distill_tau", d.DEFAULT_TEMPERATURE, d.MIN_TEMPERATURE,
                                                d.MAX_TEMPERATURE, 0.5), middle.slider,
                               "Temperature τ (divides both models' logits)", min_value=d.MIN_TEMPERATURE,
                               max_value=d.MAX_TEMPERATURE, step=0.5)
t_squared = url_state.linked(url_state.flag("distill_t2"), right.checkbox, "× τ²",
                             help="Hinton's factor: the loss times τ², as DistilBERT does; TRL's trainers do not.")

scorer, result = result_or_stop(lambda: scored_with_cpu_fallback(scorer, lambda s: get_scores(
    s, s.cache_key, question, context, answer, float(beta), float(temperature), teacher, teacher_key)),
    (NothingToScore, ChatTemplateError, d.BadSetting), "Try a shorter context or answer.", panel)

loss = result.loss_t_squared if t_squared else result.loss
with panel:
    row = metric_row()
    row.metric(f"Loss: mean JSD_β{' × τ²' if t_squared else ''}", fmt(loss), width="content")
    row.metric("Forward KL(p_T ‖ p_S)", fmt(result.forward_kl), width="content")
    row.metric("Reverse KL(p_S ‖ p_T)", fmt(result.reverse_kl), width="content")
    row.metric("Answer tokens", len(result.positions), width="content")
st.caption(escape_markdown(("Model: " + result.model + ", teacher and student alike." if result.teacher == result.model
                            else f"Student: {result.model}; teacher: {result.teacher}, with the same tokenizer.")
                           + " The teacher's conversation is "
                           f"{len(result.teacher_prompt)} tokens before the answer, the student's "
                           f"{len(result.student_prompt)}; the answer's {len(result.positions)} tokens end with the "
                           "token that ends the assistant's turn."))

st.subheader("1. Teacher and student, token by token")
st.markdown(
    f"At each answer token, the two distributions over the whole vocabulary (the {term('softmax', 'softmax')} of "
    f"each model's {term('logits', 'logit')}; the probabilities shown at τ = 1), the "
    f"{term('forward KL', 'forward KL')} {term('KL', 'KL divergence')}(p_T ‖ p_S) = Σ p_T (log p_T − log p_S), "
    "which is large where the teacher "
    "gives a token probability the student does not (mass-covering), the "
    f"{term('reverse KL', 'reverse KL')} KL(p_S ‖ p_T) = Σ p_S (log p_S − log p_T), large where the student gives "
    "probability the teacher does not (mode-seeking), and the "
    f"{term('generalized JSD', 'JSD')} at {term('β', 'β (beta)')}, all at τ = {result.temperature:g}. The loss is "
    "their mean over the answer.")
key_table(positions_table(result), "lmviz_distillation.csv", hide_index=True)
with st.expander("A position's sums, written out for their largest terms"):
    at = st.selectbox("Position", range(len(result.positions)), key="distill_position",
                      format_func=lambda n: f"{n}: {result.positions[n].token}")
    chosen = result.positions[at]
    left, right = st.columns(2)
    with left:
        st.markdown(f"KL(p_T ‖ p_S) = {fmt(chosen.forward_kl)}; its largest terms p_T (log p_T − log p_S):")
        text_table(terms_table(chosen.forward_terms), hide_index=True)
    with right:
        st.markdown(f"KL(p_S ‖ p_T) = {fmt(chosen.reverse_kl)}; its largest terms p_S (log p_S − log p_T):")
        text_table(terms_table(chosen.reverse_terms), hide_index=True)
    st.caption("The rest of the vocabulary's terms make up the difference; a term can be negative, the sum never.")

st.subheader("2. β, and the jumps at both ends")
sweep = {b: (trl, formula) for b, trl, formula in result.sweep}
st.markdown(
    f"JSD_β = β KL(p_T ‖ M) + (1 − β) KL(p_S ‖ M) with M = β p_T + (1 − β) p_S ([GKD, eq. 1]({SOURCES['GKD']})). As β "
    "goes to 0, M becomes p_S and the formula goes to 0; as β goes to 1, M becomes p_T and it goes to 0 again. TRL "
    f"defines β = 0 as the forward KL and β = 1 as the reverse KL instead, so the loss jumps: "
    f"{fmt(sweep[1e-6][0])} at β = 10⁻⁶, **{fmt(sweep[0.0][0])}** at β = 0; {fmt(sweep[1 - 1e-6][0])} at β = "
    f"1 − 10⁻⁶, **{fmt(sweep[1.0][0])}** at β = 1. TRL {DISTILLATION.version}'s DistillationTrainer "
    f"defaults to β = {DISTILLATION.beta:g}, the reverse KL; its experimental GKDTrainer to β = "
    f"{DISTILLATION.gkd_beta:g}, where the slider starts.")
text_table(pd.DataFrame({"β": [f"{b:g}" for b, _, _ in result.sweep],
                         "TRL's loss": [fmt(trl) for _, trl, _ in result.sweep],
                         "eq. 1 alone": [fmt(formula) for _, _, formula in result.sweep]}).T, hide_index=False)

st.subheader("3. τ and τ²")
st.markdown(
    f"A {term('temperature', 'temperature')} τ divides both models' logits before the softmax, flattening both "
    f"distributions. Where τ is large against the gaps between a position's logits, the loss's "
    f"{term('gradient', 'gradient')} shrinks about as 1/τ², and Hinton's distillation multiplies the loss by "
    f"{term('τ²', 'temperature in distillation')} to keep its size ([Hinton et al. 2015]({SOURCES['Hinton']})); "
    f"DistilBERT does, TRL's generalized_jsd_loss does not. At smaller τ no such rule holds: below τ = 1 the loss "
    "can even grow with τ (as τ falls, both distributions sharpen towards their likeliest token, and where the two "
    "models agree on it they draw closer). Measured here, the loss "
    "and the size of its gradient with respect to the student's logits, ‖∂loss/∂z_S‖:")
tau = result.temperature
text_table(pd.DataFrame({
    "": ["loss", "‖∂loss/∂z_S‖"],
    f"τ = {tau:g}, without τ²": [fmt(result.loss), fmt_norm(result.gradient_norm)],
    f"τ = {tau:g}, × τ²": [fmt(result.loss_t_squared), fmt_norm(result.gradient_norm_t_squared)],
    "τ = 1": [fmt(result.loss_at_1), fmt_norm(result.gradient_norm_at_1)],
}), hide_index=True)
if tau != 1:
    st.markdown(
        f"From τ = 1 to τ = {tau:g} the loss went {fmt(result.loss_at_1)} → {fmt(result.loss)}, and its gradient's "
        f"size was multiplied by {result.gradient_norm / result.gradient_norm_at_1:.3g}, where 1/τ² is "
        f"{1 / tau ** 2:.3g}.")

st.subheader("4. Hard or soft")
try:
    hard = get_hard_and_soft(scorer, scorer.cache_key, question, context, float(beta), float(temperature), teacher,
                             teacher_key)
    st.markdown(f"The teacher's {term('greedy', 'greedy decoding')} answer: "
                + escape_markdown(f"“{hard.teacher_answer}”."))
    st.markdown(
        "Hard distillation trains the student on that text as on any text, with the "
        f"{term('cross-entropy', 'cross-entropy')} on its tokens: **{fmt(hard.hard)}**. Soft distillation "
        f"compares the two whole distributions at the same tokens: JSD_β = **{fmt(hard.soft)}**. The hard loss "
        "keeps only the teacher's pick at each position; the soft loss also keeps how sure it was, and what else it "
        f"considered (the teacher's own −{term('log p', 'log-probability')} of its picks: "
        f"{fmt(hard.teacher_nll)}).")
except (NothingToScore, ChatTemplateError, NotEnoughMemory) as problem:
    show_problem(problem)

st.subheader("5. On-policy: the student answers, the teacher grades each token")
st.markdown(
    f"{term('On-policy', 'on-policy')} distillation scores the student's own answers: the student draws a few, the "
    "teacher gives each drawn token its log-probability, and each token's "
    f"{term('advantage', 'advantage')} is −(log π_S − log π_T) ([Thinking Machines, 2025]({SOURCES['on-policy']})). "
    "The difference log π_S − log π_T at the token drawn is a one-sample estimate of the reverse KL at that "
    "position: its expectation over the token the student draws there, under p_S, is KL(p_S ‖ p_T), which the "
    "table below gives exactly, summed over the whole vocabulary (a mean over each answer's positions). One step of "
    f"{term('SGD', 'SGD')} at a {term('learning rate', 'learning rate')} on a private copy of the weights follows "
    "(the shared model never changes). A small enough step raises the advantage-weighted sum Σ A · log π_S over "
    "the drawn tokens: on the whole, tokens the teacher finds likelier than the student does gain and the others "
    "lose. Not each one: every token moves through the weights all of them share, so a single token can move the "
    "other way; and a step of finite size can overshoot.")
left, middle, right = st.columns(3)
size = url_state.linked(url_state.number("distill_group", d.DEFAULT_GROUP, 2, 8), left.number_input, "Answers",
                        min_value=2, max_value=8)
seed = url_state.linked(url_state.number("distill_seed", d.DEFAULT_SEED, 0, 10**9), middle.number_input, "Seed",
                        min_value=0)
lr = url_state.linked(url_state.number("distill_lr", d.DEFAULT_RATE, 1e-5, 0.1), right.number_input,
                      "Learning rate", min_value=1e-5, max_value=0.1, format="%g")
policy = None
if url_state.linked(url_state.flag("distill_step"), st.toggle, "Draw the answers and take the step",
                    help=f"About {d.DEFAULT_GROUP * 6} s on a laptop's CPU: sampling, the teacher's scores, the "
                         "step and the KL before and after."):
    try:
        with step_status(f"Drawing {size} answers and taking the step…", "distillation"):
            policy = get_on_policy(scorer, scorer.cache_key, question, context, int(size), int(seed), float(lr),
                                   teacher, teacher_key)
    except (NothingToScore, ChatTemplateError, NotEnoughMemory, d.BadSetting) as problem:
        show_problem(problem)
if policy is not None:
    text_table(pd.DataFrame({
        "answer the student drew": [a.text for a in policy.answers],
        "tokens": [len(a.ids) for a in policy.answers],
        "each token's advantage −(log π_S − log π_T), one sample": [" ".join(fmt_signed(x, 2) for x in a.advantages)
                                                                   for a in policy.answers],
        "exact KL(p_S ‖ p_T), mean per token, before": [fmt(sum(a.reverse_kl_before) / len(a.ids))
                                                        for a in policy.answers],
        "after": [fmt(sum(a.reverse_kl_after) / len(a.ids)) for a in policy.answers],
    }), hide_index=True)
    fell = policy.kl_after < policy.kl_before
    st.markdown(
        f"After one step at a learning rate of {policy.lr:g} (‖g‖ = {fmt_norm(policy.grad_norm)}), the student's "
        f"exact reverse KL to the teacher, averaged over all {sum(len(a.ids) for a in policy.answers)} drawn tokens' "
        "positions, went from "
        f"**{fmt(policy.kl_before)}** to **{fmt(policy.kl_after)}**: "
        + ("the student moved toward the teacher." if fell else
           "it rose: the step overshot. Try a smaller learning rate."))

show_code(d.score_answer, d.generalized_jsd, d.jsd_formula, d.distillation_loss, d.on_policy_loss, d.on_policy_step)
check_yourself("distill", build_questions(result))
