"""RL fine-tuning's check-yourself questions, from the group, its advantages, the step and the reward model's
loss on the learner's screen (lmviz.lessons.grpo). Plain Python (no torch): the page passes in what it computed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt, fmt_signed
from lmviz.core.trl import TRL
from lmviz.course.quiz import COUNT_DIGITS, Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.grpo import Advantages, BradleyTerry, GroupLoss, GrpoStep

MORE, LESS, SAME = "more", "less", "the same"
# When TRL's samples meet a policy that has moved: GRPOTrainer._generate_and_score_completions computes
# old_per_token_logps only where gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0, and
# GRPOConfig's steps_per_generation defaults to gradient_accumulation_steps
SPLIT_GENERATION = ("TRL's steps_per_generation defaults to gradient_accumulation_steps; TRL computes π_old's "
                    "log-probabilities, and the ratio can leave 1, whenever gradient_accumulation_steps is not a "
                    "multiple of steps_per_generation × num_iterations (it computes them too whenever vLLM samples "
                    "the answers, to correct for the sampler: vllm_importance_sampling_correction is True by "
                    "default).")


def reward_text(reward: float) -> str:
    """A reward as the page writes it: a whole number as one (1, 0), like the rules' own 1.0 and 0.0."""
    return fmt(reward, 0) if float(reward).is_integer() else fmt(reward)


def build_questions(sample_std: Advantages, step: GrpoStep, preference: BradleyTerry) -> list[Question]:
    questions = [_advantage_question(sample_std), _rloo_question(sample_std), _first_ratio_question(step)]
    if len(step.updates) > 1:
        questions.append(_second_update_question(step))
    return [*questions, _weights_question(step), _bradley_terry_question(preference)]



def _advantage_question(adv: Advantages) -> Question:
    # asked of the answer whose advantage is largest in size: for a group that teaches something it is not 0
    at = max(range(adv.count), key=lambda i: (abs(adv.advantages[i]), -i))
    if adv.teaches_nothing:
        reason = (f"Every reward of the group is {reward_text(adv.rewards[0])}, so every R − mean is 0 and so is every "
                  "advantage: a group whose answers all score the same teaches nothing.")
    else:
        reason = (f"(R − mean) / std = ({reward_text(adv.rewards[at])} − {fmt(adv.mean)}) / {fmt(adv.std)} = "
                  f"{fmt_signed(adv.advantages[at])}, with the sample standard deviation √(Σ (R − mean)² / (G − 1)) = "
                  f"√({fmt(sum(adv.squares))} / {adv.divisor}) = {fmt(adv.std)}.")
    return Question(
        "advantage", f"Answer {at + 1} has the reward {reward_text(adv.rewards[at])}, and the group's mean reward is "
                     f"{fmt(adv.mean)}. With the sample standard deviation, as TRL divides by default "
                     f"(scale_rewards=\"{TRL.scale_rewards}\", without its {TRL.std_eps:g}), what is its "
                     "advantage?", adv.advantages[at],
        reason=reason, hint="subtract the group's mean reward, then divide by its sample standard deviation "
                            "(section 2 writes both out).")


def _rloo_question(adv: Advantages) -> Question:
    """RLOO's leave-one-out advantage of the group's first highest-rewarded answer, from the rewards on screen."""
    at = max(range(adv.count), key=lambda i: (adv.rewards[i], -i))
    reward, others = adv.rewards[at], adv.count - 1
    rest = sum(adv.rewards) - reward
    answer = 0.0 if adv.teaches_nothing else reward - rest / others  # equal rewards: exactly 0, as leave_one_out
    return Question(
        "rloo", f"Answer {at + 1} has the reward {reward_text(reward)}; the other {others} answers' rewards add up "
                f"to {reward_text(rest)}. What is its RLOO advantage: its reward minus the mean reward of the others?",
        answer,
        reason=f"{reward_text(reward)} − {reward_text(rest)} / {others} = {fmt_signed(answer)}. That is "
               f"G/(G − 1) × (R − mean) = {adv.count}/{others} × {fmt_signed(adv.deviations[at])}: leaving the "
               "answer out of its own baseline scales GRPO's R − mean up by G/(G − 1), and RLOO divides by no "
               "standard deviation.",
        hint="divide the other answers' total by how many they are, then subtract; section 2's table has RLOO's "
             "column.")


