"""RL fine-tuning's questions, their answers worked out by hand from the records they are built from (the library's
own records on numbers, no model)."""

import math
from types import SimpleNamespace

import pytest

from lmviz.course import quiz
from lmviz.course.questions.grpo import LESS, MORE, SAME, SPLIT_GENERATION, build_questions, reward_text
from lmviz.lessons.grpo import SAMPLE_STD, advantages, bradley_terry, group_loss, leave_one_out
from tests.helpers import table_rows


def step_on(lengths: list[int], updates: int = 1):
    """A GrpoStep's fields the questions read: the loss at the first update, every answer log π = -1 per token, and
    at a second one, where the first answer's tokens have moved: log π_θ = −0.5 (ratio e^0.5 = 1.65, A = +1: held
    by the clip) and the others' −1.1 (ratio 0.905, A = −1/3: inside [0.8, 1.2])."""
    logps = [[-1.0] * n for n in lengths]
    adv = [1.0] + [-1 / 3] * (len(lengths) - 1)
    first = SimpleNamespace(start=group_loss(logps, logps, adv))
    moved = [[-0.5] * lengths[0]] + [[-1.1] * n for n in lengths[1:]]
    second = SimpleNamespace(start=group_loss(moved, logps, adv))
    return SimpleNamespace(before=first.start, updates=[first, second][:updates])


def by_key(questions) -> dict:
    return {q.key: q for q in questions}


def asked(rewards=(1, 1, 0, 0), lengths=(3, 5, 2, 4), chosen=2.0, rejected=0.5, updates=1) -> dict:
    return by_key(build_questions(advantages(list(rewards), SAMPLE_STD), step_on(list(lengths), updates),
                                  bradley_terry(chosen, rejected)))


def test_the_advantage_is_asked_with_the_sample_std_of_the_largest_advantage():
    question = asked(rewards=(1, 0, 0, 0))["advantage"]
    # mean 0.25; Σ (R − mean)² = 0.5625 + 3 · 0.0625 = 0.75; sample std √(0.75 / 3) = 0.5; answer 1: 0.75 / 0.5
    assert "Answer 1 " in question.ask and question.answer == pytest.approx(1.5)
    assert quiz.check(question, "1.5").right and not quiz.check(question, "1.732").right  # ÷ the population std
    assert not quiz.check(question, "0.75").right  # R − mean alone (Dr. GRPO)


def test_two_right_and_two_wrong_is_plus_or_minus_0_866_with_the_sample_std():
    assert asked()["advantage"].answer == pytest.approx(math.sqrt(3) / 2)  # 0.5 / √(1 / 3)


def test_a_group_of_equal_rewards_has_the_advantage_0_and_says_it_teaches_nothing():
    question = asked(rewards=(1, 1, 1))["advantage"]
    assert question.answer == 0.0 and "teaches nothing" in question.reason and quiz.check(question, "0").right


def test_rloo_is_two_right_of_eights_0_857143_by_hand():
    question = asked(rewards=(0, 1, 1, 0, 0, 0, 0, 0), lengths=(3,) * 8)["rloo"]
    # answer 2, the first rewarded: 1 − (the other right one's 1) / 7 = 6/7, which is 8/7 × (1 − 2/8)
    assert "Answer 2 has the reward 1;" in question.ask and "add up to 1." in question.ask
    assert "1.00000" not in question.ask + question.reason  # a reward as the page writes it: "reward 1"
    assert question.answer == pytest.approx(6 / 7) and quiz.check(question, "0.857143").right
    assert not quiz.check(question, "0.75").right  # R − mean, GRPO's without the std: RLOO's is G/(G − 1) of it


@pytest.mark.parametrize("rewards", [(1, 0, 0, 0), (0.5, -1.0, 2.0), (3, 3, 3), (0, 1)])
def test_rloos_answer_is_the_librarys_leave_one_out(rewards):
    question = asked(rewards=rewards, lengths=(2,) * len(rewards))["rloo"]
    at = int(question.ask.split()[1]) - 1
    assert question.answer == pytest.approx(leave_one_out(list(rewards))[at], abs=1e-12)


def test_the_first_ratio_is_1():
    question = asked()["first_ratio"]
    assert question.answer == 1.0 and quiz.check(question, "1").right and not quiz.check(question, "0").right
    assert "at every step" in question.reason
    # the ratio leaves 1 after any optimizer step since sampling: another update on the answers, or a generation
    # split over several steps (tests/lessons/test_grpo_trl.py reads TRL's condition for it)
    assert "used for another update (num_iterations above 1)" in question.reason
    assert f"one generation is split over several optimizer steps. {SPLIT_GENERATION}" in question.reason
    assert "second_update_clipped" not in asked()  # one update: nothing for the clip to do


