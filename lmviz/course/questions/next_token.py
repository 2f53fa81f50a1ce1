"""Next token's check-yourself questions, from the distributions on the learner's screen (lmviz.lessons.next_token).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.numbers import fmt, fmt_prob
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.next_token import Distribution, TrueNext


GREEDY_CHOICES = 4  # "which token will greedy decoding pick?" offers the page's top few


def candidate_name(token: str, token_id: int) -> str:
    """A token as the page's "If the text really continued with" list names it (two tokens can read alike)."""
    return f"{token} (id {token_id})"


def build_questions(shown: Distribution, at_other: Distribution, target: TrueNext, chosen: bool) -> list[Question]:
    """Next token's check-yourself questions, from the distribution on screen, the same logits' distribution at
    the other temperature the questions ask about (lmviz.lessons.next_token.at_other_temperature), and the true
    next token: the one the learner chose (``chosen``), or the second most likely standing in for it."""
    return [_greedy_question(shown, at_other), _nll_question(target, chosen), _temperature_question(shown, at_other)]


def _greedy_question(shown: Distribution, at_other: Distribution) -> Question:
    # asked at another temperature, and computed there: that greedy ignores T is what is learnt
    other, picked = at_other.temperature, at_other.greedy
    offered = {c.token_id: c.token for c in shown.top[:GREEDY_CHOICES]}
    offered.setdefault(picked.token_id, picked.token)
    choices = tuple(sorted(candidate_name(token, i) for i, token in offered.items()))  # not in rank order
    probs = {c.token_id: c.prob for c in (*shown.top, shown.greedy)}  # greedy's token is the same at every T
    return Question(
        "greedy", f"If the temperature were {other:g} instead of {shown.temperature:g}, which token would greedy "
                  "decoding pick next?", candidate_name(offered[picked.token_id], picked.token_id), choices=choices,
        reason=f"Greedy decoding takes the highest logit, {offered[picked.token_id]} (z = {fmt(picked.logit)}), "
               "and dividing every logit by the same T never changes their order: greedy picks the same token at "
               "every temperature.",
        hint="greedy takes the highest logit z, rank 1 in the table of section 3, From logits to probabilities; "
             "the caption under the chart of section 2 says what the temperature does to it.",
        table=(("token", f"p at T = {shown.temperature:g}"),
               *((candidate_name(token, i), fmt_prob(probs[i])) for i, token in sorted(
                   offered.items(), key=lambda item: candidate_name(item[1], item[0])))))


def _nll_question(target: TrueNext, chosen: bool) -> Question:
    which = f"The true next token you chose, {target.token}," if chosen else \
        f"Suppose the text continued with {target.token}: it"
    return Question(
        "nll", f"{which} has p = {fmt_prob(target.prob)} at T = 1. What loss does this position add in training?",
        target.nll,
        reason=f"The loss of a position is -log p of its true next token at T = 1: -log {fmt_prob(target.prob)} = "
               f"{fmt(target.nll)} (the natural logarithm, negated).",
        hint="use the natural logarithm (ln, not log10), then change the sign; section 1, If the true next token "
             "is …, works it out for the token you choose there.")


def _temperature_question(shown: Distribution, at_other: Distribution) -> Question:
    now, other = shown.temperature, at_other.temperature
    favourite = shown.greedy  # the most likely at every temperature: at_other.greedy is the same token
    p_now, p_other = favourite.prob, at_other.greedy.prob
    moved = "raised" if other > now else "lowered"
    if fmt_prob(p_now) == fmt_prob(p_other):  # the same to every digit the page shows
        answer = "stay the same"
    else:
        answer = "go down" if p_other < p_now else "go up"
    why = {"stay the same": "its lead over the other logits is so large, or so small, that the change is below the "
                            "digits the page shows",
           "go down": "dividing by a larger T shrinks the gaps between the logits, so the distribution flattens",
           "go up": "dividing by a smaller T widens the gaps between the logits, so the distribution sharpens"}[answer]
    return Question(
        "temperature", f"If the temperature were {moved} from {now:g} to {other:g}, would the probability of the most "
                       f"likely token, {favourite.token}, go up, go down, or stay the same?", answer,
        choices=("go up", "go down", "stay the same"),
        reason=f"Its probability is {fmt_prob(p_now)} at T = {now:g} and {fmt_prob(p_other)} at T = {other:g}: {why}.",
        hint="the logits are divided by T before the softmax (the Temperature T slider's help says what that does); "
             "move the slider and watch p(greedy) in the panel at the top.")
