import html
import math

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.byte_pieces import explain_byte_pieces
from lmviz.app.choosers import (
    choose_causal_lm,
    one_step_at_a_time,
    scored_with_cpu_fallback,
    stop_without_chat_template,
)
from lmviz.app.chrome import intro, key_table, stop_page, term
from lmviz.app.path import CHAT_PAIR, check_yourself, link_to_lesson
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_code
from lmviz.core.numbers import fmt, fmt_gap, fmt_prob, fmt_signed
from lmviz.core.text import escape_markdown
from lmviz.course.questions.grpo import build_questions
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import BLUISH_GREEN, LIGHT_GREY
from lmviz.lessons import chat_loss
from lmviz.lessons.chat_loss import ChatTemplateError, compare_answers, dpo_loss
from lmviz.lessons.grpo import (
    DAPO,
    DEFAULT_BETA,
    DEFAULT_EPSILON,
    DR_GRPO,
    GRPO,
    LOSS_TYPE_SOURCES,
    LOSS_TYPES,
    MAX_GROUP,
    MAX_NEW_TOKENS,
    MEAN,
    MIN_GROUP,
    POPULATION_STD,
    SAMPLE_STD,
    SCALINGS,
    SEQUENCE,
    TOKEN,
    TRL_STD_EPS,
    advantages,
    aggregate,
    at_most_tokens,
    bradley_terry,
    clip_terms,
    contains_number,
    contains_word,
    dpo_as_bradley_terry,
    grpo_step,
    rewards,
    sample_group,
)
from lmviz.lessons.next_token import MAX_TEMPERATURE, MIN_TEMPERATURE, BadInput
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 500
RULE_CHARS = 40  # a number, a word or a count
DEFAULT_PROMPT = "What is 7 + 5? Reply with just the number."
# The rules a learner picks from: the words of the radio, the box's label and its default, the rule it builds
RULES = {
    "contains the number": ("The number", "12", contains_number),
    "contains the word": ("The word", "twelve", contains_word),
    "is at most N tokens long": ("N, the most tokens", "6", at_most_tokens),
}
SCALING_WORDS = {MEAN: "R − mean (Dr. GRPO)", POPULATION_STD: "÷ population std",
                 SAMPLE_STD: "÷ sample std (GRPO as published, TRL)"}
# A log scale. On the default group (seed 0, 8 answers, 12 tokens) 3e-4 moves the two rewarded answers' log π up by
# 0.43 and 0.18 and clips no token; 1e-3 clips 4 of its 95 tokens
RATES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
DEFAULT_RATE = 1e-3
RIGHT, WRONG = "✓", "✗"


@st.cache_data(show_spinner=False, max_entries=32)
def get_group(_scorer: CausalScorer, model_key: tuple, prompt: str, size: int, seed: int, temperature: float,
              limit: int):
    return _scorer.run(lambda loaded: sample_group(loaded, prompt, size, seed, temperature, limit), prompt)


@st.cache_data(show_spinner=False, max_entries=32)
def get_step(_scorer: CausalScorer, model_key: tuple, _group, group_key: tuple, advantages: tuple, lr: float,
             loss_type: str, level: str, epsilon: float, beta: float):
    with one_step_at_a_time():
        return _scorer.run(lambda loaded: grpo_step(loaded, _group, list(advantages), lr, loss_type, level, epsilon,
                                                    beta=beta))


@st.cache_data(show_spinner=False, max_entries=32)
def get_pair(_scorer: CausalScorer, model_key: tuple, user: str, chosen: str, rejected: str, system: str | None):
    return _scorer.run(lambda loaded: compare_answers(loaded, user, chosen, rejected, system),
                       user, chosen, rejected, system)



def reward_text(reward: float) -> str:
    """A rule's reward as a whole number (1, 0) when it is one, like the rules' own 1.0 and 0.0."""
    return fmt(reward, 0) if float(reward).is_integer() else fmt(reward)


def answer_label(i: int, reward: float) -> str:
    return f"{RIGHT if reward > 0 else WRONG} answer {i + 1}, reward {reward_text(reward)}"