def test_at_the_second_update_the_clip_holds_the_first_answers_tokens():
    """By hand: answer 1's 3 tokens have r = e^0.5 = 1.649 > 1.2 with A > 0, each held; the others' r = e^−0.1 =
    0.905 is inside [0.8, 1.2], none held: 3 of the 14 tokens."""
    question = asked(updates=2)["second_update_clipped"]
    assert question.answer == 3 and "of the group's 14 tokens" in question.ask
    assert quiz.check(question, "3").right and not quiz.check(question, "14").right
    assert "0 with r below 1 − ε = 0.8 and A < 0, and 3 with r above 1 + ε = 1.2 and A > 0" in question.reason
    # what a phone shows under the question is enough to count them: the clip holds r > 1.2 where A > 0 and
    # r < 0.8 where A < 0
    rows = table_rows(question)
    assert [row["tokens"] for row in rows] == ["3", "5", "2", "4"]
    held = sum(int(row["r above 1.2"]) if float(row["A"]) > 0 else int(row["r below 0.8"]) for row in rows)
    assert held == question.answer


def test_with_clip_higher_the_second_update_counts_ratios_above_1_plus_epsilon_high():
    """By hand: answer 1's 3 tokens at r = e^0.22 = 1.246 with A > 0: above 1 + ε = 1.2 but not above 1 + ε high =
    1.28, so TRL's is_high_clipped (coef_1 > 1 + epsilon_high) holds none; its tokens at e^0.3 = 1.35 would be."""
    logps = [[-1.0] * n for n in (3, 5, 2, 4)]
    adv = [1.0, -1 / 3, -1 / 3, -1 / 3]
    for moved, held in ((0.22, 0), (0.3, 3)):
        second = group_loss([[-1.0 + moved] * 3] + logps[1:], logps, adv, 0.2, 0.28)
        step = SimpleNamespace(before=group_loss(logps, logps, adv),
                               updates=[SimpleNamespace(start=None), SimpleNamespace(start=second)])
        question = by_key(build_questions(advantages([1, 0, 0, 0], SAMPLE_STD), step,
                                          bradley_terry(2.0, 0.5)))["second_update_clipped"]
        assert question.answer == held
        assert f"{held} with r above 1 + ε high = 1.28 and A > 0" in question.reason
        assert "r below 1 − ε = 0.8" in question.reason


def test_a_reward_is_written_as_the_page_writes_it():
    assert (reward_text(1.0), reward_text(0.0), reward_text(0.5), reward_text(-2.0)) == ("1", "0", "0.50000", "-2")
    question = asked(rewards=(1, 0, 0, 0))["advantage"]
    assert "has the reward 1, and" in question.ask and "(1 − 0.25000)" in question.reason
    rloo = asked(rewards=(0.5, -1.0, 2.0), lengths=(2, 2, 2))["rloo"]  # answer 3's 2 against 0.5 − 1
    assert "Answer 3 has the reward 2;" in rloo.ask and "add up to -0.50000." in rloo.ask


@pytest.mark.parametrize(("lengths", "answer"), [((3, 5, 2, 4), LESS), ((4, 4, 4, 4), SAME)])
def test_a_longer_answers_token_weighs_less_under_grpo(lengths, answer):
    question = asked(lengths=lengths)["weights"]
    assert question.answer == answer and MORE in question.choices
    if answer == LESS:  # answer 2 (5 tokens) against answer 3 (2): 1 / (4 · 5) against 1 / (4 · 2)
        assert "answer 2 (5 tokens)" in question.ask and "answer 3 (2 tokens)" in question.ask


def test_the_bradley_terry_loss_is_minus_log_sigmoid_of_the_margin():
    question = asked(chosen=2.0, rejected=0.5)["bradley_terry"]
    assert question.answer == pytest.approx(math.log1p(math.exp(-1.5)))  # 0.20141
    assert quiz.check(question, "0.2014").right and not quiz.check(question, "1.5").right


def test_the_phones_table_counts_the_ratios_below_the_clip_range_too():
    """By hand: every answer's tokens moved to log π = −1.5 from −1: r = e^−0.5 = 0.607 < 0.8, held where A < 0 (the
    11 tokens of answers 2 to 4), not where A > 0 (answer 1's 3). The table lists each answer's count on each side."""
    logps = [[-1.0] * n for n in (3, 5, 2, 4)]
    second = group_loss([[-1.5] * len(row) for row in logps], logps, [1.0, -1 / 3, -1 / 3, -1 / 3])
    step = SimpleNamespace(before=group_loss(logps, logps, [1.0, -1 / 3, -1 / 3, -1 / 3]),
                           updates=[SimpleNamespace(start=None), SimpleNamespace(start=second)])
    question = by_key(build_questions(advantages([1, 0, 0, 0], SAMPLE_STD), step,
                                      bradley_terry(2.0, 0.5)))["second_update_clipped"]
    rows = table_rows(question)
    assert [(row["r below 0.8"], row["r above 1.2"]) for row in rows] == [("3", "0"), ("5", "0"), ("2", "0"),
                                                                         ("4", "0")]
    held = sum(int(row["r above 1.2"]) if float(row["A"]) > 0 else int(row["r below 0.8"]) for row in rows)
    assert held == question.answer == 11
