import html
import math

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.byte_pieces import explain_byte_pieces
from lmviz.app.choosers import (
    choose_causal_lm,
    scored_with_cpu_fallback,
    stop_without_chat_template,
)
from lmviz.app.chrome import intro, key_table, numbers_hidden, result_or_stop, term
from lmviz.app.path import CHAT_PAIR, check_yourself, link_to_lesson
from lmviz.app.problems import show_problem
from lmviz.app.steps import step_status
from lmviz.app.training import cached_group, cached_grpo_step, group_key
from lmviz.app.widgets import metric_row, result_panel, show_code
from lmviz.core.numbers import fmt, fmt_gap, fmt_grad, fmt_norm, fmt_prob, fmt_signed
from lmviz.core.text import escape_markdown
from lmviz.core.trl import CISPO, CISPO_EPSILON_MAX, DAPO_EPSILON_HIGH, TRL
from lmviz.course.questions.grpo import SPLIT_GENERATION, build_questions, reward_text
from lmviz.errors import BadInput, ChatTemplateError, NotEnoughMemory, NothingToScore
from lmviz.figures.chips import chip_row, stacked_chip
from lmviz.figures.palettes import BLUISH_GREEN, LIGHT_GREY
from lmviz.lessons import chat_loss
from lmviz.lessons.chat_loss import compare_answers, dpo_loss
from lmviz.lessons.grpo import (
    DAPO,
    DEFAULT_BETA,
    DEFAULT_EPSILON,
    DEFAULT_GROUP,
    DEFAULT_LIMIT,
    DEFAULT_NUMBER,
    DEFAULT_PROMPT,
    DEFAULT_RATE,
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    DEFAULT_UPDATES,
    DR_GRPO,
    GRPO,
    GSPO_EPSILON_HIGH,
    GSPO_EPSILON_LOW,
    LOSS_TYPE_SOURCES,
    LOSS_TYPES,
    LUSPO,
    MAX_GROUP,
    MAX_NEW_TOKENS,
    MAX_UPDATES,
    MEAN,
    MIN_GROUP,
    POPULATION_STD,
    SAMPLE_STD,
    SCALINGS,
    SEQUENCE,
    TOKEN,
    TRL_OTHER_LOSS_TYPES,
    TRL_STD_EPS,
    advantages,
    aggregate,
    answer_ratios,
    at_most_tokens,
    bradley_terry,
    cispo,
    clip_higher,
    clip_terms,
    contains_number,
    contains_word,
    dpo_as_bradley_terry,
    grpo_step,
    leave_one_out,
    moved_against_advantage,
    overlong_shaped,
    rewards,
)
from lmviz.lessons.next_token import MAX_TEMPERATURE, MIN_TEMPERATURE
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 500
RULE_CHARS = 40  # a number, a word or a count
# The rules a learner picks from: the words of the radio, the box's label and its default, the rule it builds
RULES = {
    "contains the number": ("The number", DEFAULT_NUMBER, contains_number),
    "contains the word": ("The word", "twelve", contains_word),
    "is at most N tokens long": ("N, the most tokens", "6", at_most_tokens),
}
# short: the advantages table must fit 1280 px; section 2's sentence names TRL's scale_rewards for each
RLOO_WORDS = "RLOO: R − mean of the others"
SCALING_WORDS = {MEAN: "R − mean (Dr. GRPO)", POPULATION_STD: "÷ population std", SAMPLE_STD: "÷ sample std (TRL)"}
# A log scale. On the default group (seed 0, 8 answers, 12 tokens) 3e-4 moves the two rewarded answers' log π up by
# 0.43 and 0.18 and clips no token; 1e-3 clips 4 of its 95 tokens
RATES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
MIN_EPSILON = 1e-4  # low enough for GSPO's 3e-4
# The paper whose CISPO TRL computes: GRPOConfig's help for epsilon_high cites it for loss_type "cispo"
SCALERL = "ScaleRL (arXiv 2510.13786)"
OVERLONG_CACHE = 4  # a third of the default 12-token limit, so that the default group shows the penalty's slope
RIGHT, WRONG = "✓", "✗"
# An answer's one ratio, as TRL's RLOOTrainer._compute_loss takes it (exp of logps − old_logps, each summed over the
# answer's tokens) and as its GRPOTrainer does with importance_sampling_level="sequence" (exp of their mean)
RLOO_RATIO = ("π_θ(answer) / π_old(answer) = e^(Σ log π_θ − Σ log π_old), the product of its tokens' ratios "
              "(RLOOTrainer's)")
GSPO_RATIO = "e^(the mean of its tokens' log π_θ − log π_old), the geometric mean of its tokens' ratios"


@st.cache_data(show_spinner=False, max_entries=32)
def get_pair(_scorer: CausalScorer, model_key: tuple, user: str, chosen: str, rejected: str, system: str | None):
    return _scorer.run(lambda loaded: compare_answers(loaded, user, chosen, rejected, system),
                       user, chosen, rejected, system)


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


