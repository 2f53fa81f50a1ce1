"""Check-yourself questions: what a page asks, and how an answer is checked (pure Python).

A question is built from the numbers on the learner's screen by the library module that
computes them (lmviz.course.questions, one module per lesson), so its expected
answer is always the page's own, never a literal. Everything here is plain text: the page
escapes it when it shows it, because a question can quote a token the learner typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lmviz.core.numbers import fmt
from lmviz.errors import LearnerError

# A number typed by hand is right when it is within 0.01, or within 1 % of a larger answer:
# 0.69 for -log 0.5 = 0.69315 is right, 0.68 is not; 100 for a perplexity of 100.9 is right.
ABSOLUTE_TOLERANCE = 0.01
RELATIVE_TOLERANCE = 0.01


def tolerance_for(answer: float) -> float:
    return max(ABSOLUTE_TOLERANCE, RELATIVE_TOLERANCE * abs(answer))


@dataclass(frozen=True)
class Question:
    """One question. ``answer`` is a number (typed in a box) or one of ``choices`` (picked)."""

    key: str  # stable within its page, whatever the numbers: progress is kept by it
    ask: str
    answer: float | str
    reason: str  # why the answer is right: shown when it is found or revealed
    hint: str  # where on the page the answer can be worked out: shown after a wrong answer
    choices: tuple[str, ...] = ()
    digits: int = 5  # how the answer is written when revealed (lmviz.core.numbers.fmt); 0: a count, checked exactly

    def __post_init__(self):
        if self.choices and self.answer not in self.choices:
            raise ValueError(f"question {self.key}: the answer {self.answer!r} is not among its choices")
        if not self.choices and not math.isfinite(self.answer):
            raise ValueError(f"question {self.key}: a typed answer must be a finite number, not {self.answer}")

    @property
    def tolerance(self) -> float:
        return 0.0 if self.choices or self.digits == 0 else tolerance_for(self.answer)

    @property
    def shown_answer(self) -> str:
        return self.answer if self.choices else fmt(self.answer, self.digits)


@dataclass(frozen=True)
class Verdict:
    right: bool | None  # None: what was given is not an answer (empty, not a number)
    message: str


class NotANumber(LearnerError, ValueError):
    """What was typed cannot be read as a finite number; the message says so in one sentence."""


def read_number(typed: str) -> float:
    """A number as a learner types it: '0.69', ' 0,69 ', '-1.5e-3', '−2' (a typographic minus)."""
    text = typed.strip().replace("−", "-").replace(" ", "")
    if not text:
        raise NotANumber("Type a number first, for example 0.69.")
    if "," in text and "." not in text:
        text = text.replace(",", ".")  # a decimal comma
    try:
        value = float(text)
    except ValueError:
        raise NotANumber(f"“{typed.strip()[:40]}” is not a number: type digits, for example 0.69.") from None
    if not math.isfinite(value):
        raise NotANumber("Type a finite number: every answer here is one.")
    return value


def check(question: Question, given: str | None) -> Verdict:
    """Is ``given`` (typed text, or the picked choice) the answer? Never raises on what a learner gives."""
    if question.choices:
        if given is None:
            return Verdict(None, "Pick one of the answers first.")
        right = given == question.answer
    else:
        try:
            value = read_number(given or "")
        except NotANumber as problem:
            return Verdict(None, str(problem))
        right = abs(value - question.answer) <= question.tolerance
    if right:
        return Verdict(True, f"Right. {question.reason}")
    return Verdict(False, f"Not quite. Hint: {question.hint}")
