"""Next sentence's check-yourself questions, from the analysis on the learner's screen (lmviz.lessons.bert.analyse_nsp).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.labels import IS_NEXT_HF
from lmviz.core.numbers import fmt, fmt_prob
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.bert import NspAnalysis


def nsp_label_words(label: int) -> str:
    """A next-sentence label in words, Hugging Face's convention (0 = B follows A), as the pages say it."""
    return "B follows A" if label == IS_NEXT_HF else "B does not follow A"


def build_questions(result: NspAnalysis) -> list[Question]:
    """Next sentence's check-yourself questions, from the pair's two logits and its label."""
    a, b = result.logits
    p_next = result.probs[IS_NEXT_HF]
    p_label = result.probs[result.label]
    return [
        Question(
            "probability", f"The head's two logits are a = {fmt(a)} (B follows A) and b = {fmt(b)} (B does not). "
                           "What is p(B follows A)?", p_next, digits=6,
            reason=f"The softmax of the two logits: e^a / (e^a + e^b) = 1 / (1 + e^(b - a)) = {fmt_prob(p_next)}. "
                   "Only the difference of the two scores matters.",
            hint="take the softmax of the two logits, e^a / (e^a + e^b); the table of section 2, Two scores, "
                 "their softmax, and the loss, shows it beside each logit."),
        # from the logits, not from p(B follows A): that is the first question's answer
        Question(
            "loss", f"With the same two logits, a = {fmt(a)} and b = {fmt(b)}, the label is {result.label}: "
                    f"{nsp_label_words(result.label)}. What is the next-sentence loss?", result.loss_two_logits,
            reason=f"The loss is -log of the probability of the labelled class, {nsp_label_words(result.label)}: "
                   f"its softmax is {fmt_prob(p_label)}, and -log {fmt_prob(p_label)} = "
                   f"{fmt(result.loss_two_logits)}.",
            hint="take the softmax of the two logits, then -log of the probability of the class the label names "
                 "(for label 1, that is 1 - p(B follows A)); the line under the table of section 2 works it out."),
    ]