def token_table(loss, group, i: int) -> pd.DataFrame:
    """One answer's terms (lmviz.lessons.grpo.TokenTerms), token by token, with each token's gradient."""
    rows = loss.tokens[i]
    return pd.DataFrame({
        "token": group.answers[i].tokens,
        # log π_old is under each token in section 1; with it the table would not fit 1280 px
        "log π_θ": [fmt(t.logp_new) for t in rows],
        "r": [fmt(t.ratio) for t in rows],
        "r·A": [fmt(t.unclipped) for t in rows],
        "clip(r)·A": [fmt(t.clipped) for t in rows],
        "min takes": ["clip(r)·A" if t.takes_clipped else "r·A" for t in rows],
        "β·KL": [fmt(t.weighted_kl) for t in rows],
        # the token's loss, −min(...) + β·KL, is left out: with the two gradients it would not fit 1280 px
        "∂ clip": [fmt_grad(t.surrogate_gradient) for t in rows],
        "∂ KL": [fmt_grad(t.kl_gradient) for t in rows],
    })


def clip_count(loss) -> str:
    """'3 of 95 tokens' or, at sequence level, where TRL counts each answer's one ratio once, '1 of 8 answers'."""
    return f"{loss.clipped_count} of {loss.clip_total} {loss.clip_unit}s"


def show_overlong_penalty(group, scores: list[float], cache: int) -> None:
    """DAPO's eq. 13 on this group: each answer's penalty, its reward with it, and the advantages that gives."""
    limit = group.max_new_tokens
    try:
        shaped = overlong_shaped(group, scores, cache)
    except BadInput:
        st.info(escape_markdown(f"L_cache must be at most the limit of {limit} tokens (Most new tokens above); "
                                f"got {cache}."), icon=":material/info:")
        return
    lengths, start = shaped.lengths, limit - cache
    slope = (f"then (L_max − L_cache − |y|) / L_cache, falling to −1 at L_max = {limit}, the page's token limit, so "
             "an answer cut there gets −1" if cache else
             f"and with L_cache = 0 no slope: −1 only past L_max = {limit}, the page's token limit, which no answer "
             "here can pass")
    st.markdown(escape_markdown(
        f"DAPO (Yu et al. 2025, eq. 13) adds a penalty to the reward of a long answer: 0 up to L_max − L_cache = "
        f"{limit} − {cache} = {start} tokens, {slope} (its tokens counted as TRL does, the end token included). "
        + (f"Answer {lengths.index(max(lengths)) + 1}, {max(lengths)} tokens: ({start} − {max(lengths)}) / {cache} = "
           f"{fmt_signed(min(shaped.penalties))}. " if cache and max(lengths) > start else "")
        + "The step below uses the rewards without it."))
    key_table(pd.DataFrame({
        "answer": [answer_label(i, r) for i, r in enumerate(scores)],
        "tokens": lengths,
        "penalty": [fmt_signed(q) for q in shaped.penalties],
        "R + penalty": [fmt_signed(r) for r in shaped.rewards],
        SCALING_WORDS[SAMPLE_STD]: [fmt_signed(a) for a in shaped.advantages.advantages],
    }), "grpo-overlong.csv", hide_index=True)


def with_term(text: str, word: str, entry: str) -> str:
    """Plain ``text`` escaped, its first ``word`` linked to the glossary entry."""
    return escape_markdown(text).replace(escape_markdown(word), term(word, entry), 1)


def clip_higher_sentence(loss) -> str:
    """What clip-higher changes at this update: the tokens ε high releases, or those DAPO's 0.28 would."""
    unit, low, high = loss.clip_unit, loss.epsilon_low, loss.epsilon_high
    if high < low:
        return with_term(
            f"Here ε high = {high:g} is below ε = {low:g}: a rewarded {unit} is clipped at r > {1 + high:g}, sooner "
            f"than a symmetric clip would. DAPO's clip-higher goes the other way: ε high = {DAPO_EPSILON_HIGH:g} "
            "above ε = 0.2.", "clip-higher", "clip-higher")
    found = clip_higher(loss)
    if found is None:  # symmetric, and already above DAPO's ε high
        return with_term(
            f"Here ε high = ε = {low:g}, already above DAPO's clip-higher ε high of {DAPO_EPSILON_HIGH:g}: a rewarded "
            f"{unit} may rise to r = {1 + low:g} before the clip holds it.", "clip-higher", "clip-higher")
    would, released = not found.own, found.released
    if would:
        lead = (f"Here ε high = ε: the clip is symmetric. DAPO's clip-higher, ε high = {found.epsilon_high:g}, lets a "
                f"rewarded {unit} rise to r = {1 + found.epsilon_high:g} before the clip holds it.")
    else:
        lead = (f"DAPO's clip-higher: with ε high = {high:g} above ε = {low:g}, a rewarded {unit} is clipped only once "
                f"r > {1 + high:g}, not {1 + low:g}.")
    if loss.level == SEQUENCE:
        answers = sorted({t.answer for t in released})
        count = len(answers)
        which = ("answers " if count > 1 else "answer ") + ", ".join(str(a + 1) for a in answers)
    else:
        count = len(released)
        which = ", ".join(f"“{group.answers[t.answer].tokens[t.position]}” (answer {t.answer + 1}, r = {fmt(t.ratio)})"
                          for t in released[:3]) + (" …" if count > 3 else "")
    release, keep = ("would release", "would keep") if would else ("releases", "keep" if count > 1 else "keeps")
    if not count:
        return with_term(f"{lead} At update 2 it {release} no {unit}: no rewarded {unit}'s ratio lies between the "
                         "two bounds.", "clip-higher", "clip-higher")
    them, their = (f"{count} {unit}s", "their") if count > 1 else (f"1 {unit}", "its")
    return with_term(f"{lead} At update 2 it {release} {them} that the symmetric clip holds, which {keep} "
                     f"{their} gradient: {which}.", "clip-higher", "clip-higher")


