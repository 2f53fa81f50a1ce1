"""Your sentence's check-yourself questions, from the analysis on the learner's screen (lmviz.lessons.causal_lm).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt, fmt_prob
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.causal_lm import ClmAnalysis, TokenRow

CHOICES = 8  # "which label costs the most?" offers at most this many (a long text has hundreds)


def label_name(row: TokenRow) -> str:
    """A scored position as the page names it: position: input token → label."""
    return f"{row.position}: {row.input_token} → {row.target_token}"


def build_questions(result: ClmAnalysis, losses_shown: bool = True) -> list[Question]:
    """Your sentence's check-yourself questions, from the analysis on the learner's screen. ``losses_shown``:
    False while Predict first hides sections 2 and 3 (the table and the chart), which the hints then leave out."""
    rows = result.rows
    costliest = max(range(len(rows)), key=lambda t: rows[t].nll)  # the first, when several tie
    # the costliest label among others spread evenly over the text, in the text's order
    offered = sorted({costliest} | {round(i * (len(rows) - 1) / (CHOICES - 2)) for i in range(CHOICES - 1)}
                     if len(rows) > CHOICES else range(len(rows)))
    first = result.tokens[0]
    # with a start token, "the first" token is the start token, and the text's own first token is a label: the
    # sentences name each of the two, never both "the first"
    unlabelled = (f"the start token, {first}, which has nothing before it; so every token of the text is a label, "
                  f"{result.tokens[1]} too" if result.bos_added else f"the first, {first}, which has nothing before it")
    questions = [
        Question("highest", "Predict before you look: which label will cost the most, the largest -log p?",
                 label_name(rows[costliest]), choices=tuple(label_name(rows[t]) for t in offered),
                 reason=f"The model gave it p = {fmt_prob(rows[costliest].prob)}, "
                        f"so -log p = {fmt(rows[costliest].nll)}: "
                        "the less likely the model found the label, the more it costs.",
                 hint="the label the model could least expect from the tokens before it costs most: often an early "
                      "one, with little before it, or a name; "
                      + ("the chart of section 3 shows each one's -log p." if losses_shown else
                         "section 1 shows the tokens, and the losses appear once you answer.")),
        Question("count", "Over how many labels is this text's loss the mean?", len(rows), digits=0,
                 table=(("position", "token"), *((str(t), token) for t, token in enumerate(result.tokens))),
                 reason=f"{len(result.tokens)} tokens give {len(rows)} labels: every token is predicted from the "
                        f"ones before it, except {unlabelled}.",
                 hint="count the rows of the table of section 2: one per label, the next token at each position."
                      if losses_shown else "count the tokens of section 1, less one: every token is a label except "
                                           + ("the start token, which has nothing before it." if result.bos_added
                                              else "the first, which has nothing before it.")),
    ]
    if math.isfinite(result.perplexity):
        questions.append(Question(
            "perplexity", f"The loss is {fmt(result.loss)}. What is the perplexity?", result.perplexity,
            digits=PERPLEXITY_DIGITS,
            reason=f"Perplexity = e^loss = e^{fmt(result.loss)} = {fmt(result.perplexity, PERPLEXITY_DIGITS)}: the "
                   "model is as unsure as if it chose uniformly among that many tokens.",
            hint="perplexity is e (2.71828…) raised to the power of the loss; the panel at the top shows both."))
    return questions