def answer_chips(group, scores: list[float]) -> str:
    """Each answer on a line: its mark and reward in words, then its tokens over log π_old (the rewarded answers'
    chips green, and marked ✓, not by colour alone)."""
    lines = []
    for i, (answer, reward) in enumerate(zip(group.answers, scores)):
        ending = "ended by the model" if answer.finished else f"cut at the limit of {group.max_new_tokens} tokens"
        head = f"<span><b>{html.escape(answer_label(i, reward))}</b>, {len(answer.ids)} tokens, {ending}:</span>"
        chips = [stacked_chip(html.escape(token), fmt(logp, 2), BLUISH_GREEN if reward > 0 else LIGHT_GREY)
                 for token, logp in zip(answer.tokens, answer.logp_old)]
        lines.append(chip_row([head, *chips]))
    return "".join(lines)


def token_table(loss, group, i: int, after: bool) -> pd.DataFrame:
    """One answer's terms (lmviz.lessons.grpo.TokenTerms), token by token."""
    rows = loss.tokens[i]
    return pd.DataFrame({
        "token": group.answers[i].tokens,
        "log π_old": [fmt(t.logp_old) for t in rows],
        "log π_θ" + (" after" if after else ""): [fmt(t.logp_new) for t in rows],
        "ratio r": [fmt(t.ratio) for t in rows],
        "r·A": [fmt(t.unclipped) for t in rows],
        "clip(r)·A": [fmt(t.clipped) for t in rows],
        "the min takes": ["clip(r)·A: gradient 0" if t.takes_clipped else "r·A" for t in rows],
        "β·KL": [fmt(t.weighted_kl) for t in rows],
        "loss": [fmt(t.loss) for t in rows],
    })


intro(
    f"A chat model can also be fine-tuned from a {term('reward', 'reward')}, a score for a whole answer, without any "
    f"answer written for it. {term('GRPO', 'GRPO')} samples a group of answers to one prompt, scores each with a "
    f"rule, and gives each answer an {term('advantage', 'advantage')}: how much better it did than its group. Every "
    f"{term('token', 'token')} of an answer then gets {term('PPO', 'PPO')}'s term: its advantage times the "
    f"{term('ratio', 'ratio')} of its probability under the {term('policy', 'policy')} being trained, π_θ, to its "
    f"probability under the policy that {term('sampled', 'sampling')} it, π_old, {term('clipped', 'clip')}; plus a "
    f"penalty, {term('β', 'β (beta)')} times the {term('KL', 'KL divergence')}, for moving away from a "
    f"{term('reference model', 'reference model')}. Here is all of it on a group the model on "
    "this page samples: the advantages three ways, the loss token by token and averaged four ways, one step of "
    f"training, and last the {term('reward model', 'reward model')}'s loss, which {term('DPO', 'DPO')} turns out "
    "to be.")

scorer = choose_causal_lm()
stop_without_chat_template(scorer, "it cannot be asked a question as a chat model is")
panel = result_panel()
url_state.reset_button()
prompt = url_state.linked(url_state.text("grpo_prompt", DEFAULT_PROMPT, MAX_CHARS), st.text_input,
                          "Prompt: a question whose answer a rule can check", max_chars=MAX_CHARS)
size_box, seed_box, temperature_box, limit_box = st.columns(4)
size = url_state.linked(url_state.number("grpo_group", 8, MIN_GROUP, MAX_GROUP), size_box.slider,
                        "Answers in the group, G", MIN_GROUP, MAX_GROUP)
seed = url_state.linked(url_state.number("grpo_seed", 0, 0, 2**31 - 1), seed_box.number_input, "Seed", 0, 2**31 - 1,
                        help="The same seed draws the same group, for every visitor.")
temperature = url_state.linked(url_state.number("grpo_temperature", 1.0, MIN_TEMPERATURE, MAX_TEMPERATURE),
                               temperature_box.number_input, "Temperature", MIN_TEMPERATURE, MAX_TEMPERATURE,
                               step=0.1)
limit = url_state.linked(url_state.number("grpo_limit", 12, 1, MAX_NEW_TOKENS), limit_box.number_input,
                         "Most new tokens", 1, MAX_NEW_TOKENS,
                         help="Each new token is one more pass of the whole group through the model.")
rule_box, value_box = st.columns([2, 1])
rule_name = url_state.linked(url_state.choice("grpo_rule", next(iter(RULES)), list(RULES)), rule_box.radio,
                             "Reward: 1 if the answer…, else 0", list(RULES), horizontal=True)
