"""BERT pre-training loss's check-yourself questions, from the analysis on the learner's screen
(lmviz.lessons.bert.analyse_bert_loss).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.bert import BertLossAnalysis


def build_questions(result: BertLossAnalysis) -> list[Question]:
    """BERT pre-training loss's check-yourself questions, from the two losses and their weights."""
    mlm_part, nsp_part = result.mlm_weight * result.mlm_loss, result.nsp_weight * result.nsp_loss
    sum_line = (f"{result.mlm_weight:g} × {fmt(result.mlm_loss)} + {result.nsp_weight:g} × {fmt(result.nsp_loss)} "
                f"= {fmt(mlm_part)} + {fmt(nsp_part)}")
    parts = ("masked LM", "next sentence", "both the same")
    larger = parts[0] if mlm_part > nsp_part else parts[1] if nsp_part > mlm_part else parts[2]
    return [
        Question(
            "total", f"The masked-LM loss is {fmt(result.mlm_loss)}, weighted {result.mlm_weight:g}, and the "
                     f"next-sentence loss is {fmt(result.nsp_loss)}, weighted {result.nsp_weight:g}. What is BERT's "
                     "pre-training loss?", result.total,
            reason=f"It is the weighted sum of the two parts: {sum_line} = {fmt(result.total)}.",
            hint="multiply each loss by its weight (the MLM weight and NSP weight sliders) and add the two; the "
                 "line 'total = ...' under the masked pair works it out."),
        Question(
            "larger", "Which part adds more to this pre-training loss?", larger, choices=parts,
            table=(("part", "loss", "weight"), (parts[0], fmt(result.mlm_loss), f"{result.mlm_weight:g}"),
                   (parts[1], fmt(result.nsp_loss), f"{result.nsp_weight:g}")),
            reason=f"The parts add {sum_line}: each loss counts times its weight.",
            hint="compare each loss times its weight, not the bare losses; the line 'total = ...' under the masked "
                 "pair writes each with its weight."),
    ]