def show_cispo(loss, shown: int) -> None:
    """TRL's loss_type "cispo" on this update's tokens beside PPO's clipped term, both averaged as dapo."""
    result = cispo(loss)
    held = sum(t.takes_clipped for answer in loss.tokens for t in answer)
    st.markdown(with_term(
        f"TRL's loss type {CISPO}, CISPO (MiniMax-M1, 2025), drops the min and the clip: each token's term is "
        f"−sg(min(r, ε_max))·A·log π_θ, where sg stops the gradient, so every token keeps a gradient of "
        f"−min(r, ε_max)·A ÷ the group's {loss.token_count} tokens. ε_max = {CISPO_EPSILON_MAX:g} is TRL's "
        f"epsilon_high under {CISPO}, the value its docs recommend: a cap on r itself, not on r − 1. That one-sided "
        f"cap is the form of {SCALERL}, the paper TRL's help for epsilon_high cites, and the one computed here; "
        "MiniMax-M1's paper writes the weight clipped on both sides, clip(r, 1 − ε_low, 1 + ε_high). At update 2 "
        f"PPO's clip holds {held} of the {loss.token_count} tokens, whose gradient is 0; CISPO "
        f"pushes {result.kept_by_cispo} of them, and caps {result.capped} (r > "
        f"{CISPO_EPSILON_MAX:g} with A > 0). Where neither acts, the two gradients are the same number. The answer "
        "chosen in section 3:", "CISPO", "CISPO"))
    key_table(pd.DataFrame({
        "token": group.answers[shown].tokens,
        "r": [fmt(c.ratio) for c in result.tokens[shown]],
        "A": [fmt_signed(c.advantage) for c in result.tokens[shown]],
        "PPO's clip": ["holds" if c.ppo_clipped else "—" for c in result.tokens[shown]],
        "∂ PPO (dapo)": [fmt_grad(c.ppo_gradient) for c in result.tokens[shown]],
        "∂ CISPO": [fmt_grad(c.gradient) for c in result.tokens[shown]],
    }), "grpo-cispo-update-2.csv", hide_index=True)


intro(
    f"A chat model can also be fine-tuned from a {term('reward', 'reward')}, a score for a whole answer, without any "
    f"answer written for it. {term('GRPO', 'GRPO')} samples a group of answers to one prompt, scores each with a "
    f"rule, and gives each answer an {term('advantage', 'advantage')}: how much better it did than its group. Every "
    f"{term('token', 'token')} of an answer then gets {term('PPO', 'PPO')}'s term: its advantage times the "
    f"{term('ratio', 'ratio')} of its probability under the {term('policy', 'policy')} being trained, π_θ, to its "
    f"probability under the policy that {term('sampled', 'sampling')} it, π_old, {term('clipped', 'clip')}; plus a "
    f"penalty, {term('β', 'β (beta)')} times the {term('KL', 'KL divergence')}, for moving away from a "
    f"{term('reference model', 'reference model')}. Here is all of it on a group the model on "
    "this page samples: the advantages three ways, the loss token by token and averaged the ways TRL offers, a few "
    "updates of training on the same group, where the clip and the KL start to act, and last the "
    f"{term('reward model', 'reward model')}'s loss, which {term('DPO', 'DPO')} turns out to be.")

scorer = choose_causal_lm()
stop_without_chat_template(scorer, "it cannot be asked a question as a chat model is")
panel = result_panel()
url_state.reset_button()
prompt = url_state.linked(url_state.text("grpo_prompt", DEFAULT_PROMPT, MAX_CHARS), st.text_input,
                          "Prompt: a question whose answer a rule can check", max_chars=MAX_CHARS)
size_box, seed_box, temperature_box, limit_box = st.columns(4)
size = url_state.linked(url_state.number("grpo_group", DEFAULT_GROUP, MIN_GROUP, MAX_GROUP), size_box.slider,
                        "Answers in the group, G", MIN_GROUP, MAX_GROUP)
seed = url_state.linked(url_state.number("grpo_seed", DEFAULT_SEED, 0, 2**31 - 1), seed_box.number_input, "Seed", 0,
                        2**31 - 1, help="The same seed draws the same group, for every visitor.")
temperature = url_state.linked(
    url_state.number("grpo_temperature", DEFAULT_TEMPERATURE, MIN_TEMPERATURE, MAX_TEMPERATURE),
    temperature_box.number_input, "Temperature", MIN_TEMPERATURE, MAX_TEMPERATURE, step=0.1)
limit = url_state.linked(url_state.number("grpo_limit", DEFAULT_LIMIT, 1, MAX_NEW_TOKENS), limit_box.number_input,
                         "Most new tokens", 1, MAX_NEW_TOKENS,
                         help="Each new token is one more pass of the whole group through the model.")
