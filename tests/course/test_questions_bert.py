"""Check-yourself questions of the BERT pages (Masked LM, Next sentence, BERT pre-training loss): each
expected answer is worked out here from the model's own outputs by hand, on more than one input, and the
two pages that ask them accept a right answer, hint at a wrong one and reveal the answer."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.masking import create_mlm_mask
from lmviz.core.numbers import fmt
from lmviz.course import registry as lesson
from lmviz.course.questions import bert_loss as bert_loss_questions
from lmviz.course.questions import masked_lm as masked_lm_questions
from lmviz.course.questions import next_sentence as nsp_questions
from lmviz.lessons.bert import MAX_PAIR_TOKENS, analyse_bert_loss, analyse_mlm, analyse_mlm_at, analyse_nsp
from tests.helpers import answer_question, open_page, table_rows, verdicts

STORY = "anna and ben went to the park . anna saw a red fox near the pond ."
PAIRS = [("anna went to the park .", "she saw a red fox .", True),
         ("ben ate an apple .", "the pond was cold .", False)]


@pytest.fixture(scope="module")
def bert():
    """The pages' BERT: lmviz's shipped tiny one (conftest.py keeps the hub cache empty)."""
    from lmviz.models.loading import load_bert

    return load_bert()


def keyed(questions) -> dict:
    return {q.key: q for q in questions}


def own_heads(bert, a: str, b: str, masked_ids=None):
    """BertForPreTraining's two outputs on the pair, run here without lmviz: (encoding, MLM logits, NSP logits)."""
    enc = bert.tokenizer(a, b, truncation=True, max_length=MAX_PAIR_TOKENS, return_tensors="pt")
    with torch.no_grad():
        out = bert.model(input_ids=enc["input_ids"] if masked_ids is None else masked_ids,
                         attention_mask=enc["attention_mask"], token_type_ids=enc["token_type_ids"])
    return enc, out.prediction_logits.float(), out.seq_relationship_logits[0].float()


@pytest.mark.parametrize("a, b, follows", PAIRS)
def test_nsp_questions_follow_the_pair_and_its_label(bert, a, b, follows):
    _, _, (logit_a, logit_b) = own_heads(bert, a, b)
    logit_a, logit_b = float(logit_a), float(logit_b)
    p_next = 1 / (1 + math.exp(logit_b - logit_a))  # the softmax of two scores, by hand
    label = 0 if follows else 1  # Hugging Face's convention: 0 = B follows A
    loss = -math.log(p_next if follows else 1 - p_next)
    questions = keyed(nsp_questions.build_questions(analyse_nsp(bert, a, b, follows)))
    assert set(questions) == set(lesson.find("nsp").questions)
    assert questions["probability"].answer == pytest.approx(p_next, abs=1e-5)
    said = re.search(r"a = (\S+) \(B follows A\) and b = (\S+) \(B does not\)", questions["probability"].ask)
    assert [float(v) for v in said.groups()] == pytest.approx([logit_a, logit_b], abs=1e-5)
    assert questions["loss"].answer == pytest.approx(loss, abs=1e-5)
    assert f"the label is {label}: B {'follows' if follows else 'does not follow'} A." in questions["loss"].ask
    flipped = keyed(nsp_questions.build_questions(analyse_nsp(bert, a, b, not follows)))["loss"]
    assert flipped.answer == pytest.approx(-math.log(1 - p_next if follows else p_next), abs=1e-5)


def own_bert_loss(bert, a: str, b: str, follows: bool, seed: int):
    """The masked-LM and next-sentence losses of the masked pair, from the model's logits by torch alone."""
    enc = bert.tokenizer(a, b, truncation=True, max_length=MAX_PAIR_TOKENS, return_tensors="pt")
    # the masking is drawn as analyse_bert_loss draws it (BERT's 15 %, 80/10/10, at least one position)
    mask = create_mlm_mask(enc["input_ids"], bert.tokenizer.mask_token_id, bert.model.config.vocab_size, 0.15, 0.1,
                           0.1, special_token_ids=bert.tokenizer.all_special_ids, seed=seed, min_selected=1)
    _, mlm_logits, nsp_logits = own_heads(bert, a, b, mask.masked_input_ids)
    labels = enc["input_ids"].masked_fill(~mask.masked_positions, -100)
    mlm = F.cross_entropy(mlm_logits.view(-1, mlm_logits.shape[-1]), labels.view(-1), ignore_index=-100).item()
    nsp = F.cross_entropy(nsp_logits[None], torch.tensor([0 if follows else 1])).item()
    return mlm, nsp


