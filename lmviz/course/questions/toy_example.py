"""The Toy example's check-yourself questions, from the walkthrough on the learner's screen
(lmviz.core.toy.walkthrough).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from lmviz.core.numbers import fmt, fmt_prob
from lmviz.course.quiz import Question


def build_questions(walk: dict) -> list[Question]:
    """The page's check-yourself questions, from its walkthrough (the table as the learner left it)."""
    vocab = walk["vocab_size"]
    rows = [f"{t}: {word} → {label}" for t, word, label in zip(walk["positions"], walk["inputs"], walk["labels"])]
    questions = []
    some = next((t for t, p in enumerate(walk["p_label"]) if p > 0), None)  # -log 0 is not a number to type
    if some is not None:
        p, nll = walk["p_label"][some], walk["nll"][some]
        questions.append(Question(
            "nll", f"Row {rows[some]}: the true next word has p = {fmt_prob(p)}. What is -log p, the number this "
                   "position adds to the loss?", nll,
            reason=f"-log {fmt_prob(p)} = {fmt(nll)}: the natural logarithm, negated.",
            hint="use the natural logarithm (ln, not log10), then change the sign; Step 3's table has every -log p."))
    questions.append(Question(
        "uniform", f"If every row gave each of the {vocab} words the same probability, 1/{vocab}, what "
                   "would the loss be?", walk["uniform_loss"],
        reason=f"Every position would add -log(1/{vocab}) = ln {vocab}, and the mean of equal numbers is "
               "that number: the loss of a model that knows nothing.",
        hint=f"each position adds -log(1/{vocab}); the panel at the top shows this loss beside yours."))
    largest = max(walk["positions"], key=lambda t: walk["nll"][t])  # the first, when several tie
    questions.append(Question(
        "largest", "Which row adds the most to the loss? (If several tie, the first of them.)", rows[largest],
        reason=f"Its true word has the smallest probability, p = {fmt_prob(walk['p_label'][largest])}, so the "
               f"largest -log p, {fmt(walk['nll'][largest])}.",
        hint="the smaller the true word's probability, the larger its -log p: compare the ✓ cells of the table.",
        choices=tuple(rows)))
    return questions