rule_box, value_box = st.columns([2, 1])
rule_name = url_state.linked(url_state.choice("grpo_rule", next(iter(RULES)), list(RULES)), rule_box.radio,
                             "Reward: 1 if the answer…, else 0", list(RULES), horizontal=True)
label, default, make_rule = RULES[rule_name]
value = url_state.linked(url_state.text(f"grpo_rule_{list(RULES).index(rule_name)}", default, RULE_CHARS),
                         value_box.text_input, label, max_chars=RULE_CHARS)

def sampled_group():
    """The reward rule, and the group sampled with the scorer that sampled it."""
    rule = make_rule(value)
    with panel, step_status(f"Sampling {size} answers, one token at a time…") as report:
        return rule, *scored_with_cpu_fallback(scorer, lambda s: cached_group(
            s, s.cache_key, prompt, int(size), int(seed), float(temperature), int(limit), report))


rule, scorer, group = result_or_stop(  # in the pinned panel: on screen with the boxes
    sampled_group, (NothingToScore, ChatTemplateError, BadInput), "Try a smaller group or fewer tokens.", panel)
settings_key = group_key(prompt, size, seed, temperature, limit)
scores = rewards(group, rule)
scaled = {how: advantages(scores, how) for how in SCALINGS}
adv = scaled[SAMPLE_STD]
with panel:  # the group's count at once; the step's numbers beside it once the step is taken (seconds more)
    # metric_row, not st.columns(4): a quarter of the 818 px beside the open sidebar cut "4 of 95 tokens"
    row = metric_row()
    right, clipped, up, down = (row.empty() for _ in range(4))
    right.metric("Rewarded answers", f"{sum(r > 0 for r in scores)} of {group.size}", width="content")
    # in the pinned panel (issue 49): the rule stays as set when the prompt changes, so the panel says which one
    # scored, and a group it cannot tell apart is said where the prompt and the rule are, not two screens below
    default_rule = rule_name == next(iter(RULES)) and value == DEFAULT_NUMBER
    st.caption(escape_markdown(
        f"Scored by the rule {rule.name}: {rule.description}. The rule is the Reward control's below, and it does "
        "not follow the prompt" + (": this is the default question's rule; set the one your prompt needs."
                                   if default_rule and prompt != DEFAULT_PROMPT else ".")))
    if adv.teaches_nothing:
        st.info(escape_markdown(
            f"Every answer has the reward {reward_text(scores[0])}"
            + (". " if numbers_hidden() else ": every R − mean is 0, so every advantage is 0 and so is the gradient "
               "of the clipped terms. ")
            + "This group teaches nothing; try another seed, a larger group, a higher temperature or another rule."),
            icon=":material/info:")
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
st.markdown(escape_markdown(f"The rule, {rule.name}: {rule.description}."))
with st.expander("The rule as the Python function it is"):  # folded: a class reads the rule's sentence
    st.code(rule.source, language="python")

st.subheader("2. Advantages: each answer against its group")
total = " + ".join(reward_text(r) for r in scores)
squares = math.fsum(adv.squares)
st.markdown(escape_markdown(
    f"mean = ({total}) / {adv.count} = {fmt(adv.mean)}. Each advantage starts from R − mean; Σ (R − mean)² = "
    f"{fmt(squares)}, so the population ") + term("standard deviation", "standard deviation") + escape_markdown(
    f" is √({fmt(squares)} / {adv.count}) = "
    f"{fmt(scaled[POPULATION_STD].std)} and the sample one (÷ G − 1, as torch.std and TRL) √({fmt(squares)} / "
    f"{adv.count - 1}) = {fmt(adv.std)}. DeepSeekMath's paper divides by \"std\" without saying which. TRL always "
    f"subtracts the group's mean, and by default (scale_rewards=\"{TRL.scale_rewards}\") divides by the group's "
    f"sample std + {TRL_STD_EPS:g}; scale_rewards=\"batch\" divides by the sample std of every reward of the batch, "
    f"all its groups together, + {TRL_STD_EPS:g}, and \"none\" by nothing: R − mean alone."))
key_table(pd.DataFrame({
    "answer": [answer_label(i, r) for i, r in enumerate(scores)],
    SCALING_WORDS[MEAN]: [fmt_signed(a) for a in scaled[MEAN].advantages],
    SCALING_WORDS[POPULATION_STD]: [fmt_signed(a) for a in scaled[POPULATION_STD].advantages],
    SCALING_WORDS[SAMPLE_STD]: [fmt_signed(a) for a in adv.advantages],
    RLOO_WORDS: [fmt_signed(a) for a in leave_one_out(scores)],
}), "grpo-advantages.csv", hide_index=True)
others = (adv.total - scores[0]) / (adv.count - 1)
st.caption(term("RLOO", "RLOO") + escape_markdown(
    f" (the column “{RLOO_WORDS}”), TRL's RLOOTrainer's advantage: each answer against the mean of the other "
    f"{adv.count - 1}, with no standard deviation (RLOOConfig's normalize_advantages, False by default, would "
    f"standardise them over the batch). Answer 1: {reward_text(scores[0])} − {fmt(others)} = "
    f"{fmt_signed(leave_one_out(scores)[0])}, which is {adv.count}/{adv.count - 1} × (R − mean) = "
    f"{adv.count}/{adv.count - 1} × {fmt_signed(adv.deviations[0])}. RLOO also puts its KL penalty into the "
    f"reward, and gives each answer one ratio, the whole answer's: {RLOO_RATIO}. That is not GSPO's, which section "
    f"3's toggle One ratio per answer takes: {GSPO_RATIO}. Section 5 gives both at update 2. The step below uses "
    "GRPO's terms."))