label, default, make_rule = RULES[rule_name]
value = url_state.linked(url_state.text(f"grpo_rule_{list(RULES).index(rule_name)}", default, RULE_CHARS),
                         value_box.text_input, label, max_chars=RULE_CHARS)

try:
    rule = make_rule(value)
    with panel, st.spinner(f"Sampling {size} answers, one token at a time…", show_time=True):
        scorer, group = scored_with_cpu_fallback(
            scorer, lambda s: get_group(s, s.cache_key, prompt, int(size), int(seed), float(temperature), int(limit)))
except (NothingToScore, ChatTemplateError, BadInput) as problem:  # in the pinned panel: on screen with the boxes
    show_problem(problem, panel)
    stop_page()
except NotEnoughMemory as problem:
    show_problem(f"{problem} Try a smaller group or fewer tokens.", panel)
    stop_page()
group_key = (prompt, int(size), int(seed), float(temperature), int(limit))
scores = rewards(group, rule)
with panel:  # the group's count at once; the step's numbers beside it once the step is taken (seconds more)
    right, clipped, up, down = st.columns(4)
    right.metric("Rewarded answers", f"{sum(r > 0 for r in scores)} of {group.size}")
scaled = {how: advantages(scores, how) for how in SCALINGS}
loaded = scorer.loaded

st.subheader("1. The group: answers, and the reward of each")
st.caption(
    escape_markdown(f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}, weights {loaded.dtype}. ")
    + f"The prompt is one user message written out by the model's {term('chat template', 'chat template')} "
    f"({len(group.prompt_ids)} tokens); {group.size} answers were drawn after it at "
    f"{term('temperature', 'temperature')} {group.temperature:g} with {term('seed', 'seed')} {group.seed}, a token "
    f"at a time, each ending at the model's end token or at {group.max_new_tokens} tokens, in {group.seconds:.1f} "
    f"s. Under each token: log π_old, the {term('log-probability', 'log-probability')} it was drawn with.")
st.html(answer_chips(group, scores))
explain_byte_pieces(token for answer in group.answers for token in answer.tokens)
st.markdown(escape_markdown(f"The rule, {rule.name}: {rule.description}. As the function it is:"))
st.code(rule.source, language="python")

st.subheader("2. Advantages: each answer against its group")
adv = scaled[SAMPLE_STD]
total = " + ".join(reward_text(r) for r in scores)
squares = math.fsum(adv.squares)
st.markdown(escape_markdown(
    f"mean = ({total}) / {adv.count} = {fmt(adv.mean)}. Each advantage starts from R − mean; Σ (R − mean)² = "
    f"{fmt(squares)}, so the population standard deviation is √({fmt(squares)} / {adv.count}) = "
    f"{fmt(scaled[POPULATION_STD].std)} and the sample one (÷ G − 1, as torch.std) √({fmt(squares)} / "
    f"{adv.count - 1}) = {fmt(adv.std)}."))
key_table(pd.DataFrame({
    "answer": [answer_label(i, r) for i, r in enumerate(scores)],
    SCALING_WORDS[MEAN]: [fmt_signed(a) for a in scaled[MEAN].advantages],
    SCALING_WORDS[POPULATION_STD]: [fmt_signed(a) for a in scaled[POPULATION_STD].advantages],
    SCALING_WORDS[SAMPLE_STD]: [fmt_signed(a) for a in adv.advantages],
}), "grpo-advantages.csv", hide_index=True)
if adv.teaches_nothing:
    st.info(escape_markdown(
        f"Every answer has the reward {reward_text(scores[0])}: every R − mean is 0, so every advantage is 0 and so is "
        "the gradient of the clipped terms. This group teaches nothing; try another seed, a larger group, a higher "
        "temperature or another rule."), icon=":material/info:")
else:
    trl = advantages(scores, SAMPLE_STD, TRL_STD_EPS)
    st.caption(escape_markdown(
        f"TRL adds {TRL_STD_EPS:g} to the std before dividing, so that a group of equal rewards does not divide 0 by "
        f"0: there answer 1's advantage is {fmt(trl.deviations[0])} / ({fmt(adv.std)} + {TRL_STD_EPS:g}) = "
        f"{fmt_signed(trl.advantages[0])}, against {fmt_signed(adv.advantages[0])} here."))
