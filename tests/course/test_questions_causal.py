"""Check yourself on Next token and Chat fine-tuning loss: each expected answer computed here, from the
model's own forward pass, its own loss or plain Python, on several inputs; and each page accepts a right
answer, hints at a wrong one and reveals the answer. For Your sentence (its other questions are checked in
tests/course/test_path_and_quiz.py), what the count question's sentences name and what its hint says of the chart."""

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.numbers import fmt
from lmviz.core.text import readable_token
from lmviz.course import quiz
from lmviz.course import registry as lesson
from lmviz.course.questions import chat_loss as chat_loss_questions
from lmviz.course.questions import next_token as next_token_questions
from lmviz.lessons import chat_loss, next_token
from tests.helpers import answer_question, open_page, table_rows, verdicts

NEXT_TOKEN_PAGE, CHAT_PAGE = "app_pages/next_token.py", "app_pages/chat_loss.py"


def by_key(questions) -> dict:
    return {q.key: q for q in questions}


def the_other_temperature(temperature: float) -> float:
    """Twice T, or half of it where twice is above the slider's 2.0: written out again, not imported."""
    return 2 * temperature if 2 * temperature <= 2.0 else temperature / 2


def model_logits(loaded, text: str) -> torch.Tensor:
    """The reference: the model's own forward pass over the whole text, the last position's scores, float64."""
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([ids])).logits[0, -1].double()  # (V,)


def name(tokenizer, token_id: int) -> str:
    return f"{readable_token(tokenizer, token_id)} (id {token_id})"


# --- Next token ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, temperature, word, direction", [
    ("The capital of France is", 1.0, " Paris", "go down"),  # raised to 2: flatter
    ("Once upon a", 1.5, None, "go up"),  # lowered to 0.75: sharper
])
def test_next_token_questions_follow_the_models_logits(bundled, text, temperature, word, direction):
    tokenizer = bundled.tokenizer
    logits = next_token.next_token_logits(bundled, text)
    shown = next_token.distribution(logits, tokenizer, temperature)
    chosen = next_token.if_true_next(logits, tokenizer, word) if word else None
    questions = by_key(next_token_questions.build_questions(shown, *next_token.question_inputs(logits, tokenizer, shown,
                                                                                              chosen)))
    assert list(questions) == list(lesson.find("next-token").questions)

    z = model_logits(bundled, text)
    other = the_other_temperature(temperature)
    greedy = int(torch.softmax(z / other, -1).argmax())
    assert questions["greedy"].answer == name(tokenizer, greedy)
    assert f"{other:g} instead of {temperature:g}" in questions["greedy"].ask
    assert set(questions["greedy"].choices) >= {name(tokenizer, int(i)) for i in z.topk(4).indices}
    # a phone is shown each choice's p at the page's temperature: the largest is greedy's at every temperature
    rows = table_rows(questions["greedy"])
    assert [row["token"] for row in rows] == list(questions["greedy"].choices)
    for row in rows:
        token_id = int(re.search(r"\(id (\d+)\)$", row["token"]).group(1))
        shown_p = float(row[f"p at T = {temperature:g}"])
        assert shown_p == pytest.approx(torch.softmax(z / temperature, -1)[token_id].item(), rel=2e-3, abs=1e-6)
    assert max(rows, key=lambda row: float(row[f"p at T = {temperature:g}"]))["token"] == questions["greedy"].answer

    # the chosen word, else the runner-up stands in for the true next token
    target = tokenizer(word, add_special_tokens=False)["input_ids"][0] if word else int(z.topk(2).indices[1])
    loss = F.cross_entropy(z[None], torch.tensor([target])).item()
    assert questions["nll"].answer == pytest.approx(loss, abs=1e-4)
    asked_p = float(re.search(r"p = ([0-9.e-]+) at T = 1", questions["nll"].ask).group(1))
    assert asked_p == pytest.approx(math.exp(-loss), rel=2e-3)  # as the question writes it, 3 significant digits
    said = readable_token(tokenizer, target)
    assert questions["nll"].ask.startswith(f"The true next token you chose, {said}," if word else
                                           f"Suppose the text continued with {said}: it")

    p_now, p_other = (torch.softmax(z / t, -1)[greedy].item() for t in (temperature, other))
    assert direction == ("go down" if p_other < p_now else "go up")
    assert questions["temperature"].answer == direction


