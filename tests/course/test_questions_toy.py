"""The Toy example's gradient questions (lmviz.course.questions.toy_example): their answers against a hand
computation and torch's SGD, for edited tables and rates, and on the page as the learner answers them."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz.core import toy
from lmviz.course.questions.toy_example import build_questions
from tests.helpers import LABELS, answer_question, by_hand, open_page, table_rows, verdicts

CERTAIN = {t: {w: float(w == toy.VOCAB[LABELS[t]]) for w in toy.VOCAB} for t in range(5)}


def questions_for(edits: dict, rate: float) -> dict:
    table = torch.tensor(by_hand(edits)["rows"], dtype=torch.float64)
    return {q.key: q for q in build_questions(toy.walkthrough(table), toy.one_step(table, rate))}


def p_label_after_sgd(edits: dict, rate: float) -> list[float]:
    z = torch.tensor(by_hand(edits)["rows"], dtype=torch.float64).log().requires_grad_()
    F.cross_entropy(z, torch.tensor(LABELS)).backward()
    torch.optim.SGD([z], lr=rate).step()
    return torch.softmax(z.detach(), -1)[range(5), LABELS].tolist()


@pytest.mark.parametrize("rate", [0.1, 1.0, 30.0])
@pytest.mark.parametrize("edits", [{}, {4: {"cats": 0.0}}, {1: {"love": 0.0}}, {0: {"I": 5.0}}, CERTAIN])
def test_the_gradient_questions_follow_the_table_and_the_rate(edits, rate):
    questions, expected = questions_for(edits, rate), by_hand(edits)
    p = expected["p_label"][4]
    assert questions["gradient"].answer == pytest.approx((p - 1) / 5, abs=1e-15)  # row 4's true word: (p − 1)/5
    assert questions["gradient"].ask.startswith("Row 4: not → cats: the true next word has p = ")
    before, after = expected["p_label"][1], p_label_after_sgd(edits, rate)[1]
    moved = "it rises" if after > before + 1e-12 else "it stays the same"  # a p of 0 or 1 cannot move
    assert math.isclose(after, before, abs_tol=1e-12) == (moved == "it stays the same")
    assert questions["rises"].answer == moved and f"η = {rate:g}" in questions["rises"].ask


def test_a_learner_answers_the_gradient_questions_on_the_page():
    at = open_page("app_pages/toy_example.py")
    answer_question(at, "toy/gradient", "-0.4")  # (0.6 − 1), forgetting to divide by the 5 labels
    assert any(message.startswith("Not quite. Hint: the true word's entry is (p − 1)/5") for message in
               verdicts(at)["wrong"])
    answer_question(at, "toy/gradient", "-0.08")
    assert any(message.startswith("Right. The true word's entry is (p − 1)/5 = (0.600000 − 1)/5 = -0.08000")
               for message in verdicts(at)["right"])
    at.select_slider(key="toy_learning_rate").set_value(10.0).run()
    after = p_label_after_sgd({}, 10.0)[1]
    answer_question(at, "toy/rises", reveal=True)
    assert any(message.startswith(f"The answer: it rises. It goes from 0.300000 to {after:.6f}.")
               for message in verdicts(at)["revealed"])
    assert not at.exception


@pytest.mark.parametrize("edits", [{}, {4: {"cats": 0.0}}, {1: {"love": 0.0}}, {0: {"I": 5.0}}])
def test_a_phone_finds_the_costliest_row_from_the_question_s_table(edits):
    """What a phone in a live class shows under "which row adds the most?": each row's p(true word); the smallest
    (the first of equal ones) is the answer."""
    question = questions_for(edits, 1.0)["largest"]
    rows = table_rows(question)
    assert [row["row"] for row in rows] == list(question.choices)
    assert min(rows, key=lambda row: float(row["p(true word)"]))["row"] == question.answer


@pytest.mark.parametrize("edits, row", [({}, 0), ({0: {"am": 0.0}}, 1), ({4: {"cats": 2.0}}, 0)])
def test_the_smoothing_question_is_pytorchs_label_smoothed_loss_of_its_row(edits, row):
    """Row 0 unless one of its words has p = 0 (its mean -log p would be ∞): then the next row."""
    question = questions_for(edits, 1.0)["smoothed"]
    z = torch.tensor(by_hand(edits)["rows"], dtype=torch.float64).log()
    expected = F.cross_entropy(z[row:row + 1], torch.tensor(LABELS[row:row + 1]), label_smoothing=0.1)
    assert question.answer == pytest.approx(expected.item(), abs=1e-12)
    assert question.ask.startswith(f"Row {row}: ") and "ε = 0.1" in question.ask


def test_with_a_zero_in_every_row_there_is_no_smoothing_question():
    assert "smoothed" not in questions_for({t: {"<s>": 0.0} for t in range(5)}, 1.0)
