"""The lesson path and the check-yourself questions: answers read and checked as a learner types
them, progress kept and carried by links, and the Toy example's questions made from its table."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from lmviz.core import toy
from lmviz.core.numbers import fmt
from lmviz.course import registry as lesson
from lmviz.course.questions import toy_example as toy_questions
from lmviz.course.quiz import Question, check, read_number, tolerance_for
from tests.helpers import APP, PAGES, answer_question, by_hand, default_page, one_sentence, open_page, verdicts

NUMBER = Question("n", "What is -log 0.5?", math.log(2), reason="Because.", hint="Use ln.")
CHOICE = Question("c", "Which?", "b", reason="Because.", hint="Look.", choices=("a", "b", "c"))


@pytest.mark.parametrize("typed, value", [("0.69", 0.69), (" 0,69 ", 0.69), ("−2", -2.0), ("-1.5e-3", -1.5e-3),
                                          ("1 000", 1000.0), ("1e300", 1e300)])
def test_numbers_are_read_as_learners_type_them(typed, value):
    assert read_number(typed) == value


@pytest.mark.parametrize("typed", ["", "   ", "abc", "nan", "NaN", "inf", "-infinity", "∞", "1e400", "0.6.9",
                                   "<b>1</b>", "x" * 10_000])
def test_what_is_not_a_finite_number_gets_one_sentence(typed):
    verdict = check(NUMBER, typed)
    assert verdict.right is None and one_sentence(verdict.message), verdict.message
    assert len(verdict.message) < 120  # a pasted novel is not repeated back


def test_the_tolerance_at_its_edges():
    answer = NUMBER.answer
    step = tolerance_for(answer)
    assert step == 0.01  # 1 % of 0.69 is below the absolute 0.01
    assert check(NUMBER, repr(answer + step * 0.999)).right
    assert check(NUMBER, repr(answer - step * 0.999)).right
    assert check(NUMBER, repr(answer + step * 1.001)).right is False
    assert check(NUMBER, repr(answer - step * 1.001)).right is False
    large = Question("p", "Perplexity?", 250.0, reason="R.", hint="H.")
    assert tolerance_for(250.0) == 2.5  # 1 % of a large answer
    assert check(large, "252.49").right and check(large, "247.51").right
    assert check(large, "252.51").right is False
    assert check(large, "1e300").right is False  # a huge number is just wrong


def test_a_choice_is_right_only_when_it_is_the_answer():
    assert check(CHOICE, "b").right and check(CHOICE, "a").right is False
    assert check(CHOICE, None).right is None
    assert "Hint: Look." in check(CHOICE, "c").message and "Because." in check(CHOICE, "b").message


def test_a_question_cannot_be_made_without_a_possible_answer():
    with pytest.raises(ValueError):
        Question("c", "Which?", "d", reason="", hint="", choices=("a", "b"))
    with pytest.raises(ValueError):
        Question("n", "How much?", math.inf, reason="", hint="")
    for table in ((("row", "p"),), (("row", "p"), ("0: the", "0.5", "extra"))):  # no row; a row wider than the header
        with pytest.raises(ValueError, match="its table needs a header and at least one row"):
            Question("n", "How much?", 1.0, reason="", hint="", table=table)


def test_the_path_follows_the_app_and_links_carry_only_its_keys():
    assert [step.page for step in lesson.PATH] == [page for page in PAGES
                                                   if page in {step.page for step in lesson.PATH}]
    assert lesson.total_questions() == len(lesson.all_keys()) >= 2 * len(lesson.PATH)
    done = {"train/start", "toy/nll", "toy/bogus", "../../etc/passwd"}
    assert lesson.read_progress(",".join(done)) == {"train/start", "toy/nll"}
    assert lesson.progress_code({"train/start", "toy/nll"}) == "toy/nll,train/start"  # in the path's order
    assert lesson.read_progress(None) == set() and lesson.read_progress("") == set()
    first, last = lesson.PATH[0], lesson.PATH[-1]
    assert lesson.neighbours(first) == (None, lesson.PATH[1]) and lesson.neighbours(last) == (lesson.PATH[-2], None)
    assert lesson.next_to_study({first.key(q) for q in first.questions}) == lesson.PATH[1]
    assert lesson.next_to_study(lesson.all_keys()) is None


@pytest.mark.parametrize("edits", [{}, {1: {"love": 0.05}}, {0: {"I": 0.0}}, {3: {"not": 1.0}, 4: {"cats": 0.999}}])
def test_toy_questions_follow_the_table(edits):
    expected = by_hand(edits)
    table = toy.probability_table()
    for row, cells in edits.items():
        for word, value in cells.items():
            table[row, toy.VOCAB.index(word)] = value
    table /= table.sum(-1, keepdim=True)
    questions = {q.key: q for q in toy_questions.build_questions(toy.walkthrough(table), toy.one_step(table, 1.0))}
    some = next(t for t, p in enumerate(expected["p_label"]) if p > 0)
    assert questions["nll"].answer == pytest.approx(-math.log(expected["p_label"][some]), abs=1e-9)
    assert "p = " in questions["nll"].ask and f"Row {some}:" in questions["nll"].ask
    assert questions["uniform"].answer == pytest.approx(math.log(10))
    largest = max(range(5), key=lambda t: expected["nll"][t])
    assert questions["largest"].answer == questions["largest"].choices[largest]
    assert set(questions) == set(lesson.find("toy").questions)


def test_toy_page_checks_hints_and_reveals():
    at = open_page("app_pages/toy_example.py")
    article = toy_questions.build_questions(toy.walkthrough(), toy.one_step(None, 1.0))  # the page's default rate
    question = {q.key: q for q in article}["nll"]
    answer_question(at, "toy/nll", "0.5")
    assert any(message.startswith("Not quite. Hint: ") for message in verdicts(at)["wrong"])
    answer_question(at, "toy/nll", fmt(question.answer, 2))
    assert f"Right. {question.reason}" in verdicts(at)["right"]
    answer_question(at, "toy/uniform", "ten")
    assert "“ten” is not a number: type digits, for example 0.69." in verdicts(at)["not an answer"]
    answer_question(at, "toy/largest", reveal=True)
    assert verdicts(at)["revealed"] == ["The answer: 1: I → love. "
                                        f"{article[2].reason}"]
    assert not at.exception
    footer = [c.value for c in at.caption if "check-yourself questions answered" in c.value]
    assert footer and footer[0].startswith(f"2 of {lesson.total_questions()} ")  # the right answer and the reveal


def test_progress_travels_in_links_and_shows_on_home():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params[lesson.ANSWERED_PARAM] = "toy/nll,toy/uniform,nonsense"
    at.run()
    home = " ".join(c.value for c in at.caption)
    assert f"2 of {lesson.total_questions()} check-yourself questions answered." in home
    assert f"Toy example 2/{len(lesson.find('toy').questions)}" in home
    links = {link.proto.label: link.proto for link in at.get("page_link")}
    assert "Continue with Toy example" in links  # its third question is still open
    at.switch_page("app_pages/your_sentence.py").run()
    footer = next(c.value for c in at.caption if "check-yourself questions answered" in c.value)
    assert footer.startswith("2 of ")
    onward = {link.proto.label: link.proto for link in at.get("page_link")}
    assert "Next: Bits per byte" in onward and "Previous: Toy example" in onward


def test_a_count_is_checked_exactly():
    count = Question("k", "How many?", 300, reason="R.", hint="H.", digits=0)
    assert check(count, "300").right and check(count, "299").right is False and check(count, "300.4").right is False
    assert count.shown_answer == "300"


@pytest.mark.parametrize("text, add_bos", [("The capital of France is Paris.", False),
                                           ("One two three four five six seven eight nine ten eleven.", True)])
def test_your_sentence_questions_follow_the_text(tiny_loaded, text, add_bos):
    from lmviz.course.questions.your_sentence import build_questions
    from lmviz.lessons.causal_lm import analyse_clm

    result = analyse_clm(tiny_loaded, text, add_bos=add_bos)
    ids = tiny_loaded.tokenizer(text)["input_ids"]
    ids = ([tiny_loaded.tokenizer.bos_token_id] if add_bos else []) + ids
    with torch.no_grad():
        logits = tiny_loaded.model(torch.tensor([ids])).logits[0, :-1]
    nll = F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")  # the reference: -log p per label
    questions = {q.key: q for q in build_questions(result)}
    assert set(questions) == set(lesson.find("sentence").questions)
    costliest = int(nll.argmax())
    assert questions["highest"].answer.startswith(f"{costliest}: ")
    assert len(questions["highest"].choices) <= 8 and questions["highest"].answer in questions["highest"].choices
    assert questions["count"].answer == len(ids) - 1
    assert questions["perplexity"].answer == pytest.approx(math.exp(nll.mean().item()), rel=1e-5)


def test_your_sentence_predict_first_hides_the_losses_until_the_guess(bundled):
    from lmviz.course.questions.your_sentence import build_questions
    from lmviz.lessons.causal_lm import analyse_clm

    at = open_page("app_pages/your_sentence.py")
    at.checkbox(key="sentence_predict").check().run()
    assert not at.exception
    headings = [h.value for h in at.subheader]
    assert "2. Predict first" in headings and "3. The loss at each position" not in headings
    assert not [chart for chart in at.get("plotly_chart")]  # no per-token chart yet
    question = {q.key: q for q in build_questions(analyse_clm(bundled, "The capital of France is Paris."))}["highest"]
    wrong = next(choice for choice in question.choices if choice != question.answer)
    answer_question(at, "sentence/highest", wrong)
    assert any(message.startswith("Not quite. Hint: ") for message in verdicts(at)["wrong"])
    assert "3. The loss at each position" not in [h.value for h in at.subheader]  # a wrong guess reveals nothing
    answer_question(at, "sentence/highest", question.answer)
    headings = [h.value for h in at.subheader]
    assert "3. The loss at each position" in headings and "2. Predict first" not in headings
    assert f"Right. {question.reason}" in verdicts(at)["right"]
    assert not at.exception


def test_your_sentence_checks_the_perplexity_of_its_own_loss(bundled):
    from lmviz.lessons.causal_lm import analyse_clm

    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input("Dogs bark at night.").run()
    expected = analyse_clm(bundled, "Dogs bark at night.")
    answer_question(at, "sentence/perplexity", str(round(expected.perplexity * 1.02, 4)))  # 2 % off: wrong
    assert any(message.startswith("Not quite. Hint: ") for message in verdicts(at)["wrong"])
    answer_question(at, "sentence/perplexity", str(round(math.exp(float(fmt(expected.loss))), 2)))
    assert any(message.startswith("Right. Perplexity = e^loss") for message in verdicts(at)["right"])
    answer_question(at, "sentence/count", reveal=True)
    assert any(v.startswith(f"The answer: {len(expected.rows)}. ") for v in verdicts(at)["revealed"])


def test_masked_lm_page_asks_how_many_positions_count():
    at = open_page("app_pages/masked_lm.py")
    counted = int(next(m.value for m in at.metric if m.label.startswith("Positions selected")))
    answer_question(at, "masked-lm/count", str(counted + 1))
    assert any(message.startswith("Not quite. Hint: ") for message in verdicts(at)["wrong"])
    answer_question(at, "masked-lm/count", str(counted))
    assert any(message.startswith("Right. Only the ") for message in verdicts(at)["right"])
    answer_question(at, "masked-lm/count", reveal=True)
    assert any(v.startswith(f"The answer: {counted}. ") for v in verdicts(at)["revealed"])


@pytest.mark.parametrize("step", lesson.PATH, ids=[step.url_path for step in lesson.PATH])
def test_each_page_asks_its_own_questions_and_no_others(step):
    at = default_page(step.page)
    asked = {box.key.removeprefix(f"quiz-answer-{step.url_path}/") for box in [*at.text_input, *at.radio]
             if box.key and box.key.startswith("quiz-answer-")}
    assert asked <= set(step.questions) and len(asked) >= 2


@pytest.mark.parametrize("step", lesson.PATH, ids=[step.url_path for step in lesson.PATH])
def test_bad_input_in_an_answer_box_gets_a_sentence_on_every_page(step):
    at = open_page(step.page)
    boxes = [box.key for box in at.text_input if box.key and box.key.startswith(f"quiz-answer-{step.url_path}/")]
    assert boxes, "every page asks at least one number"
    key = boxes[0].removeprefix("quiz-answer-")
    for typed in ["", "twelve", "nan", "∞", "1e999", "-inf"]:
        answer_question(at, key, typed)
        assert not at.exception
        said = verdicts(at)["not an answer"]
        assert any(message.startswith(("Type a number first", "Type a finite number", f"“{typed}” is not a number"))
                   for message in said), (typed, said)
    answer_question(at, key, "1e300")  # a number, only a wrong one
    assert any(message.startswith("Not quite. Hint: ") for message in verdicts(at)["wrong"])


def as_read(home: str) -> str:
    """A Home paragraph as the reader sees its words: each [[word|entry]] mark is the word."""
    return re.sub(r"\[\[(.+?)\|(.+?)\]\](?!\])", r"\1", home)


def test_your_sentence_line_counts_predicted_tokens(tiny_loaded):
    """Issue 28, point 17: one -log p per predicted token, not per token (the first has nothing before it)."""
    from lmviz.lessons.causal_lm import analyse_clm

    learn = lesson.find("sentence").learn
    assert "one -log p per predicted token" in learn and "one -log p per token," not in learn
    text = "The capital of France is Paris."
    result = analyse_clm(tiny_loaded, text, add_bos=False)
    ids = tiny_loaded.tokenizer(text)["input_ids"]
    assert len(result.rows) == len(ids) - 1 < len(ids)  # one -log p per predicted token: fewer than the tokens
    assert result.loss == pytest.approx(sum(r.nll for r in result.rows) / (len(ids) - 1), rel=1e-6)


def test_masked_lm_line_and_home_say_the_kept_positions_are_scored(tiny_bert_loaded):
    """Issue 28, point 17: not "scored only where it had to guess": a selected token left as it was is scored too,
    as Hugging Face's DataCollatorForLanguageModeling labels every selected position (labels[~selected] = -100)."""
    from lmviz.core.labels import IGNORE_INDEX, Branch
    from lmviz.lessons.bert import analyse_mlm

    step = lesson.find("masked-lm")
    home = as_read(step.home)
    assert "only where it had to guess" not in step.learn and "scored only those positions" not in home
    assert "is scored at every selected one, hidden or not" in step.learn
    assert "predict the original at each selected position, the unchanged ones too" in home
    text = "the cat saw a big red bird and the dog ran to the park near the blue mat"
    analyses = (analyse_mlm(tiny_bert_loaded, text, seed=seed) for seed in range(200))
    result = next(r for r in analyses if any(row.branch == Branch.KEPT for row in r.rows))  # a seed that keeps one
    kept = [row for row in result.rows if row.branch == Branch.KEPT]
    assert all(row.label == row.token_id != IGNORE_INDEX and row.shown == row.token for row in kept)
    scored = [row for row in result.rows if row.label != IGNORE_INDEX]
    assert set(map(id, kept)) <= set(map(id, scored))
    assert result.loss == pytest.approx(sum(row.nll for row in scored) / len(scored), rel=1e-6)
    assert result.loss_model == pytest.approx(result.loss, abs=1e-5)  # the model's own loss, on the same labels


