"""One step of learning's check-yourself questions, from the gradient and the step on the learner's screen
(lmviz.lessons.gradient_step). Plain Python (no torch): the page passes in what it computed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt_grad, fmt_prob
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.gradient_step import LogitGradient, SgdSteps

RISES, FALLS = "it rises", "it falls"


def build_questions(gradient: LogitGradient, steps: SgdSteps) -> list[Question]:
    return [_label_entry_question(gradient), _row_sum_question(gradient), _rises_question(steps)]


def _label_entry_question(gradient: LogitGradient) -> Question:
    # asked at the longest row: there the entry is far from 0, so that 0 is not right by tolerance
    row = max(gradient.rows, key=lambda r: r.row_norm)
    n = gradient.count
    return Question(
        "label_entry", f"At position {row.position}, the label {row.target_token} has p = {fmt_prob(row.prob)}, and "
                       f"the loss is the mean over N = {n} labels. What is the gradient of the loss with respect "
                       "to that label's logit?", row.label_entry, digits=6,
        reason=f"(p − 1)/N = ({fmt_prob(row.prob)} − 1)/{n} = {fmt_grad(row.label_entry)}: negative, so the loss "
               "falls as the label's logit rises. The step itself changes weights; the logit changes because they "
               "did.",
        hint="the derivative of -log p with respect to the label's own logit is p − 1; the mean divides it by N "
             "(section 1).")


def _row_sum_question(gradient: LogitGradient) -> Question:
    return Question(
        "row_sum", f"Each row of the gradient has {gradient.vocab_size:,} entries, one per token of the "
                   "vocabulary. What do the entries of one row add up to?", 0.0,
        reason="The label's entry is (p − 1)/N and the others p/N; the p of a row add up to 1, so the row adds up "
               "to (1 − 1)/N = 0. Adding one number to every logit of a position changes none of its "
               "probabilities, so the loss does not change that way.",
        hint="add the label's entry, (p − 1)/N, to all the others, p/N: the p of one position add up to 1 "
             "(section 1's row sum column).")


def _rises_question(steps: SgdSteps) -> Question:
    # the label that moved most, either way: a question whose answer the table shows plainly
    row = max(steps.text.rows, key=lambda r: abs(r.prob_after - r.prob_before))
    rose = row.prob_after > row.prob_before
    return Question(
        "rises", f"After one step of SGD at lr = {steps.lr:g} on your text, does p({row.target_token}) at position "
                 f"{row.position} rise or fall?", RISES if rose else FALLS, choices=(RISES, FALLS),
        reason=f"It went {fmt_prob(row.prob_before)} → {fmt_prob(row.prob_after)}. "
               + ("A small enough step down the gradient lowers the mean loss over the labels; this label's p rose "
                  "with it (a label's p can also fall, where the other labels' gradients, through the weights they "
                  "share, outweigh its own)." if rose else
                  "It fell, though the step was taken to lower the loss: at this rate the step overshoots, or the "
                  "other labels' gradients, through the weights they share, outweigh this one's."),
        hint="compare p(label) before and after in section 3's table (folded: open it).")
