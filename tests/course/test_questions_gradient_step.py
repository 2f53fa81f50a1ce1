"""One step of learning's questions, their answers worked out by hand from the records they are built from."""

from types import SimpleNamespace

import pytest

from lmviz.course import quiz
from lmviz.course.questions.gradient_step import FALLS, RISES, build_questions


def gradient(probs: list[float]):
    """A LogitGradient's fields the questions read, for labels of these p (the other entries left out)."""
    n = len(probs)
    rows = [SimpleNamespace(position=t, target_token=f"tok{t}", prob=p, label_entry=(p - 1) / n,
                            row_norm=(1 - p) / n) for t, p in enumerate(probs)]
    return SimpleNamespace(rows=rows, count=n, vocab_size=49_152)


def steps(before: list[float], after: list[float], lr: float = 1e-3):
    rows = [SimpleNamespace(position=t, target_token=f"tok{t}", prob_before=b, prob_after=a)
            for t, (b, a) in enumerate(zip(before, after))]
    return SimpleNamespace(lr=lr, text=SimpleNamespace(rows=rows))


def by_key(questions) -> dict:
    return {q.key: q for q in questions}


def test_the_label_entry_is_asked_where_the_push_is_largest_and_is_p_minus_1_over_n():
    asked = by_key(build_questions(gradient([0.9, 0.05, 0.5]), steps([0.5], [0.6])))["label_entry"]
    assert "position 1" in asked.ask and "N = 3" in asked.ask
    assert asked.answer == pytest.approx((0.05 - 1) / 3)  # -0.31667
    assert quiz.check(asked, "-0.3167").right and not quiz.check(asked, "0").right
    assert not quiz.check(asked, "0.3167").right  # the sign is the point: the loss falls as the label's logit rises
    # issue 39: a step moves weights; the reason said "a step down the gradient raises the label's logit"
    assert "the loss falls as the label's logit rises" in asked.reason
    assert "raises the label's logit" not in asked.reason
    assert "The step itself changes weights; the logit changes because they did." in asked.reason


def test_a_row_adds_up_to_zero():
    asked = by_key(build_questions(gradient([0.3, 0.7]), steps([0.5], [0.6])))["row_sum"]
    assert asked.answer == 0.0 and quiz.check(asked, "0").right and not quiz.check(asked, "1").right
    # issue 39: the reason said the step takes from the other tokens' logits and gives to the label's
    assert "logits it gives" not in asked.reason and "changes none of its probabilities" in asked.reason


@pytest.mark.parametrize(("before", "after", "answer"), [([0.1, 0.5], [0.12, 0.9], RISES),
                                                         ([0.1, 0.5], [0.12, 0.2], FALLS)])
def test_rise_or_fall_is_asked_of_the_label_that_moved_most(before, after, answer):
    asked = by_key(build_questions(gradient([0.5, 0.5]), steps(before, after)))["rises"]
    assert "position 1" in asked.ask and asked.answer == answer
    # issue 39: a small step lowers the mean loss, not every label's: the reason said it "makes the labels more likely"
    assert "makes the labels more likely" not in asked.reason
    assert "lowers the mean loss" in asked.reason or "It fell" in asked.reason
