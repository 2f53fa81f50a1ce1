"""The Toy example's check-yourself questions, from the walkthrough and the gradient step on the learner's screen
(lmviz.core.toy.walkthrough and lmviz.core.toy.one_step).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from lmviz.core.numbers import fmt, fmt_prob
from lmviz.course.quiz import Question

# The positions the gradient questions ask about: fixed, so that a question keeps its place whatever the table.
GRADIENT_ROW, RISE_ROW = 4, 1  # RISE_ROW: where greedy decoding picks another word than the true one
SMOOTHING = 0.1  # the ε the smoothing question asks about: the options fold's first setting


def build_questions(walk: dict, step: dict) -> list[Question]:
    """The page's check-yourself questions, from its walkthrough (the table as the learner left it) and its
    gradient step (at the learning rate the learner chose)."""
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
        choices=tuple(rows),
        table=(("row", "p(true word)"), *((rows[t], fmt_prob(walk["p_label"][t])) for t in walk["positions"]))))
    return questions + gradient_questions(walk, step, rows) + smoothing_questions(walk, rows)


def gradient_questions(walk: dict, step: dict, rows: list[str]) -> list[Question]:
    n = len(walk["positions"])
    t, label = GRADIENT_ROW, walk["label_ids"][GRADIENT_ROW]
    p, entry = walk["p_label"][t], step["gradient"][t][label]
    questions = [Question(
        "gradient", f"Row {rows[t]}: the true next word has p = {fmt_prob(p)}. What is the gradient of the loss "
                    "with respect to that word's logit?", entry,
        reason=f"The true word's entry is (p − 1)/{n} = ({fmt_prob(p)} − 1)/{n} = {fmt(entry)}: negative, so "
               "raising that logit lowers the loss.",
        hint=f"the true word's entry is (p − 1)/{n}, with {n} labels in the mean; section 4's table of the "
             "gradient, folded, has every entry.")]
    t = RISE_ROW
    before, after = walk["p_label"][t], step["p_label_after"][t]
    change = "it rises" if after > before else "it falls" if after < before else "it stays the same"
    questions.append(Question(
        "rises", f"After one step at learning rate η = {step['learning_rate']:g}, what does p(label) of row "
                 f"{rows[t]} do?", change,
        reason=f"It goes from {fmt_prob(before)} to {fmt_prob(after)}. The step raises the true word's logit by "
               f"η(1 − p)/{n} and lowers every other logit by η·p/{n}, so no p(label) can fall.",
        hint="compare the true word's logit with the others after the step; section 4's table has p(label) before "
             "and after.",
        choices=("it rises", "it stays the same", "it falls")))
    return questions


def smoothing_questions(walk: dict, rows: list[str]) -> list[Question]:
    """Label smoothing on the first row whose every word has p above 0 (else its mean -log p is ∞)."""
    t = next((t for t, mean in enumerate(walk["mean_nll_all"]) if mean != float("inf")), None)
    if t is None:
        return []
    p, nll, mean, e = walk["p_label"][t], walk["nll"][t], walk["mean_nll_all"][t], SMOOTHING
    answer = (1 - e) * nll + e * mean
    # p(label), not its -log p: that is the "nll" question's answer when both ask of the same row
    return [Question(
        "smoothed", f"Row {rows[t]}: the true next word has p = {fmt_prob(p)}, and the mean -log p over all "
                    f"{walk['vocab_size']} words is {fmt(mean)}. With label smoothing ε = {e:g}, what does this row "
                    "add to the loss?",
        answer,
        reason=f"(1 − ε)·(-log p(label)) + ε·(the mean over all words) = {1 - e:g} × {fmt(nll)} + {e:g} × "
               f"{fmt(mean)} = {fmt(answer)}, with -log {fmt_prob(p)} = {fmt(nll)}.",
        hint="the target puts 1 − ε on the label and spreads ε over all the words; the fold “A trainer's "
             "options” at the end of the page has both numbers for every row.")]