if not adv.teaches_nothing:  # the pinned panel says that this group teaches nothing
    trl = advantages(scores, SAMPLE_STD, TRL_STD_EPS)
    st.caption(escape_markdown(
        f"TRL adds {TRL_STD_EPS:g} to the std before dividing, so that a group of equal rewards does not divide 0 by "
        f"0: there answer 1's advantage is {fmt(trl.deviations[0])} / ({fmt(adv.std)} + {TRL_STD_EPS:g}) = "
        f"{fmt_signed(trl.advantages[0])}, against {fmt_signed(adv.advantages[0])} here."))
# folded: DAPO's reward shaping for long answers, shown on this group's lengths; the step uses the rewards above
with st.expander("DAPO's soft overlong penalty: a reward for length (a table)"):
    cache = url_state.linked(url_state.number("grpo_overlong_cache", min(OVERLONG_CACHE, group.max_new_tokens), 0,
                                              MAX_NEW_TOKENS),
                             st.number_input, "L_cache: tokens before the limit where the penalty starts", 0,
                             MAX_NEW_TOKENS, help="DAPO's paper used 4,096 of 20,480; TRL's "
                                                  "get_soft_overlong_punishment takes it as soft_punish_cache.")
    show_overlong_penalty(group, scores, int(cache))
how = url_state.linked(url_state.choice("grpo_scale", SAMPLE_STD, SCALINGS), st.radio,
                       "The advantages the step uses", SCALINGS, format_func=SCALING_WORDS.get, horizontal=True)
chosen_advantages = tuple(scaled[how].advantages)

st.subheader("3. The loss, token by token, at the first update")
# TRL's GRPOConfig defaults, as the controls below name them (lmviz.core.trl); the rate is not among them: see below
TRL_PRESET = {"grpo_loss_type": TRL.loss_type, "grpo_beta": TRL.beta, "grpo_epsilon": TRL.epsilon,
              "grpo_epsilon_high": TRL.epsilon if TRL.epsilon_high is None else TRL.epsilon_high,
              "grpo_sequence": TRL.importance_sampling_level == SEQUENCE,
              "grpo_kl_ratio": TRL.use_bias_correction_kl, "grpo_updates": TRL.num_iterations, "grpo_scale": SAMPLE_STD}


def use_trl_defaults() -> None:
    st.session_state.update(TRL_PRESET)


st.button(f"TRL's defaults (TRL {TRL.version})", on_click=use_trl_defaults, icon=":material/tune:",
          help=escape_markdown(
              f"Sets the controls below to GRPOConfig's defaults in TRL {TRL.version}: loss type {TRL.loss_type}, "
              f"β = {TRL.beta:g}, ε = ε high = {TRL.epsilon:g}, one ratio per token, KL × ratio, μ = "
              f"{TRL.num_iterations}, and section 2's advantages ÷ the sample std. Not the learning rate: TRL's "
              f"{TRL.learning_rate:g} is for AdamW (section 5 says why)."))
rate_box, type_box, updates_box = st.columns([2, 2, 1])
lr = url_state.linked(url_state.choice("grpo_lr", DEFAULT_RATE, RATES), rate_box.select_slider, "Learning rate", RATES,
                      format_func=lambda r: f"{r:g}", help="Each update of section 5: w ← w − lr · g on every weight.")
loss_type = url_state.linked(url_state.choice("grpo_loss_type", TRL.loss_type, LOSS_TYPES), type_box.selectbox,
                             "Loss type (TRL's loss_type)", LOSS_TYPES,
                             format_func=lambda kind: f"{kind} (TRL's default)" if kind == TRL.loss_type else kind,
                             help="How the per-token terms are averaged: section 4.")
updates = url_state.linked(url_state.number("grpo_updates", DEFAULT_UPDATES, 1, MAX_UPDATES), updates_box.number_input,
                           "Updates μ", 1, MAX_UPDATES,
                           help=f"Updates on the same group (TRL's num_iterations, {TRL.num_iterations} by default): "
                                "the clip and the KL act from the second on. Section 5.")
# the two toggles stacked in one wide column: five columns cut their labels in presentation mode
epsilon_box, high_box, beta_box, toggles_box = st.columns([1, 1, 1, 2])
level_box = kl_box = toggles_box
epsilon = url_state.linked(url_state.number("grpo_epsilon", DEFAULT_EPSILON, MIN_EPSILON, 0.9),
                           epsilon_box.number_input, "Clip ε", MIN_EPSILON, 0.9, step=0.05, format="%g",
                           help="TRL's epsilon: the ratio is clipped to [1 − ε, 1 + ε high].")
epsilon_high = url_state.linked(url_state.number("grpo_epsilon_high", DEFAULT_EPSILON, MIN_EPSILON, 0.9),
                                high_box.number_input, "Clip ε high", MIN_EPSILON, 0.9, step=0.04, format="%g",
                                help=f"TRL's epsilon_high, ε unless set. DAPO's clip-higher: {DAPO_EPSILON_HIGH:g} "
                                     "above ε = 0.2, so that rewarded tokens can rise further. Section 5.")