def hand_logits(tokenizer, scores: dict[int, float]) -> next_token.NextTokenLogits:
    """Scores written by hand: ``scores`` by token id, 0 for every other token of the vocabulary."""
    z = torch.zeros(len(tokenizer))
    for token_id, score in scores.items():
        z[token_id] = score
    return next_token.NextTokenLogits(model="by hand", text="the", input_ids=[2], tokens=["the"], logits=z,
                                      bos_added=False, truncated_from=None, device="cpu")


@pytest.mark.parametrize("scores, temperature, runner_up, answer", [
    ({5: 3.0, 7: 1.0}, 1.0, 7, "go down"),
    ({9: 2.0, 4: 1.5}, 2.0, 4, "go up"),  # 2.0 can only be halved
    ({3: 40.0, 8: 1.0}, 0.1, 8, "stay the same"),  # p(3) is 1.000000 at T = 0.1 and at 0.2
])
def test_next_token_questions_from_logits_written_by_hand(tiny_tokenizer, scores, temperature, runner_up, answer):
    logits = hand_logits(tiny_tokenizer, scores)
    shown = next_token.distribution(logits, tiny_tokenizer, temperature, top_k=5)
    questions = by_key(next_token_questions.build_questions(shown, *next_token.question_inputs(logits, tiny_tokenizer,
                                                                                              shown, None)))
    top = max(scores, key=scores.get)
    assert questions["greedy"].answer == name(tiny_tokenizer, top)
    denominator = sum(math.exp(scores.get(i, 0.0)) for i in range(len(tiny_tokenizer)))  # T = 1
    assert questions["nll"].answer == pytest.approx(-(scores[runner_up] - math.log(denominator)), abs=1e-12)
    other = the_other_temperature(temperature)
    p_top = [math.exp(scores[top] / t) / sum(math.exp(scores.get(i, 0.0) / t) for i in range(len(tiny_tokenizer)))
             for t in (temperature, other)]
    assert questions["temperature"].answer == answer
    assert f"{p_top[0]:.6f}" in questions["temperature"].reason and f"{p_top[1]:.6f}" in questions["temperature"].reason


def test_next_token_page_checks_hints_and_reveals(bundled):
    at = open_page(NEXT_TOKEN_PAGE)
    text, tokenizer = at.text_area(key="next_text").value, bundled.tokenizer
    z = model_logits(bundled, text)
    runner_up = int(z.topk(2).indices[1])  # no true next token chosen yet: it stands in
    loss = F.cross_entropy(z[None], torch.tensor([runner_up])).item()
    logits = next_token.next_token_logits(bundled, text)
    questions = by_key(next_token_questions.build_questions(
        next_token.distribution(logits, tokenizer),
        *next_token.question_inputs(logits, tokenizer, next_token.distribution(logits, tokenizer), None)))

    answer_question(at, "next-token/nll", fmt(loss + 0.5, 2))
    assert verdicts(at)["wrong"] == [f"Not quite. Hint: {questions['nll'].hint}"]
    answer_question(at, "next-token/nll", fmt(loss, 2))
    assert verdicts(at)["right"] == [f"Right. {questions['nll'].reason}"]
    answer_question(at, "next-token/greedy", reveal=True)
    assert verdicts(at)["revealed"] == [f"The answer: {name(tokenizer, int(z.argmax()))}. {questions['greedy'].reason}"]
    assert not at.exception

    at.slider(key="next_temperature").set_value(1.5).run()  # now the temperature would be lowered to 0.75
    asked = next(t.value for t in at.text if t.value.startswith("If the temperature were lowered from 1.5 to 0.75"))
    assert "would the probability of the most likely token" in asked
    answer_question(at, "next-token/temperature", "go up")
    assert any(v.startswith("Right. Its probability is ") for v in verdicts(at)["right"])

    greedy = int(z.argmax())
    at.selectbox(key="next_true").set_value(greedy).run()  # the learner's own true next token replaces the stand-in
    assert any(t.value.startswith(f"The true next token you chose, {readable_token(tokenizer, greedy)},")
               for t in at.text)
    answer_question(at, "next-token/nll", fmt(F.cross_entropy(z[None], torch.tensor([greedy])).item(), 2))
    assert any(v.startswith("Right. The loss of a position is -log p") for v in verdicts(at)["right"])
    assert not at.exception


