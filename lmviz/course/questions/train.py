"""Train's check-yourself questions, from the model's vocabulary and the losses it recorded
(lmviz.lessons.training.Trainer).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.training import StepRecord


def token_part(objective: str) -> str:
    """The name of the loss part that predicts tokens (loss_parts' key), whose uniform guess is ln V."""
    return "next token" if objective == "clm" else "masked LM"


def build_questions(objective: str, vocab_size: int, history: list[StepRecord] = ()) -> list[Question]:
    """The page's check-yourself questions: where a model with ``vocab_size`` output tokens starts, and
    a perplexity; from the validation losses in ``history`` once it has trained, else from V alone."""
    part = token_part(objective)
    return [_start_question(objective, part, vocab_size, history), _perplexity_question(part, vocab_size, history)]


def _start_question(objective: str, part: str, vocab_size: int, history: list[StepRecord]) -> Question:
    start = math.log(vocab_size)
    measured = (f" This model's {part} loss at step 0, on the validation text, was "
                f"{fmt(history[0].validation[part])}." if history else "")
    pair = (f" Its next-sentence loss starts near ln 2 in the same way, so the sum near ln V + ln 2 = "
            f"{fmt(start + math.log(2))}." if objective == "mlm+nsp" else "")
    return Question(
        "start", f"The model predicts each {'next' if objective == 'clm' else 'masked'} token among V = {vocab_size} "
                 f"tokens. Before any training, near what {part} loss does it start?", start,
        reason=f"An untrained model spreads its probability about evenly over the {vocab_size} tokens, so the true "
               f"one gets about 1/{vocab_size} and costs -log(1/{vocab_size}) = ln {vocab_size} = {fmt(start)}."
               + measured + pair,
        hint="knowing nothing, a model gives each of the V tokens the same probability, 1/V; the paragraph at the "
             "top of the page says what loss that makes.")


def _perplexity_question(part: str, vocab_size: int, history: list[StepRecord]) -> Question:
    hint = ("perplexity is e^loss, the loss turned back into a number of equally likely tokens (the paragraph at "
            "the top of the page links its glossary entry).")
    if not history:
        # e^(ln V) is V, yet it is a perplexity, not a count: checked within the tolerance like every number
        return Question("perplexity", f"What is the perplexity of that starting loss, ln {vocab_size}?",
                        float(vocab_size), digits=PERPLEXITY_DIGITS, hint=hint,
                        reason=f"Perplexity is e^loss, and e^(ln {vocab_size}) = {vocab_size}, the perplexity of a "
                               f"uniform guess over the {vocab_size} tokens. An untrained model starts near it: "
                               "step 0, in the pinned panel, is where this one does.")
    latest = next(r for r in reversed(history) if r.validation is not None)
    loss = latest.validation[part]
    return Question(
        "perplexity", f"At step {latest.step}, “Validation loss: {part}” is {fmt(loss)}. What is its perplexity?",
        math.exp(loss), digits=PERPLEXITY_DIGITS, hint=hint,
        reason=f"Perplexity is e^loss: e^{fmt(loss)} = {fmt(math.exp(loss), PERPLEXITY_DIGITS)}, as unsure as a "
               f"uniform choice among that many tokens." + _from_step_zero(part, vocab_size, history[0], latest))


def _from_step_zero(part: str, vocab_size: int, start: StepRecord, latest: StepRecord) -> str:
    """Where the same perplexity stood at step 0, from the record of that step, not V: the untrained model's
    weights are random, so it starts near a uniform guess, not on it (195.05 for V = 193 on lmviz's stories)."""
    loss = start.validation[part]
    if latest is start:
        return f" This is step 0, the untrained model: near V = {vocab_size}, the perplexity of a uniform guess."
    return (f" At step 0, before any training, it was e^{fmt(loss)} = {fmt(math.exp(loss), PERPLEXITY_DIGITS)}, "
            f"near V = {vocab_size}, the perplexity of a uniform guess.")