def test_chat_line_and_home_say_answer_only_is_a_choice_and_count_the_end_of_turn_token(bundled):
    """Issue 28, point 7: answer-only labels are a choice (TRL's SFTTrainer trains on every token of a plain
    conversation by default), and lmviz counts the answer with its end-of-turn token, which the lines left out."""
    from lmviz.core.labels import IGNORE_INDEX
    from lmviz.lessons.chat_loss import chat_tokens

    step = lesson.find("chat-loss")
    assert "scores only the answer's tokens" not in step.learn and "counts only the answer" not in step.heading
    assert "every token it predicts or, by choice, only the answer and its end-of-turn token" in step.learn
    home = as_read(step.home)
    assert "Counting only the answer is a choice, not what fine-tuning always does" in home
    assert "lmviz counts the answer's tokens and its end-of-turn token" in home
    chat = chat_tokens(bundled.tokenizer, "What is the capital of France?", "Paris.")
    counted = [p for p, label in enumerate(chat.labels) if label != IGNORE_INDEX]
    assert counted == chat.answer_positions + chat.end_of_turn_positions
    assert bundled.tokenizer.decode([chat.input_ids[p] for p in chat.answer_positions]) == "Paris."
    # SmolLM2's end of turn: nothing between the answer and <|im_end|>, which is counted, last
    assert chat.end_of_turn_positions == [chat.answer_positions[-1] + 1]
    assert chat.input_ids[counted[-1]] == bundled.tokenizer.convert_tokens_to_ids("<|im_end|>")