# --- Chat fine-tuning loss ----------------------------------------------------------------------------

def chat_reference(loaded, user: str, answer: str, system: str | None) -> dict:
    """The count and the two losses from transformers' own chat template and the model's own loss: the
    counted labels are the tokens after the prompt (rendered with add_generation_prompt) up to and
    including the first end-of-turn token."""
    tokenizer = loaded.tokenizer
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    ids = tokenizer.apply_chat_template(messages)["input_ids"]
    start = len(tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True)["input_ids"])
    end = ids.index(tokenizer.convert_tokens_to_ids("<|im_end|>"), start) + 1
    labels = [-100] * start + ids[start:end] + [-100] * (len(ids) - end)
    with torch.no_grad():
        losses = [loaded.model(input_ids=torch.tensor([ids]), labels=torch.tensor([which])).loss.item()
                  for which in (labels, ids)]
    return {"count": end - start, "answer only": losses[0], "every token": losses[1], "positions": len(ids) - 1}


@pytest.mark.parametrize("user, answer, system, compared", [
    ("What is the capital of France?", "The capital of France is Paris.", None, "below"),
    ("What is 2+2?", "Bananas purple octopus seventeen.", None, "above"),
    ("Say hi", "Hi!", "Be terse.", "above"),
])
def test_chat_questions_follow_the_conversation(bundled, user, answer, system, compared):
    expected = chat_reference(bundled, user, answer, system)
    result = chat_loss.analyse_sft(bundled, user, answer, system)
    assert [q.key for q in chat_loss_questions.build_questions(result)] == ["count", "compare"]  # no SimPO: no pair
    questions = by_key(chat_loss_questions.build_questions(result, chat_loss.preference_losses(-6, -12, -6, -12, 3, 4)))
    assert list(questions) == list(lesson.find("chat-loss").questions)
    assert questions["count"].answer == expected["count"]
    assert f"of the {expected['positions']} positions" in questions["count"].reason
    gap = expected["answer only"] - expected["every token"]
    assert abs(gap) > 0.01 and compared == ("above" if gap > 0 else "below")  # clear of rounding, both ways
    assert questions["compare"].answer == compared
    # the reason's mean over the positions outside the answer, from the two reference losses
    rest = (expected["every token"] * expected["positions"] - expected["answer only"] * expected["count"]) / (
        expected["positions"] - expected["count"])
    mean = float(re.search(r"average -log p = ([0-9.]+)", questions["compare"].reason).group(1))
    assert mean == pytest.approx(rest, abs=1e-4)
    pulled = "down" if compared == "above" else "up"
    assert f"pulls the mean over every token {pulled}" in questions["compare"].reason
    # a phone's table is enough to count them: the answer's tokens, and the one token after them that ends its turn
    rows = table_rows(questions["count"])
    answer_rows = [n for n, row in enumerate(rows) if row["its role"] == "answer"]
    assert len(rows) == expected["positions"]
    assert rows[answer_rows[-1] + 1]["next token"] == result.chat.tokens[result.chat.end_of_turn_positions[0]]
    assert len(answer_rows) + 1 == expected["count"]


def test_the_simpo_question_is_the_published_equation_by_hand():
    """Mean log p −6/3 = −2 and −12/4 = −3: β · 1 − γ = 0.1 − 0.5 = −0.4, and −log σ(−0.4) = log(1 + e^0.4)."""
    preference = chat_loss.preference_losses(-6.0, -12.0, -5.0, -11.0, 3, 4)
    question = chat_loss_questions._simpo_question(preference)
    assert "is -2.00000 and the rejected one's -3.00000" in question.ask
    assert question.answer == pytest.approx(math.log(1 + math.exp(0.4)), abs=1e-12)
    assert question.answer == pytest.approx(-F.logsigmoid(torch.tensor(-0.4, dtype=torch.float64)).item(), abs=1e-12)
    assert quiz.check(question, "0.91302").right and not quiz.check(question, "0.51302").right  # γ left out
    assert f"NLL, {fmt(2.0)}, by default: {fmt(question.answer + 2.0)}" in question.reason  # cpo_alpha 1 × −(−2)


