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
        Question("t_squared", f"At τ = {tau:g} the loss is {fmt(result.loss)} without τ². What is it with Hinton's "
                              "τ² factor?", result.loss_t_squared,
                 reason=f"{fmt(result.loss)} × {tau:g}² = {fmt(result.loss_t_squared)}. The factor puts back the size "
                        "the gradient loses when τ flattens both distributions.",
                 hint="multiply the loss by the temperature squared."),
    ]