how = url_state.linked(url_state.choice("grpo_scale", SAMPLE_STD, SCALINGS), st.radio,
                       "The advantages the step uses", SCALINGS, format_func=SCALING_WORDS.get, horizontal=True)
chosen_advantages = tuple(scaled[how].advantages)

st.subheader("3. The loss, token by token, before any update")
rate_box, type_box, epsilon_box, beta_box = st.columns(4)
lr = url_state.linked(url_state.choice("grpo_lr", DEFAULT_RATE, RATES), rate_box.select_slider, "Learning rate", RATES,
                      format_func=lambda r: f"{r:g}", help="The step of section 5: w ← w − lr · g on every weight.")
loss_type = url_state.linked(url_state.choice("grpo_loss_type", LOSS_TYPES[0], LOSS_TYPES), type_box.selectbox,
                             "Loss type (TRL's loss_type)", LOSS_TYPES,
                             help="How the per-token terms are averaged: section 4.")
epsilon = url_state.linked(url_state.number("grpo_epsilon", DEFAULT_EPSILON, 0.01, 0.9), epsilon_box.number_input,
                           "Clip ε", 0.01, 0.9, step=0.05, help="The ratio is clipped to [1 − ε, 1 + ε].")
beta = url_state.linked(url_state.number("grpo_beta", DEFAULT_BETA, 0.0, 1.0), beta_box.number_input, "KL weight β",
                        0.0, 1.0, step=0.01, format="%.3f")
sequence_level = url_state.linked(url_state.flag("grpo_sequence"), st.toggle,
                                  "One ratio per answer (sequence level, GSPO) instead of one per token")
level = SEQUENCE if sequence_level else TOKEN
try:
    with panel, st.spinner("One step of training on a copy of the weights…", show_time=True):
        scorer, step = scored_with_cpu_fallback(scorer, lambda s: get_step(
            s, s.cache_key, group, group_key, chosen_advantages, float(lr), loss_type, level, float(epsilon),
            float(beta)))
except BadInput as problem:
    show_problem(problem, panel)
    stop_page()
except NotEnoughMemory as problem:
    show_problem(f"{problem} Try a smaller group or fewer tokens.", panel)
    stop_page()
before, after = step.before, step.after
rewarded = [i for i, r in enumerate(scores) if r > 0]
others = [i for i, r in enumerate(scores) if r <= 0]


def mean_change(indices: list[int]) -> float:
    return math.fsum(step.answer_logps_after[i] - step.answer_logps_before[i] for i in indices) / len(indices)


clipped.metric("Clipped after the step", f"{after.clipped_count} of {after.token_count}",
               help="The answer tokens where the min takes clip(r)·A, whose gradient is 0, of all the group's "
                    "answer tokens. Before the step: none.")
if rewarded:
    up.metric("log π change, rewarded", fmt_signed(mean_change(rewarded)),
              help="Σ log π over the answer's tokens, after the step minus before, averaged over the rewarded "
                   "answers.")
if others:
    down.metric("log π change, others", fmt_signed(mean_change(others)),
                help="The same over the answers without a reward.")

shown = st.selectbox("Answer shown token by token (here and in section 5)", range(group.size),
                     format_func=lambda i: answer_label(i, scores[i]), key="grpo_answer")
st.markdown(escape_markdown(
    f"Each token's term is −min(r·A, clip(r, 1 − ε, 1 + ε)·A) + β·KL, with r = π_θ / π_old = e^(log π_θ − log π_old), "
    f"A its answer's advantage ({fmt_signed(chosen_advantages[shown])} for this answer) and ε = {fmt(epsilon, 2)}. "
    "π_old is the policy that sampled the group; π_θ the one being trained; the reference π_ref the model before "
    f"training, here the shared {loaded.name}."))
key_table(token_table(before, group, shown, after=False), "grpo-tokens-before.csv", hide_index=True)
st.markdown(escape_markdown(
    f"Before any update π_θ is π_old: the same weights, so every log π_θ − log π_old is 0 and every ratio is exactly "
    f"1. Then r·A = clip(r)·A = A, nothing is clipped ({before.clipped_count} of {before.token_count} tokens), and "
    "the KL to the reference, the same weights again, is 0. A clip fraction logged at the first step of a group is "
    "always 0: the clip can only act after the policy has moved."))