@pytest.mark.parametrize("a, b, follows, seed, weights", [
    (*PAIRS[0], 0, (1.0, 1.0)), (*PAIRS[1], 3, (0.5, 2.0)), (*PAIRS[0], 1, (2.0, 0.1)), (*PAIRS[1], 0, (0.0, 0.0))])
def test_bert_loss_questions_follow_the_pair_and_the_weights(bert, a, b, follows, seed, weights):
    mlm, nsp = own_bert_loss(bert, a, b, follows, seed)
    mlm_part, nsp_part = weights[0] * mlm, weights[1] * nsp
    questions = keyed(bert_loss_questions.build_questions(analyse_bert_loss(bert, a, b, follows, seed, *weights)))
    assert set(questions) == set(lesson.find("bert-loss").questions)
    assert questions["total"].answer == pytest.approx(mlm_part + nsp_part, abs=1e-4)
    said = re.fullmatch(r"The masked-LM loss is (\S+), weighted (\S+), and the next-sentence loss is (\S+), "
                        r"weighted (\S+)\. What is BERT's pre-training loss\?", questions["total"].ask)
    assert [float(v) for v in said.groups()] == pytest.approx([mlm, weights[0], nsp, weights[1]], abs=1e-5)
    larger = questions["larger"]
    if mlm_part == nsp_part == 0:
        assert larger.answer == "both the same"
    else:
        assert abs(mlm_part - nsp_part) > 1e-3  # far enough apart for float32 to rank them as torch does
        assert larger.answer == ("masked LM" if mlm_part > nsp_part else "next sentence")
    # a phone is shown each part's loss and weight: enough to rank the weighted parts
    parts = {row["part"]: float(row["loss"]) * float(row["weight"]) for row in table_rows(larger)}
    assert parts == pytest.approx({"masked LM": mlm_part, "next sentence": nsp_part}, abs=1e-4)


def test_bert_loss_questions_rank_the_weighted_parts_not_the_bare_losses(bert):
    a, b, follows = PAIRS[0]
    mlm, nsp = own_bert_loss(bert, a, b, follows, 0)
    # the smaller loss weighted to twice the larger one: it is then the part that adds more
    weights = (1.0, 2 * mlm / nsp) if nsp < mlm else (2 * nsp / mlm, 1.0)
    larger = keyed(bert_loss_questions.build_questions(analyse_bert_loss(bert, a, b, follows, 0, *weights)))["larger"]
    assert larger.answer == ("next sentence" if nsp < mlm else "masked LM")


def kept_by_hand(bert, text: str, seed: int, keep: float):
    """Masking every token, no random ones: the kept positions are where the model reads the original token."""
    ids = bert.tokenizer(text, truncation=True, max_length=MAX_PAIR_TOKENS, return_tensors="pt")["input_ids"]
    mask = create_mlm_mask(ids, bert.tokenizer.mask_token_id, bert.model.config.vocab_size, 1.0, 0.0, keep,
                           special_token_ids=bert.tokenizer.all_special_ids, seed=seed)
    ids, shown, labels = ids[0].tolist(), mask.masked_input_ids[0].tolist(), mask.labels[0].tolist()
    name = lambda t: f"{t}: {bert.tokenizer.decode([ids[t]])}"  # noqa: E731
    selected = [t for t in range(len(ids)) if labels[t] != -100]
    kept = [t for t in selected if shown[t] == ids[t]]
    return len(selected), [name(t) for t in selected if t not in kept[1:]], name(kept[0]) if kept else None


