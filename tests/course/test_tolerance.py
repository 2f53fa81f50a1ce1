"""One rule for every typed answer (issue 28, point 3): the caption above each page's questions says how a number
is checked, and every number question of every page is checked that way, at the edge of its tolerance, on the
page itself. The questions are the ones each page really asks, recorded as it hands them to check_yourself."""

import math

import pytest

from lmviz.app import path
from lmviz.core.numbers import fmt
from lmviz.course import registry
from lmviz.course.quiz import ABSOLUTE_TOLERANCE, COUNT_WORDS, RELATIVE_TOLERANCE, Question, check, tolerance_for
from tests.helpers import answer_question, open_page, unescaped, verdicts

CAPTION_START = "Questions made from the numbers on this page as it is now: change the input and they change. "


@pytest.fixture
def asked(monkeypatch):
    """The questions each page hands to check_yourself, by lesson url path (the last run's)."""
    seen: dict[str, list[Question]] = {}
    real = path.check_yourself

    def recording(step_name, questions, *args, **kwargs):
        seen[step_name] = list(questions)
        return real(step_name, questions, *args, **kwargs)

    monkeypatch.setattr(path, "check_yourself", recording)  # each page imports it from the module at every run
    return seen


def typed(value: float) -> str:
    return repr(float(value))


def edges(question: Question) -> tuple[list[float], list[float]]:
    """Answers just inside the rule, and just outside it."""
    if question.is_count:  # exact: even a hundredth off is wrong, and so is the next whole number
        return [question.answer], [question.answer + ABSOLUTE_TOLERANCE, question.answer - 1]
    step = max(ABSOLUTE_TOLERANCE, RELATIVE_TOLERANCE * abs(question.answer))  # the rule, written again here
    inside = [question.answer + 0.99 * step, question.answer - 0.99 * step]
    return inside, [question.answer + 1.01 * step, question.answer - 1.01 * step]


def the_rule_holds(question: Question) -> None:
    """check() itself, at the edges, against the rule as the caption states it."""
    if question.is_count:
        assert question.answer == int(question.answer) and COUNT_WORDS in question.ask.lower()
        assert question.tolerance == 0
    else:
        assert COUNT_WORDS not in question.ask.lower()
        assert question.tolerance == tolerance_for(question.answer) >= ABSOLUTE_TOLERANCE
    inside, outside = edges(question)
    for value in inside:
        assert check(question, typed(value)).right, (question.key, value)
    for value in outside:
        assert check(question, typed(value)).right is False, (question.key, value)


def on_the_page(at, lesson: registry.Lesson, question: Question) -> None:
    """The page says Right just inside the rule and Not quite just outside it."""
    key = lesson.key(question.key)
    inside, outside = edges(question)
    answer_question(at, key, typed(inside[0]))
    assert f"Right. {question.reason}" in verdicts(at)["right"], (key, inside[0])
    answer_question(at, key, typed(outside[0]))
    said = verdicts(at)
    assert f"Not quite. Hint: {question.hint}" in said["wrong"] and f"Right. {question.reason}" not in said["right"]


def test_the_caption_states_the_rule_check_applies():
    number = Question("n", "What is -log 0.5?", math.log(2), reason="R.", hint="H.")
    count = Question("k", "How many labels?", 7, reason="R.", hint="H.", digits=0)
    rule = path.quiz.tolerance_rule([number, count])
    assert rule == ("A typed number is right within 0.01 of the answer, or within 1 % of it when the answer is above "
                    "1; the answer to a “how many” question is a count, and must be exact.")
    assert path.quiz.tolerance_rule([number]).endswith("above 1.")  # no word about counts where there are none
    # "above 1": where 1 % of the answer passes the absolute 0.01
    assert tolerance_for(1.0) == ABSOLUTE_TOLERANCE and tolerance_for(1.5) > ABSOLUTE_TOLERANCE > tolerance_for(0.9) / 2


def test_a_number_that_happens_to_be_whole_is_not_a_count():
    """The old Train question: e^(ln 193) = 193 checked exactly, so that e^5.26269 = 192.9998 was refused."""
    with pytest.raises(ValueError, match="whole number"):
        Question("perplexity", "What is the perplexity of that starting loss, ln 193?", 193.0, reason="R.",
                 hint="H.", digits=0)
    with pytest.raises(ValueError, match="how many"):
        Question("k", "What is the count?", 3, reason="R.", hint="H.", digits=0)  # a count must say it is one
    with pytest.raises(ValueError, match="how many"):
        Question("n", "How many nats is it?", 0.5, reason="R.", hint="H.")  # "how many" promises exactness
    with pytest.raises(ValueError, match="whole number"):
        Question("k", "How many?", True, reason="R.", hint="H.", digits=0)


@pytest.mark.parametrize("lesson", registry.PATH, ids=lambda lesson: lesson.stem)
def test_every_number_question_of_every_page_follows_the_caption(asked, lesson):
    at = open_page(lesson.page)
    assert not at.exception
    questions = asked[lesson.url_path]
    numbers = [q for q in questions if not q.choices]
    assert numbers, lesson.stem  # every page asks at least one typed number, so the rule is tested there
    captions = [unescaped(c.value) for c in at.caption if unescaped(c.value).startswith(CAPTION_START)]
    assert captions == [CAPTION_START + path.quiz.tolerance_rule(questions)]
    assert "counts, exactly" not in captions[0] and "of a larger answer" not in captions[0]  # the old, vague rule
    for question in numbers:
        the_rule_holds(question)
        on_the_page(at, lesson, question)
    assert not at.exception


def test_trains_starting_perplexity_takes_e_to_the_shown_loss():
    """Point 3's case on the page: ln 193 is shown as 5.26269, and a calculator's e^5.26269 = 192.99996… is right
    (it was checked exactly, as if it were a count), and so is the issue's 192.9998."""
    at = open_page("app_pages/train.py")
    start = next(t.value for t in at.text if t.value.startswith("What is the perplexity of that starting loss, ln "))
    size = int(start.rsplit(" ", 1)[1].rstrip("?"))
    typed_by_hand = math.exp(float(fmt(math.log(size))))
    assert typed_by_hand != size  # the learner's e^(shown loss) is not the exact whole number
    for given in (repr(typed_by_hand), fmt(size - 0.0002, 4)):
        answer_question(at, "train/perplexity", given)
        assert any(m.startswith(f"Right. Perplexity is e^loss, and e^(ln {size}) = {size}")
                   for m in verdicts(at)["right"]), given