beta = url_state.linked(url_state.number("grpo_beta", DEFAULT_BETA, 0.0, 1.0), beta_box.number_input, "KL weight β",
                        0.0, 1.0, step=0.01, format="%.3f",
                        help=f"DeepSeekMath's is {DEFAULT_BETA:g}; TRL's default is {TRL.beta:g}, no KL term at all.")
sequence_level = url_state.linked(url_state.flag("grpo_sequence"), level_box.toggle,
                                  "One ratio per answer (GSPO)",
                                  help="TRL's importance_sampling_level=\"sequence\"; off: \"token\", its default.")
kl_bias_correction = url_state.linked(url_state.flag("grpo_kl_ratio", TRL.use_bias_correction_kl), kl_box.toggle,
                                      "KL × ratio (TRL's default)",
                                      help="TRL's use_bias_correction_kl: k3 times the ratio π_θ / π_old. Off: "
                                           "DeepSeekMath's plain k3.")
level = SEQUENCE if sequence_level else TOKEN
def stepped():
    """The scorer and the step's records: the updates on a copy of the weights, their progress in the panel."""
    with panel, step_status(f"{updates} update{'s' if updates > 1 else ''} on a copy of the weights…",
                            "grpo") as report:
        return scored_with_cpu_fallback(scorer, lambda s: cached_grpo_step(
            s, s.cache_key, group, settings_key, chosen_advantages, float(lr), loss_type, level, float(epsilon),
            float(epsilon_high), float(beta), int(updates), bool(kl_bias_correction), report))


scorer, step = result_or_stop(stepped, (BadInput,), "Try a smaller group, fewer tokens or fewer updates.", panel)
before, after = step.before, step.after
second = step.updates[1].start if len(step.updates) > 1 else None
rewarded = [i for i, r in enumerate(scores) if r > 0]
others = [i for i, r in enumerate(scores) if r <= 0]


def mean_change(indices: list[int]) -> float:
    return math.fsum(step.answer_logps_after[i] - step.answer_logps_before[i] for i in indices) / len(indices)


if second is not None:
    clipped.metric("Clipped at update 2", clip_count(second),
                   help="Where the min takes clip(r)·A at the second update on the group, whose clipped term then "
                        "has no gradient. At the first: none.", width="content")
else:
    clipped.metric("Clipped after the update", clip_count(after),
                   help="Where the min would take clip(r)·A if the group were used once more.", width="content")
if rewarded:
    up.metric("log π change, rewarded", fmt_signed(mean_change(rewarded)),
              help="Σ log π over the answer's tokens, after the last update minus before, averaged over the "
                   "rewarded answers.", width="content")
if others:
    down.metric("log π change, others", fmt_signed(mean_change(others)),
                help="The same over the answers without a reward.", width="content")

st.markdown(escape_markdown(
    "Which control changes which update: here the first update on the group starts from π_θ = π_old = π_ref, so "
    "every ratio π_θ / π_old is exactly 1, and the KL is 0 with a ")
    + term("gradient", "gradient") + escape_markdown(" of 0. Only the ")
    + term("learning rate", "learning rate") + escape_markdown(
    ", the loss type and the advantages shape it; ε, β, one ratio per answer and the KL's weighting change nothing "
    f"there (‖g‖ = {fmt_norm(step.updates[0].grad_norm)} whatever they are). From the second update on (μ ≥ 2) "
    "every control acts: section 5."))
# folded (issue 39: the page was 11.7 screens): the sentences around it say what the table shows, every ratio 1
with st.expander("Each token's term, and one answer's tokens at the first update (a table)"):
    shown = st.selectbox("Answer shown token by token (here and at update 2, section 5)", range(group.size),
                         format_func=lambda i: answer_label(i, scores[i]), key="grpo_answer")
    st.markdown(escape_markdown(
        f"Each token's term is −min(r·A, clip(r, 1 − ε, 1 + ε high)·A) + β·KL, with r = π_θ / π_old = "
        f"e^(log π_θ − log π_old), A its answer's advantage ({fmt_signed(chosen_advantages[shown])} for this answer) "
        f"and ε = {fmt(epsilon, 4)}, ε high = {fmt(epsilon_high, 4)}. π_old is the policy that sampled the group; π_θ "
        "the one being trained; the "
        f"reference π_ref the model before training, here the shared {loaded.name}. The last two columns, ∂ clip and "
        f"∂ KL, are the {loss_type} loss's gradient with respect to the token's log π_θ, from the clipped term and "
        "from the KL term: a negative one raises the token."))
    key_table(token_table(before, group, shown), "grpo-tokens-update-1.csv", hide_index=True)
st.markdown(escape_markdown(
    "At the first update π_θ is π_old: the same weights, so every log π_θ − log π_old is 0 and every ratio is exactly "
    f"1. Then r·A = clip(r)·A = A, nothing is clipped ({clip_count(before)}), and the KL to "
    "the reference is 0: here the reference is the model that sampled, the same weights again. In training π_ref "
    "stays the model training started from while π_old moves with the policy, so the first update on a later group "
    f"starts with a KL above 0. With TRL's defaults (num_iterations = {TRL.num_iterations}, one ")
    + term('optimizer step', 'optimizer step') + escape_markdown(
    " per generation) every update is the first on its samples, so the clip fraction TRL logs is 0 at every step. "
    "The ratio leaves 1, and the clip can act, once the weights have taken an optimizer step since the answers were "
    "sampled: num_iterations above 1 (μ here), or one generation split over several optimizer steps. "
    + SPLIT_GENERATION))
