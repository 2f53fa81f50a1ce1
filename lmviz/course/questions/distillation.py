"""Distillation's check-yourself questions, from the numbers on the learner's screen (lmviz.lessons.distillation).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.distillation import Distillation

FORWARD, REVERSE = "KL(p_T ‖ p_S), the forward KL", "KL(p_S ‖ p_T), the reverse KL"


def build_questions(result: Distillation) -> list[Question]:
    tau = result.temperature
    return [
        Question("direction", "Which KL is large where the student gives probability to tokens the teacher does "
                              "not, so that minimising it makes the student drop them (mode-seeking)?", REVERSE,
                 choices=(FORWARD, REVERSE),
                 reason="KL(p_S ‖ p_T) = Σ p_S (log p_S − log p_T) weighs each token by the student's probability: "
                        "a token the student likes and the teacher does not costs the most. The forward KL weighs "
                        "by the teacher's, and is large where the student misses what the teacher likes "
                        "(mass-covering).",
                 hint="look at whose probability weighs each term of the sum: that model's likely tokens are the ones "
                      "that count."),
        Question("beta_one", f"What is the loss at β = 1 (TRL's convention), at τ = {tau:g} and without τ²? The "
                             "table gives each answer token's two KLs.", result.reverse_kl,
                 table=(("position", "token", "KL(p_T ‖ p_S)", "KL(p_S ‖ p_T)"),
                        *((str(p.position), p.token, fmt(p.forward_kl), fmt(p.reverse_kl))
                          for p in result.positions)),
                 reason=f"TRL defines β = 1 as the reverse KL: the mean of the KL(p_S ‖ p_T) column, "
                        f"{fmt(result.reverse_kl)}. The formula alone would give 0 there.",
                 hint="at β = 1 the generalized JSD is one of the two KLs: take the mean of that column."),
        _t_squared_question(result),
    ]


# At τ = 1 the factor is 1, and a typed answer would be the loss the question states: there it is asked in words
UNCHANGED, DOUBLED, SQUARED = "it leaves it as it is: τ² = 1", "it doubles it", "it squares the loss"
# What Hinton's factor is for, and where that holds (section 3 of the page)
WHY_T_SQUARED = ("Where τ is large against the gaps between a position's logits, the gradient shrinks about as "
                 "1/τ² and the factor puts that size back; at smaller τ no such rule holds.")


def _t_squared_question(result: Distillation) -> Question:
    tau = result.temperature
    if tau == 1:
        return Question("t_squared", "At τ = 1, what does Hinton's τ² factor do to the loss?", UNCHANGED,
                        choices=(UNCHANGED, DOUBLED, SQUARED),
                        reason=f"It multiplies the loss by τ² = 1² = 1. {WHY_T_SQUARED}",
                        hint="the factor multiplies the loss by the temperature squared.")
    if result.beta == 1:  # the loss is then the reverse KL, the "beta_one" question's answer: not stated here
        return Question("t_squared", f"At τ = {tau:g}, by what number does Hinton's τ² factor multiply the loss?",
                        tau ** 2, reason=f"τ² = {tau:g}² = {fmt(tau ** 2)}. {WHY_T_SQUARED}",
                        hint="the factor is the temperature squared.")
    return Question("t_squared", f"At τ = {tau:g} the loss is {fmt(result.loss)} without τ². What is it with "
                                 "Hinton's τ² factor?", result.loss_t_squared,
                    reason=f"{fmt(result.loss)} × {tau:g}² = {fmt(result.loss_t_squared)}. {WHY_T_SQUARED}",
                    hint="multiply the loss by the temperature squared.")