st.subheader("4. One loss for the group: four ways to average the tokens")
weight = {kind: before.losses[kind].token_weights for kind in LOSS_TYPES}
key_table(pd.DataFrame({
    "answer": [answer_label(i, r) for i, r in enumerate(scores)],
    "tokens": before.lengths,
    "A": [fmt_signed(a) for a in chosen_advantages],
    "one token weighs, grpo": [fmt_prob(w) for w in weight[GRPO]],
    "bnpo, dapo": [fmt_prob(w) for w in weight[DAPO]],
    "dr_grpo": [fmt_prob(w) for w in weight[DR_GRPO]],
}), "grpo-token-weights.csv", hide_index=True)
st.markdown("\n".join(f"- **{kind}**: {escape_markdown(LOSS_TYPE_SOURCES[kind])}. Before the step: "
                      f"{fmt(before.losses[kind].loss)}." for kind in LOSS_TYPES))
lengths = before.lengths
long_wrong = max(others, key=lambda i: lengths[i], default=None)
short_right = min(rewarded, key=lambda i: lengths[i], default=None)
if long_wrong is not None and short_right is not None and lengths[long_wrong] > lengths[short_right]:
    longer, shorter, lead = long_wrong, short_right, "A long wrong answer against a short right one"
else:  # no such pair in this group: the length bias is the same between any two answers of different lengths
    longer, shorter = max(range(group.size), key=lambda i: lengths[i]), min(range(group.size), key=lambda i: lengths[i])
    lead = "No wrong answer here is longer than a right one; the longest answer against the shortest"
if lengths[longer] > lengths[shorter]:
    n_long, n_short = lengths[longer], lengths[shorter]
    st.markdown(escape_markdown(
        f"{lead}: answer {longer + 1} ({n_long} tokens, A = {fmt_signed(chosen_advantages[longer])}) and answer "
        f"{shorter + 1} ({n_short} tokens, A = {fmt_signed(chosen_advantages[shorter])}). Under grpo a token weighs "
        f"1 / (G · n): {fmt_prob(weight[GRPO][longer])} in the longer, {fmt_prob(weight[GRPO][shorter])} in the "
        "shorter, so each answer counts as much in total whatever its length, and the longer answer's tokens are each "
        f"pushed less. Under dapo every token weighs {fmt_prob(weight[DAPO][0])}: the longer answer's {n_long} "
        f"tokens weigh {fmt_prob(n_long * weight[DAPO][0])} in all, the shorter one's "
        f"{fmt_prob(n_short * weight[DAPO][0])}."))
else:
    st.caption("Every answer of this group has the same number of tokens, so every loss type weighs every token "
               "alike: try another seed, a larger group or a higher token limit to see them differ.")

st.subheader(f"5. One step at lr = {lr:g}, and the ratios again")
st.markdown(
    f"One step of {term('SGD', 'SGD')} at the {term('learning rate', 'learning rate')} lr = {lr:g} on every weight "
    f"({step.weights:,} of them), down the {term('gradient', 'gradient')} of the {loss_type} loss, on a copy of the "
    f"weights: the shared model never changes. ‖g‖ = {fmt(step.grad_norm)}; {step.seconds:.1f} s. Then the same "
    "answers are scored by the stepped copy; π_old and the reference stay the model that sampled them.")
loss_before, loss_after = before.losses[loss_type].loss, after.losses[loss_type].loss
st.markdown(escape_markdown(
    f"Now the ratios have moved away from 1: {after.clipped_count} of {after.token_count} tokens are clipped (the "
    f"clip fraction, {fmt(after.clip_fraction)}), the mean KL to the reference is {fmt(after.mean_kl)}, and the "
    f"{loss_type} loss went {fmt(loss_before)} → {fmt(loss_after)}. "
    + ("Each ratio is the answer's own, e to the mean of its tokens' log-ratios (sequence level)."
       if level == SEQUENCE else "Each token has its own ratio (token level).")))