def _first_ratio_question(step: GrpoStep) -> Question:
    first = step.before.tokens[0][0]
    return Question(
        "first_ratio", "At the first update on a group, the policy being trained is the policy that sampled the "
                       "answers. What is the ratio π_θ / π_old of answer 1's first token?", first.ratio,
        reason=f"Both are the same weights, so log π_θ − log π_old = {fmt(first.log_ratio)} and the ratio is "
               f"e^0 = {fmt(first.ratio)} for every token: nothing can be clipped at the first update on a group. "
               f"TRL by default (num_iterations = {TRL.num_iterations}, one optimizer step per generation) takes "
               "only that one, so the clip fraction it logs is 0 at every step. The ratio leaves 1 once the weights "
               "have taken an optimizer step since the answers were sampled: when the same answers are used for "
               "another update (num_iterations above 1), or when one generation is split over several optimizer "
               f"steps. {SPLIT_GENERATION}",
        hint="the ratio is e^(log π_θ − log π_old); at the first update the two log-probabilities are equal "
             "(section 3).")


def _second_update_question(step: GrpoStep) -> Question:
    second = step.updates[1].start
    unit = second.clip_unit
    # TRL's is_high_clipped compares r with 1 + epsilon_high, which is epsilon unless clip-higher sets it
    high = "ε" if second.epsilon_high == second.epsilon_low else "ε high"
    return Question(
        "second_update_clipped", f"At the second update on the same group, how many of the group's {second.clip_total} "
                                 f"{unit}s does the clip hold (the min takes clip(r)·A)?", second.clipped_count,
        reason=f"{second.clipped_low} with r below 1 − ε = {1 - second.epsilon_low:g} and A < 0, and "
               f"{second.clipped_high} with r above 1 + {high} = {1 + second.epsilon_high:g} and A > 0: "
               f"{second.clipped_count} of {second.clip_total}, a clip fraction of "
               f"{fmt(second.clip_fraction)}. The first update moved the ratios away from 1; the clip now stops "
               "pushing those that moved far enough.",
        hint="section 5's table of updates counts them at each update.", digits=COUNT_DIGITS,
        table=_ratios_table(second))


def _ratios_table(loss: GroupLoss) -> tuple[tuple[str, ...], ...]:
    """Each answer's advantage and where its ratios lie against the clip range: what the clip count is made of. At
    sequence level an answer has one ratio."""
    low, high = 1 - loss.epsilon_low, 1 + loss.epsilon_high
    if loss.clip_unit != "token":
        return (("answer", "A", "its ratio r"),
                *((str(i + 1), fmt_signed(a), fmt(terms[0].ratio)) for i, (a, terms) in
                  enumerate(zip(loss.advantages, loss.tokens))))
    return (("answer", "A", "tokens", f"r below {low:g}", f"r above {high:g}"),
            *((str(i + 1), fmt_signed(a), str(len(terms)), str(sum(t.ratio < low for t in terms)),
               str(sum(t.ratio > high for t in terms))) for i, (a, terms) in
              enumerate(zip(loss.advantages, loss.tokens))))


def _weights_question(step: GrpoStep) -> Question:
    lengths = step.before.lengths
    longest = max(range(len(lengths)), key=lambda i: (lengths[i], -i))
    shortest = min(range(len(lengths)), key=lambda i: (lengths[i], i))
    weights = step.before.losses["grpo"].token_weights
    answer = MORE if weights[longest] > weights[shortest] else LESS if weights[longest] < weights[shortest] else SAME
    return Question(
        "weights", f"In GRPO's loss as published (each answer's mean over its tokens, then the mean over the "
                   f"answers), does one token of answer {longest + 1} ({lengths[longest]} tokens) weigh more, less "
                   f"or the same as one token of answer {shortest + 1} ({lengths[shortest]} tokens)?", answer,
        choices=(MORE, LESS, SAME),
        reason=f"Each token of an answer of n tokens weighs 1 / (G · n): 1 / ({len(lengths)} · {lengths[longest]}) "
               f"against 1 / ({len(lengths)} · {lengths[shortest]}). "
               + ("The answers are as long as each other, so their tokens weigh the same." if answer == SAME else
                  "A long answer's tokens each weigh less, so a long wrong answer is pushed down less per token "
                  "than a short one: the length bias Dr. GRPO and DAPO remove by weighing every token alike."),
        hint="section 4's table (folded: open it) gives one token's weight in each answer under each loss type.")


def _bradley_terry_question(preference: BradleyTerry) -> Question:
    return Question(
        "bradley_terry", f"A reward model scores the chosen answer {fmt(preference.reward_chosen)} and the rejected "
                         f"one {fmt(preference.reward_rejected)}. What is its Bradley–Terry loss for the pair?",
        preference.loss,
        reason=f"−log σ(r_chosen − r_rejected) = −log σ({fmt(preference.margin)}) = {fmt(preference.loss)}: "
               f"the model says the chosen answer is preferred with probability σ = "
               f"{fmt(preference.probability)}.",
        hint="take the difference of the two scores, then −log σ of it, where σ(x) = 1 / (1 + e^−x) (section 6).")
