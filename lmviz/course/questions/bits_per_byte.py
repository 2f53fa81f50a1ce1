"""Bits per byte's check-yourself questions, from the numbers on the learner's screen (lmviz.lessons.bits_per_byte).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.bits_per_byte import BitsPerByte, Windowed

LN2_SHOWN = fmt(math.log(2))


def build_questions(result: BitsPerByte, compared: list[BitsPerByte], scored: Windowed | None) -> list[Question]:
    """The page's questions: bits per byte from the panel's two numbers; which of the compared models is better on
    the text (when at least two are compared); how many tokens lost context in lm-evaluation-harness's windows
    (when section 5 has been scored)."""
    sums = result.harness
    questions = [Question(
        "bpb", f"This text's loss is {fmt(sums.nats_per_token)} nats per token, and its tokens hold "
               f"{fmt(sums.bytes_per_token)} bytes each on average. What is its bits per byte?",
        sums.bits_per_byte,
        reason=f"Bits per byte = (nats per token) ÷ (ln 2 × bytes per token) = {fmt(sums.nats_per_token)} ÷ "
               f"({LN2_SHOWN} × {fmt(sums.bytes_per_token)}) = {fmt(sums.bits_per_byte)}: ÷ ln 2 turns nats into "
               "bits, and ÷ bytes per token turns a cost per token into a cost per byte.",
        hint=f"divide the nats per token by ln 2 ({LN2_SHOWN}) for bits per token, then by the bytes per token.")]
    if len(compared) >= 2:
        best = min(compared, key=lambda r: r.harness.bits_per_byte)
        dropping = [r.model for r in compared if not r.keeps_text]
        caveat = (f" Bits per byte is fair only to a tokenizer that gives the text back: {', '.join(dropping)} never "
                  "had to predict what its tokenizer dropped, so its bits per byte flatters it." if dropping else "")
        # where the lowest is a tokenizer's that drops text, its bits per byte does not show it is the better model
        flattered = best.model in dropping
        asked = ("Which model has the lowest bits per byte on this text?" if flattered
                 else "Which model is better on this text? Compare them fairly.")
        questions.append(Question(
            "better", asked, best.model,
            choices=tuple(r.model for r in compared),
            table=(("model", "nats per token", "bytes per token"),
                   *((r.model, fmt(r.harness.nats_per_token), fmt(r.harness.bytes_per_token)) for r in compared)),
            reason=f"{best.model}: its bits per byte, {fmt(best.harness.bits_per_byte)}, is the lowest. Each model "
                   "is charged for the same bytes, whatever its tokens; a loss per token divides by each tokenizer's "
                   "own count of tokens, and a tokenizer with fewer, longer tokens has more to predict at each."
                   + caveat,
            hint="work out each model's bits per byte from its two numbers: (nats per token) ÷ (ln 2 × bytes per "
                 "token); " + ("the lowest is the answer." if flattered
                               else "the lowest is the better model on this text.")))
    if scored is not None:
        harness = scored.harness
        lost = harness.lost_context()
        first = min(scored.window, len(scored.tokens) - 1)
        questions.append(Question(
            "lost", f"In lm-evaluation-harness's windows of {scored.window} tokens, how many of the text's tokens are "
                    "predicted from fewer tokens than all those before them?", len(lost), digits=0,
            table=(("position", "token", "context length"),
                   *((str(t), scored.tokens[t], str(harness.context[t])) for t in range(1, len(scored.tokens)))),
            reason=f"The first window's {first} tokens are each predicted from every token before them; each of the "
                   f"other {len(lost)} is predicted from the tokens of its own window only, fewer than its position.",
            hint="a token at position t has t tokens before it (the prefix included): count the rows whose context "
                 "length is less than their position."))
    return questions
