"""Check-yourself questions: what a page asks, and how an answer is checked (pure Python).

A question is built from the numbers on the learner's screen by the library module that
computes them (lmviz.course.questions, one module per lesson), so its expected
answer is always the page's own, never a literal. Everything here is plain text: the page
escapes it when it shows it, because a question can quote a token the learner typed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from lmviz.core.numbers import fmt
from lmviz.core.text import quotable
from lmviz.errors import LearnerError

# One rule for every typed answer, and the caption above each page's questions (tolerance_rule) is written from
# it. A number is right within 0.01 of the answer, or within 1 % of it where that is wider (an answer above 1):
# 0.69 for -log 0.5 = 0.69315 is right, 0.68 is not; 100 for a perplexity of 100.9 is right. Only a count is
# checked exactly: a question that asks "how many" of something and has a whole number for its answer
# (COUNT_DIGITS). Question refuses any other exact question, so that no number can be held to a stricter rule
# than the caption says (a perplexity of e^(ln 193) = 193 is a number, not a count).
ABSOLUTE_TOLERANCE = 0.01
RELATIVE_TOLERANCE = 0.01
COUNT_DIGITS = 0
COUNT_WORDS = "how many"


def tolerance_for(answer: float) -> float:
    return max(ABSOLUTE_TOLERANCE, RELATIVE_TOLERANCE * abs(answer))


def _written(share: float) -> str:
    return f"{share * 100:g} %"


def tolerance_rule(questions) -> str:
    """The caption above a page's questions: how its typed answers are checked, from the constants above,
    naming only the kinds of typed question the page asks (a number, a count)."""
    typed = [q for q in questions if not q.choices]
    parts = []
    if any(not q.is_count for q in typed):
        parts.append(f"a typed number is right within {ABSOLUTE_TOLERANCE:g} of the answer, or within "
                     f"{_written(RELATIVE_TOLERANCE)} of it when the answer is above "
                     f"{ABSOLUTE_TOLERANCE / RELATIVE_TOLERANCE:g}")
    if any(q.is_count for q in typed):
        parts.append(f"the answer to a “{COUNT_WORDS}” question is a count, and must be exact")
    said = "; ".join(parts)
    return said[:1].upper() + said[1:] + "." if said else ""


@dataclass(frozen=True)
class Question:
    """One question. ``answer`` is a number (typed in a box) or one of ``choices`` (picked)."""

    key: str  # stable within its page, whatever the numbers: progress is kept by it
    ask: str
    answer: float | str
    reason: str  # why the answer is right: shown when it is found or revealed
    hint: str  # where on the page the answer can be worked out: shown after a wrong answer
    choices: tuple[str, ...] = ()
    digits: int = 5  # how the answer is written when revealed (lmviz.core.numbers.fmt); COUNT_DIGITS: a count
    # The numbers on the page that the question needs and its text does not give, as the page writes them: a header
    # row, then one row per line, all text. The page has them on screen already; a phone in a live class, asked the
    # question, shows this table under it (lmviz.app.live), so that it answers from the projector's numbers.
    table: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        if self.table and (len(self.table) < 2 or len({len(row) for row in self.table}) > 1):
            raise ValueError(f"question {self.key}: its table needs a header and at least one row, all as wide")
        if self.choices and self.answer not in self.choices:
            raise ValueError(f"question {self.key}: the answer {self.answer!r} is not among its choices")
        if self.choices:
            return
        if not math.isfinite(self.answer):
            raise ValueError(f"question {self.key}: a typed answer must be a finite number, not {self.answer}")
        if self.is_count and (isinstance(self.answer, bool) or not isinstance(self.answer, numbers.Integral)):
            raise ValueError(f"question {self.key}: a count (digits={COUNT_DIGITS}, checked exactly) must have a "
                             f"whole number for its answer, not {self.answer!r}; give a number its digits")
        if self.is_count != (COUNT_WORDS in self.ask.lower()):
            raise ValueError(f"question {self.key}: the page says that a “{COUNT_WORDS}” question is a count, "
                             "checked exactly, and every other number within a tolerance: "
                             + ("a count must ask “how many”" if self.is_count else
                                f"ask it another way, or make it a count (digits={COUNT_DIGITS})"))

    @property
    def is_count(self) -> bool:
        """A typed answer that is a count: checked exactly."""
        return not self.choices and self.digits == COUNT_DIGITS

    @property
    def tolerance(self) -> float:
        return 0.0 if self.choices or self.is_count else tolerance_for(self.answer)

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
        raise NotANumber(f"“{quotable(typed.strip()[:40])}” is not a number: type digits, for example 0.69.") from None
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