@pytest.mark.parametrize("text, seed", [(STORY, 0), (STORY, 1), ("ben saw the red fox .", 2)])
def test_mlm_questions_follow_the_mask(bert, text, seed):
    count, offered, kept = kept_by_hand(bert, text, seed, keep=0.5)
    analysis = analyse_mlm(bert, text, seed, 1.0, 0.0, 0.5)
    questions = keyed(masked_lm_questions.build_questions(analysis))
    assert set(questions) == set(lesson.find("masked-lm").questions)
    assert questions["mean"].answer == pytest.approx(analysis.loss_model, abs=1e-5)  # the model's own loss
    assert questions["count"].answer == count == len(text.split())  # a rate of 1 selects every word
    assert kept is not None and len(offered) > 1  # these seeds draw a kept position and another one
    assert questions["kept"].answer == kept and list(questions["kept"].choices) == offered
    # what a phone is shown: every position's label, and what the offered positions read
    assert sum(row["label"] != "-100" for row in table_rows(questions["count"])) == count
    reads_its_own = [row for row in table_rows(questions["kept"]) if row["the token"] == row["what the model reads"]]
    assert [f"{row['position']}: {row['the token']}" for row in reads_its_own] == [kept]


def test_mlm_questions_count_the_chosen_positions_and_leave_out_kept_when_none_is(bert):
    for positions in ([1, 3], [2, 4, 5, 7]):
        questions = keyed(masked_lm_questions.build_questions(analyse_mlm_at(bert, STORY, positions)))
        assert questions["count"].answer == len(positions) and "kept" not in questions  # [MASK] at every one
    questions = keyed(masked_lm_questions.build_questions(analyse_mlm(bert, STORY, 0, 1.0, 0.0, 1.0)))
    assert questions["count"].answer == len(STORY.split()) and "kept" not in questions  # all kept: no other choice


def test_next_sentence_page_checks_hints_and_reveals(bert):
    at = open_page("app_pages/next_sentence.py")
    a, b = at.text_input(key="nsp_a").value, at.text_input(key="nsp_b").value
    questions = keyed(nsp_questions.build_questions(analyse_nsp(bert, a, b, True)))
    answer_question(at, "nsp/probability", fmt(questions["probability"].answer, 2))
    assert f"Right. {questions['probability'].reason}" in verdicts(at)["right"]
    answer_question(at, "nsp/loss", fmt(questions["loss"].answer + 0.5, 2))
    assert verdicts(at)["wrong"] == [f"Not quite. Hint: {questions['loss'].hint}"]
    at.radio(key="nsp_follows").set_value("no").run()  # the other label: the loss question follows it
    loss = next(m.value for m in at.metric if m.label == "Next-sentence loss")
    answer_question(at, "nsp/loss", reveal=True)
    [revealed] = verdicts(at)["revealed"]
    assert revealed.startswith(f"The answer: {loss}. ") and "B does not follow A" in revealed
    assert not at.exception


def test_bert_loss_page_checks_hints_and_reveals(bert):
    at = open_page("app_pages/bert_loss.py")
    a, b = at.text_input(key="bert_a").value, at.text_input(key="bert_b").value
    questions = keyed(bert_loss_questions.build_questions(analyse_bert_loss(bert, a, b, True, 0)))
    answer_question(at, "bert-loss/total", fmt(questions["total"].answer, 2))
    assert f"Right. {questions['total'].reason}" in verdicts(at)["right"]
    wrong = next(c for c in questions["larger"].choices if c != questions["larger"].answer)
    answer_question(at, "bert-loss/larger", wrong)
    assert verdicts(at)["wrong"] == [f"Not quite. Hint: {questions['larger'].hint}"]
    at.slider(key="bert_nsp_weight").set_value(0.0).run()  # the NSP part drops out: the total is the MLM loss
    metrics = {m.label: m.value for m in at.metric}
    answer_question(at, "bert-loss/total", reveal=True)
    [revealed] = verdicts(at)["revealed"]
    assert revealed.startswith(f"The answer: {metrics['Masked-LM loss']}. ") and metrics["Total"] == metrics[
        "Masked-LM loss"]
    answer_question(at, "bert-loss/larger", reveal=True)
    assert "The answer: masked LM. " in " ".join(verdicts(at)["revealed"])
    assert not at.exception