if abs(before.losses[loss_type].loss) < 1e-9 and step.grad_norm > 0:
    st.markdown(escape_markdown(
        f"The {loss_type} loss is 0 here, yet its gradient is not (‖g‖ = {fmt_norm(step.grad_norm)}): at r = 1 the "
        "loss is the weighted sum of −A, which the advantages cancel, but each token's slope −A·r·(its weight) does "
        "not vanish (trl#3452: a logged GRPO loss of 0 does not mean nothing is learnt)."))

st.subheader("4. One loss for the group: the ways to average the tokens")
weight = {kind: before.losses[kind].token_weights for kind in LOSS_TYPES}
# folded: the sentence under it sets two answers' weights side by side, the length bias a class is shown
with st.expander("Each loss type: one token's weight in each answer (a table), its source, its loss at the first "
                 "update"):
    st.markdown("What one token of each answer weighs in the loss, under each loss type:")
    key_table(pd.DataFrame({  # short headers: with luspo's column the table must still fit 1280 px
        "answer": [answer_label(i, r) for i, r in enumerate(scores)],
        "tokens": before.lengths,
        "A": [fmt_signed(a) for a in chosen_advantages],
        "grpo": [fmt_prob(w) for w in weight[GRPO]],
        "bnpo, dapo": [fmt_prob(w) for w in weight[DAPO]],
        "dr_grpo": [fmt_prob(w) for w in weight[DR_GRPO]],
        "luspo": [fmt_prob(w) for w in weight[LUSPO]],
    }), "grpo-token-weights.csv", hide_index=True)
    st.markdown("\n".join(f"- **{kind}**: {escape_markdown(LOSS_TYPE_SOURCES[kind])}. At the first update: "
                          f"{fmt(before.losses[kind].loss)}." for kind in LOSS_TYPES))
    st.caption(escape_markdown(
        f"TRL {TRL.version} has {len(TRL.loss_types)} loss types; its default is {TRL.loss_type}. The three not "
        "computed here change each token's term itself, not how the terms are averaged: "
        + "; ".join(f"{kind}, {words}" for kind, words in TRL_OTHER_LOSS_TYPES.items()) + "."))
    cut = sum(not answer.finished for answer in group.answers)
    if cut:
        st.caption(escape_markdown(
            f"{cut} of the {group.size} answers were cut at the limit of {group.max_new_tokens} tokens. DAPO itself "
            "also shapes the reward of such overlong answers and resamples groups whose rewards are all equal; TRL's "
            f"mask_truncated_completions (default {TRL.mask_truncated_completions}) would leave cut answers out of "
            "the loss. Here they count as any other."))
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
    n = lengths[0]
    st.caption(escape_markdown(
        f"Every answer of this group has {n} tokens, so grpo, bnpo and dapo weigh every token alike, "
        f"1 / (G · {n}) = {fmt_prob(weight[GRPO][0])}, and give the same loss; dr_grpo weighs each "
        f"1 / (G · {before.max_completion_length}) = {fmt_prob(weight[DR_GRPO][0])}, {n} / "
        f"{before.max_completion_length} of that, and luspo 1 / G = {fmt_prob(weight[LUSPO][0])}. Try another seed, "
        "a larger group or a higher token limit for answers of different lengths."))

st.subheader(f"5. {updates} update{'s' if updates > 1 else ''} on the same group at lr = {lr:g}")
st.markdown(
    f"Each update is one step of {term('SGD', 'SGD')} at the {term('learning rate', 'learning rate')} lr = {lr:g} on "
    f"every weight ({step.weights:,} of them), down the {term('gradient', 'gradient')} of the {loss_type} loss, on a "
    "copy of the weights: the shared model never changes. Each starts from the weights the one before left and "
    "scores the same answers again; π_old and the reference stay the model that sampled them. "
    f"{step.seconds:.1f} s in all.")
key_table(pd.DataFrame({
    "update": [u.number for u in step.updates],
    f"{loss_type} loss": [fmt(u.start.losses[loss_type].loss) for u in step.updates],
    "‖g‖": [fmt_norm(u.grad_norm) for u in step.updates],
    "clipped": [clip_count(u.start) for u in step.updates],
    "low": [u.start.clipped_low for u in step.updates],
    "high": [u.start.clipped_high for u in step.updates],
    "clip fraction": [fmt(u.start.clip_fraction) for u in step.updates],
    "mean KL": [fmt(u.start.mean_kl) for u in step.updates],
}), "grpo-updates.csv", hide_index=True)
st.caption("Low: r below 1 − ε with A < 0; high: r above 1 + ε high with A > 0 (TRL logs their shares as "
           "clip_ratio/low_mean and clip_ratio/high_mean). Each update's numbers are taken at the weights it starts "
           "from.")