def test_chat_page_checks_hints_and_reveals(bundled):
    at = open_page(CHAT_PAGE)
    user, answer = at.text_input(key="chat_user").value, at.text_input(key="chat_answer").value
    expected = chat_reference(bundled, user, answer, None)
    questions = by_key(chat_loss_questions.build_questions(chat_loss.analyse_sft(bundled, user, answer)))

    answer_question(at, "chat-loss/count", str(expected["count"] + 1))
    assert verdicts(at)["wrong"] == [f"Not quite. Hint: {questions['count'].hint}"]
    answer_question(at, "chat-loss/count", str(expected["count"]))
    assert verdicts(at)["right"] == [f"Right. {questions['count'].reason}"]
    compared = "above" if expected["answer only"] > expected["every token"] else "below"
    answer_question(at, "chat-loss/compare", reveal=True)
    assert verdicts(at)["revealed"] == [f"The answer: {compared}. {questions['compare'].reason}"]
    assert not at.exception

    at.text_input(key="chat_answer").set_value("Bananas purple octopus seventeen.").run()  # now above
    answer_question(at, "chat-loss/compare", "above")
    assert any(v.startswith("Right. The answer-only loss, ") for v in verdicts(at)["right"])
    assert not at.exception


# --- Your sentence ------------------------------------------------------------------------------------

@pytest.mark.parametrize("add_bos", [False, True])
def test_your_sentence_count_names_each_token_it_speaks_of(tiny_loaded, add_bos):
    """With a start token there are two "first" tokens (the start token, and the text's own first one, which is then
    a label): the reason and the hint name which they mean, and never call both "the first"."""
    from lmviz.course.questions.your_sentence import build_questions
    from lmviz.lessons.causal_lm import analyse_clm

    result = analyse_clm(tiny_loaded, "the cat sat on a mat", add_bos=add_bos)
    text_ids = tiny_loaded.tokenizer("the cat sat on a mat", add_special_tokens=False)["input_ids"]
    assert len(result.rows) == len(text_ids) - (0 if add_bos else 1)  # the reference count: the text's tokens
    for losses_shown in (True, False):
        count = by_key(build_questions(result, losses_shown=losses_shown))["count"]
        assert count.answer == len(result.rows)
        # a phone is shown the tokens: each but the first is a label
        assert [row["token"] for row in table_rows(count)] == result.tokens
        assert len(table_rows(count)) - 1 == count.answer
        assert count.reason.startswith(f"{len(result.tokens)} tokens give {len(result.rows)} labels")
        if add_bos:
            start, text_first = result.tokens[0], result.tokens[1]
            assert start == readable_token(tiny_loaded.tokenizer, result.input_ids[0]) == "<|endoftext|>"
            assert f"except the start token, {start}, which has nothing before it" in count.reason
            assert f"every token of the text is a label, {text_first} too" in count.reason
            assert "the first" not in count.reason  # the old reason said it of the start token and of "the"
            assert losses_shown or "except the start token, which has nothing before it" in count.hint
        else:
            assert f"except the first, {result.tokens[0]}, which has nothing before it" in count.reason
            assert "start token" not in count.reason
            assert losses_shown or "except the first, which has nothing before it" in count.hint


def test_your_sentence_hint_says_what_the_chart_really_shows(bundled):
    """The chart of section 3 draws the labels in the text's order, each bar its -log p: it ranks nothing, and the
    hint says what it shows."""
    from lmviz.course.questions.your_sentence import build_questions
    from lmviz.lessons.causal_lm import analyse_clm

    text = "The capital of France is Paris."
    hint = by_key(build_questions(analyse_clm(bundled, text)))["highest"].hint
    assert hint.endswith("the chart of section 3 shows each one's -log p.") and "rank" not in hint
    at = open_page("app_pages/your_sentence.py")
    bars = next(c for c in at.get("plotly_chart") if "token_loss_bars" in str(c.proto.id))
    data = json.loads(bars.proto.spec)["data"][0]
    ids = bundled.tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = bundled.model(input_ids=torch.tensor([ids])).logits[0]
    reference = F.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]), reduction="none").tolist()
    assert data["x"] == list(range(len(reference)))  # in position order, not sorted by cost
    assert data["y"] == pytest.approx(reference, abs=1e-5)
    assert data["y"] != sorted(data["y"], reverse=True)
