"""Masked LM's check-yourself questions, from the analysis on the learner's screen (lmviz.lessons.bert.analyse_mlm).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.labels import IGNORE_INDEX, Branch
from lmviz.core.numbers import fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.bert import MlmAnalysis, MlmRow


def _position_name(row: MlmRow) -> str:
    """A position as the Masked LM page lists it: position: token."""
    return f"{row.position}: {row.token}"


def build_questions(result: MlmAnalysis) -> list[Question]:
    """Masked LM's check-yourself questions, from the analysis on the learner's screen."""
    selected = [r for r in result.rows if r.label != IGNORE_INDEX]
    n = len(selected)
    questions = [Question(
        "count", f"Of the {result.num_eligible} tokens that could be selected, how many positions count in this "
                 "loss?", n, digits=0,
        reason=f"Only the {n} selected positions have a label (not -100); the loss is the mean of their -log p, "
               f"and the other {result.num_eligible - n} tokens and the special tokens count nothing.",
        hint="count the positions whose label is not -100 in the table of section 2, Labels and predictions.",
        table=(("position", "token", "label"), *((str(r.position), r.token, str(r.label)) for r in result.rows)))]
    nlls = [r.nll for r in selected]
    listed = ", ".join(fmt(v) for v in nlls) if n <= 8 else f"the {n} numbers section 3 lists"
    questions.append(Question(
        "mean", f"The -log p of the selected positions are {listed}. What is the masked-LM loss?", result.loss,
        reason=f"The loss is the mean over the selected positions only: ({' + '.join(fmt(v) for v in nlls)}) / {n} "
               f"= {fmt(result.loss)}.",
        hint="add the selected positions' -log p and divide by how many there are; section 3, The loss over the "
             "selected positions, writes the sum out."))
    kept = [r for r in selected if r.branch == Branch.KEPT]
    # one kept position among the selected ones that are not kept, so that exactly one choice is right
    offered = [r for r in selected if r.branch != Branch.KEPT or r is kept[0]] if kept else []
    if len(offered) > 1:  # no kept position, or nothing else selected: no question to ask
        questions.append(Question(
            "kept", "Which of these selected positions is kept as it was, so that the model reads the right token "
                    "there, and why does it still count?", _position_name(kept[0]),
            choices=tuple(_position_name(r) for r in offered),
            reason=f"The model reads “{kept[0].token}” at position {kept[0].position}, yet its label is the "
                   f"token's id, {kept[0].label}, not -100, so it must still predict it: any token it reads may "
                   "be scored, so it learns to model every token, not only [MASK], which it never sees after "
                   "pre-training.",
            hint="look for the branch 'kept' in the table of section 2, Labels and predictions (✓ in section 1): "
                 "the model reads the original token, and the label is not -100.",
            table=(("position", "the token", "what the model reads"),
                   *((str(r.position), r.token, r.shown) for r in offered))))
    return questions