if second is None:
    st.info(escape_markdown(
        "With one update the clip and the KL never act: raise Updates μ to 2 or more to see the ratios move, the "
        f"clip hold tokens and the KL pull back. Were the group used once more, {clip_count(after)} would be "
        f"clipped and the mean KL would be {fmt(after.mean_kl)}."), icon=":material/info:")
else:
    held = [t for t in second.tokens[shown] if t.takes_clipped]
    pulled = max(range(len(second.tokens[shown])), key=lambda t: abs(second.tokens[shown][t].kl_gradient))
    st.markdown(escape_markdown(
        f"At update 2 the ratios have moved away from 1: {clip_count(second)} are clipped (the clip fraction, "
        f"{fmt(second.clip_fraction)}), and for them the clipped term's gradient is exactly 0: the update stops "
        "pushing what has already moved far enough. The mean KL to the reference is "
        f"{fmt(second.mean_kl)} and its gradient pulls each token back towards π_ref"
        + (f" (β = {fmt(beta, 3)}: with β = 0 it would not)." if beta > 0 else ": here β = 0, so it does not.")
        + (" Each ratio is the answer's own, e to the mean of its tokens' log-ratios (sequence level): TRL counts "
           "the clipped answers." if level == SEQUENCE else " Each token has its own ratio (token level).")))
    # folded (issue 39): the sentence above says what the clip and the KL do at update 2; this is one answer's detail
    with st.expander("One answer's tokens at update 2: which the clip holds, where the KL pulls (a table)"):
        st.markdown(escape_markdown(
            f"The answer chosen in section 3, at update 2: {len(held)} of its {len(second.tokens[shown])} tokens "
            f"clipped; its strongest KL pull is on token {pulled + 1}, “{group.answers[shown].tokens[pulled]}”, "
            f"{fmt_grad(second.tokens[shown][pulled].kl_gradient)} against the clip term's "
            f"{fmt_grad(second.tokens[shown][pulled].surrogate_gradient)}."))
        key_table(token_table(second, group, shown), "grpo-tokens-update-2.csv", hide_index=True)
        one = answer_ratios(second)[shown]
        n, total = len(one.log_ratios), math.fsum(one.log_ratios)
        st.caption(escape_markdown(
            f"This answer's one ratio at update 2, two ways. Its {n} tokens' log π_θ − log π_old add up to "
            f"{fmt_signed(total)}. GSPO's, the toggle One ratio per answer: e^({fmt_signed(total)} / {n}) = "
            f"{fmt(one.gspo)}. RLOO's, π_θ(answer) / π_old(answer): e^({fmt_signed(total)}) = {fmt(one.rloo)}, "
            f"GSPO's to the power {n}."))
        if level == SEQUENCE:
            st.caption(escape_markdown(
                f"GSPO's paper clips its sequence ratio far tighter, to [1 − {GSPO_EPSILON_LOW:g}, 1 + "
                f"{GSPO_EPSILON_HIGH:g}], since a mean of log-ratios moves much less than one token's, and its loss "
                "is loss type grpo at sequence level. Try ε = 0.0003."))
    st.markdown(clip_higher_sentence(second))
    if level == TOKEN:
        # folded: the sentence above is the clip's story; CISPO is another trainer's answer to the same tokens
        with st.expander("CISPO at update 2: a capped weight on log π in place of the clip (a table)"):
            show_cispo(second, shown)
# folded: the pinned panel gives the rewarded answers' and the others' mean change of log π
with st.expander("Each answer's log π and probability before and after the updates (a table), and why real runs "
                 "take far smaller steps"):
    key_table(pd.DataFrame({
        "answer": [answer_label(i, r) for i, r in enumerate(scores)],
        "A": [fmt_signed(a) for a in chosen_advantages],
        "Σ log π before": [fmt(v) for v in step.answer_logps_before],
        f"after {updates}": [fmt(v) for v in step.answer_logps_after],
        "p(answer) before": [fmt_prob(math.exp(v)) for v in step.answer_logps_before],
        "after": [fmt_prob(math.exp(v)) for v in step.answer_logps_after],
    }), "grpo-answers-after.csv", hide_index=True)
    rms = step.grad_norm / math.sqrt(step.weights)
    against = [i + 1 for i in moved_against_advantage(step)]
    st.caption(escape_markdown(
        f"p(answer) = e^(Σ log π): the probability of drawing exactly that answer again at temperature "
        f"{group.temperature:g}. To first order, for a small enough step, a positive advantage raises it and a "
        "negative one lowers it, and an answer whose advantage is 0 moves only through the weights it shares with the "
        "others. After a finite step those shared weights can carry an answer against its advantage: here "
        + (f"answer{'s' if len(against) > 1 else ''} {', '.join(map(str, against))} moved that way. " if against else
           "none did. ") + "Real GRPO runs use ") + term('AdamW', 'AdamW')
        + escape_markdown(" at a rate near "
        f"{TRL.learning_rate:g} (TRL's default), {lr / TRL.learning_rate:,.0f} times below this page's: AdamW moves "
        "every weight whose gradient is well above its eps by about the rate itself, while an SGD step moves a weight "
        f"by lr · |g|, and here the gradient's {step.weights:,} entries have a root mean square of ‖g‖ / √n = "
        f"{fmt_gap(rms)}, so at lr = {lr:g} a typical weight moves by about {fmt_gap(lr * rms)}."))

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