key_table(token_table(after, group, shown, after=True), "grpo-tokens-after.csv", hide_index=True)
key_table(pd.DataFrame({
    "answer": [answer_label(i, r) for i, r in enumerate(scores)],
    "A": [fmt_signed(a) for a in chosen_advantages],
    "Σ log π before": [fmt(v) for v in step.answer_logps_before],
    "after": [fmt(v) for v in step.answer_logps_after],
    "p(answer) before": [fmt_prob(math.exp(v)) for v in step.answer_logps_before],
    "after ": [fmt_prob(math.exp(v)) for v in step.answer_logps_after],
}), "grpo-answers-after.csv", hide_index=True)
st.caption(escape_markdown(
    f"p(answer) = e^(Σ log π): the probability of drawing exactly that answer again at temperature "
    f"{group.temperature:g}. A positive advantage raises it, a negative one lowers it; an answer whose advantage is "
    "0 moves only through the weights it shares with the others."))

st.subheader("6. The reward model, and DPO as one")
st.markdown(
    "Where no rule can check an answer, a reward model scores it: a network trained on pairs of answers of which "
    f"people preferred one, by the {term('Bradley–Terry', 'Bradley–Terry')} loss −log {term('σ', 'sigmoid')}"
    "(r_chosen − r_rejected), σ the sigmoid.")
chosen_box, rejected_box = st.columns(2)
r_chosen = url_state.linked(url_state.number("grpo_r_chosen", 2.0, -20.0, 20.0), chosen_box.number_input,
                            "Its score of the chosen answer", -20.0, 20.0, step=0.5)
r_rejected = url_state.linked(url_state.number("grpo_r_rejected", 0.5, -20.0, 20.0), rejected_box.number_input,
                              "Its score of the rejected answer", -20.0, 20.0, step=0.5)
preference = bradley_terry(r_chosen, r_rejected)
st.markdown(escape_markdown(
    f"−log σ({fmt(r_chosen)} − {fmt(r_rejected)}) = −log σ({fmt(preference.margin)}) = {fmt(preference.loss)}: the "
    f"model says the chosen answer is preferred with probability σ = {fmt(preference.probability)}."))

user, chosen, rejected, system, raised = st.session_state.get(
    CHAT_PAIR, (chat_loss.DEFAULT_QUESTION, chat_loss.DEFAULT_CHOSEN, chat_loss.DEFAULT_REJECTED, None, 1.0))
try:
    scorer, pair = scored_with_cpu_fallback(scorer, lambda s: get_pair(s, s.cache_key, user, chosen, rejected, system))
except (NothingToScore, ChatTemplateError, BadInput, NotEnoughMemory) as problem:
    show_problem(problem)
else:
    dpo_beta = chat_loss.DEFAULT_BETA
    logp_chosen, logp_rejected = pair.chosen.sum_logp, pair.rejected.sum_logp
    as_bt = dpo_as_bradley_terry(logp_chosen + raised, logp_rejected, logp_chosen, logp_rejected, dpo_beta)
    dpo = dpo_loss(logp_chosen + raised, logp_rejected, logp_chosen, logp_rejected, dpo_beta)
    st.markdown(escape_markdown(
        f"DPO has no reward model: its reward of an answer is β · (log π − log π_ref), how much training has raised "
        f"the answer's log-probability. On the Chat page's pair (“{user}”: “{chosen}” chosen, “{rejected}” rejected; "
        f"Σ log π_ref {fmt(logp_chosen)} and {fmt(logp_rejected)}), with its β = {dpo_beta:g} and the chosen "
        f"answer's log π raised by {fmt(raised, 1)}: r_chosen = {dpo_beta:g} · {fmt(raised, 1)} = "
        f"{fmt(as_bt.reward_chosen)}, r_rejected = {fmt(as_bt.reward_rejected)}, and the Bradley–Terry loss "
        f"−log σ({fmt(as_bt.margin)}) = {fmt(as_bt.loss)}. The Chat page's DPO loss of the same numbers is "
        f"{fmt(dpo.loss)} (difference {fmt_gap(abs(as_bt.loss - dpo.loss))}): the same loss."))
    st.caption("The pair and the amount raised are the Chat page's, once it has been opened in this session; "
               "before that, its defaults.")
link_to_lesson("chat-loss", "Chat fine-tuning loss, section 5: DPO")

show_code(advantages, clip_terms, aggregate, grpo_step, dpo_as_bradley_terry)
check_yourself("grpo", build_questions(adv, step, preference))
