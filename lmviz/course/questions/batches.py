"""Batches and padding's check-yourself questions, from the batch on the learner's screen (lmviz.lessons.batches).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import LOSS_DIGITS, fmt
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    import torch

    from lmviz.lessons.batches import BatchLosses

# Two means closer than half the last digit the page shows are the same number on screen: float32
# rounding alone can part the batch loss from an equal mean of means by a few units of 1e-7.
SAME_ON_SCREEN = 0.5 * 10 ** -LOSS_DIGITS


MEANS = ("above", "below", "equal")


def build_questions(attention_mask: torch.Tensor, labels: torch.Tensor, result: BatchLosses) -> list[Question]:
    """The page's check-yourself questions, from its right-padded batch: the mask and labels of
    section 2 and the losses of the panel and section 3."""
    lengths = attention_mask.sum(-1).tolist()  # real tokens per sentence
    counted = sum(result.sentence_counts)
    sums = " + ".join(f"({n} − 1)" for n in lengths)
    return [
        Question("count", f"The batch's {len(lengths)} sentences are {_listed(lengths)} tokens long, start and end "
                          "tokens included. How many predictions does the batch loss divide by?", counted,
                 reason=f"A sentence of n tokens makes n − 1 predictions (nothing predicts its first token, and the "
                        f"pads' labels are -100): {sums} = {counted}.",
                 hint="a sentence of n tokens makes n − 1 predictions; section 1's table counts them per sentence, "
                      "and section 3 says what the model divides by.", digits=0),
        _means_question(result),
        _ignored_question(attention_mask, labels),
        _packing_question(lengths),
    ]


def _packing_question(lengths: list[int]) -> Question:
    """How many more predictions naive packing counts than the document mask: one at each boundary."""
    boundaries = len(lengths) - 1
    return Question(
        "packed", f"Section 6 packs the {len(lengths)} sentences in one row. How many more predictions does naive "
                  "packing count than packing with a document mask?", boundaries,
        reason=f"Naive packing also scores the first token of every sentence after the first, predicted from the end "
               f"of the one before: one prediction at each of the {boundaries} boundaries between "
               f"{len(lengths)} sentences.",
        hint="the document mask gives each sentence's first token the label -100; naive packing scores every next "
             "token of the row. The last sentence of section 6 counts both.", digits=0)


def _listed(numbers: list) -> str:
    """1, 2 and 3."""
    words = [str(n) for n in numbers]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def _means_question(result: BatchLosses) -> Question:
    counts = result.sentence_counts
    average = sum(counts) / len(counts)
    short = [n + 1 for n, c in enumerate(counts) if c < average]  # sentence numbers, as the page names them
    gap = result.mean_of_means - result.model_loss
    if not short:  # equal lengths make the two means one number; float32 can still part them
        answer, why = "equal", ("every sentence makes as many predictions as the others, so weighing sentences "
                                "equally is weighing tokens equally")
    elif abs(gap) < SAME_ON_SCREEN:
        answer, why = "equal", "the short sentences weigh more in the mean of means, but their losses balance out"
    else:
        answer = "above" if gap > 0 else "below"
        which = f"sentence {short[0]}" if len(short) == 1 else f"sentences {_listed(short)}"
        why = (f"the mean of means gives each sentence the same weight, so a sentence with fewer predictions than "
               f"the average ({which} here) weighs more than its tokens do, and on the whole those have the "
               f"{'higher' if answer == 'above' else 'lower'} losses")
    return Question(
        "means", "Is the mean of the sentences' own losses above, below or equal to the batch loss (the model's "
                 "out.loss, with right padding)?", answer,
        reason=f"The mean of means is {fmt(result.mean_of_means)} and the batch loss {fmt(result.model_loss)}: {why}.",
        hint="the batch loss gives every prediction the same weight, the mean of means every sentence; section 1's "
             "table shows which sentences are short and what their mean losses are.", choices=MEANS,
        table=(("sentence", "predictions", "its own loss"),
               *((str(n + 1), str(count), fmt(loss))
                 for n, (count, loss) in enumerate(zip(counts, result.sentence_losses)))))


def _ignored_question(attention_mask: torch.Tensor, labels: torch.Tensor) -> Question:
    rows, width = labels.shape
    real = int(attention_mask.sum())
    ignored = int((labels == IGNORE_INDEX).sum())
    return Question(
        "ignored", f"Section 2 with Show set to labels, Right padding tab: how many of the labels are {IGNORE_INDEX}?",
        ignored,
        reason=f"Each pad's label is {IGNORE_INDEX}: {rows} sentences of {width} positions hold {rows * width} "
               f"labels, {real} of them real tokens, so {ignored} pads; position 0 is not {IGNORE_INDEX}, yet "
               "nothing predicts it, so it does not count either.",
        hint=f"the label is {IGNORE_INDEX} wherever the attention_mask grid of section 2 has a 0 (a pad): every "
             "sentence is padded to as many positions as the grid has rows, and section 1 gives each sentence's "
             "length.", digits=0,
        table=(("sentence", "tokens", "positions after padding"),
               *((str(n + 1), str(length), str(width)) for n, length in enumerate(attention_mask.sum(-1).tolist()))))
