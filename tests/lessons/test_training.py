"""lmviz.lessons.training: the tokenizer, the batches, and a loop whose loss is lmviz's own."""

import math
import threading

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.corpus import entropy_per_token, generate_corpus, vocabulary
from lmviz.core.numbers import fmt
from lmviz.figures.plots import training_curves
from lmviz.lessons.training import (
    OBJECTIVES,
    PART_UNITS,
    VALIDATION_ENTROPY,
    Trainer,
    build_model,
    compute_loss,
    loss_parts,
    make_batch,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def small_corpus():
    return generate_corpus(num_train=300, num_validation=40, seed=1)


@pytest.fixture(scope="module")
def tokenizer(small_corpus):
    return train_tokenizer([s.text for s in small_corpus.train])


def test_tokenizer_keeps_every_word_whole_and_round_trips(tokenizer, small_corpus):
    assert [w for w in vocabulary() if len(tokenizer.tokenize(w)) != 1] == []
    for story in small_corpus.validation[:20]:
        ids = tokenizer(story.text)["input_ids"]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert len(ids) == story.num_tokens + 1  # [CLS] + words + [SEP]: one token per generator token
        assert tokenizer.tokenize(story.text) == story.text.split()
        assert tokenizer.decode(ids, skip_special_tokens=True) == story.text.replace(" .", ".")
    for name in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        assert name in tokenizer.all_special_tokens


def test_tokenizer_saves_and_loads_in_hugging_face_format(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "anna and ben went to the park ."
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert again.mask_token_id == tokenizer.mask_token_id


def _reference_loss(model, objective, batch):
    """The model's own loss; for MLM alone (BertForPreTraining computes a loss only
    with both heads' labels) F.cross_entropy with -100 labels."""
    if objective == "clm":
        labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss
    labels = batch.original_ids.masked_fill(~batch.masked_positions, -100)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, token_type_ids=batch.token_type_ids,
                labels=labels, next_sentence_label=batch.nsp_labels)
    if objective == "mlm":
        return F.cross_entropy(out.prediction_logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    return out.loss


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_lmviz_losses_equal_the_models_own_loss_on_training_batches(objective, tokenizer, small_corpus):
    torch.manual_seed(0)
    model = build_model(objective, "tiny", tokenizer).eval()
    batch = make_batch(objective, small_corpus.train[:8], tokenizer, seed=3)
    with torch.no_grad():
        ours, _ = compute_loss(model, objective, batch)
        theirs = _reference_loss(model, objective, batch)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)


def test_nsp_batches_pair_true_and_foreign_sentences(tokenizer, small_corpus):
    batch = make_batch("mlm+nsp", small_corpus.train[:6], tokenizer, seed=0)
    assert batch.nsp_labels.tolist() == [0, 1] * 6
    assert batch.token_type_ids is not None and batch.masked_positions.any()
    specials = torch.tensor(tokenizer.all_special_ids)
    assert not batch.masked_positions[torch.isin(batch.original_ids, specials)].any()


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_a_few_steps_lower_the_validation_loss(objective, tokenizer, small_corpus):
    trainer = Trainer(objective, "tiny", corpus=small_corpus, tokenizer=tokenizer, seed=0, num_validation=16)
    records = list(trainer.run(40, eval_every=20, predict_every=40))
    assert [r.step for r in records] == list(range(0, 41))
    before = records[0].validation_loss  # step 0: the untrained model
    assert records[0].train is None and records[0].seconds == 0.0
    assert records[-1].validation_loss < before - 0.5
    assert records[-1].predictions and all(isinstance(p, str) for p in records[-1].predictions)
    assert trainer.step == 40 and len(trainer.history) == 41
    more = list(trainer.run(2))  # a second run continues: no second step 0
    assert [r.step for r in more] == [41, 42]


def test_stop_waits_for_the_step_in_progress_and_nothing_is_recorded_after_it(tokenizer, small_corpus):
    """Issue 29: after Stop the Train page's numbers changed. Streamlit starts the new script run at once, while
    the old one, inside a step, went on training and recording until its next Streamlit call. Here the old run
    is a thread paused inside step 3 when stop is called."""
    trainer = Trainer("clm", "tiny", corpus=small_corpus, tokenizer=tokenizer, num_validation=16)
    inside, go = threading.Event(), threading.Event()
    real_step = trainer.train_step

    def paused_step():
        parts = real_step()
        if trainer.step == 3:
            inside.set()
            go.wait(60)
        return parts

    trainer.train_step = paused_step
    steps_seen = []
    old_run = threading.Thread(target=lambda: steps_seen.extend(r.step for r in trainer.run(50, eval_every=1)))
    old_run.start()
    assert inside.wait(60)
    stopper = threading.Thread(target=trainer.stop)
    stopper.start()
    stopper.join(0.5)
    assert stopper.is_alive()  # it waits for the step in progress
    go.set()
    stopper.join(60)
    shown = [(r.step, r.validation) for r in trainer.history]  # what the page draws once stop returns
    old_run.join(60)
    assert not old_run.is_alive() and steps_seen == [0, 1, 2, 3]  # the old run ended on its own, after step 3
    assert [(r.step, r.validation) for r in trainer.history] == shown and trainer.step == shown[-1][0] == 3


def test_a_new_run_ends_an_older_one_before_its_next_step(tokenizer, small_corpus):
    trainer = Trainer("clm", "tiny", corpus=small_corpus, tokenizer=tokenizer, num_validation=16)
    start = trainer.record_start()  # what the page shows before Train
    old = trainer.run(10)
    assert next(old).step == 1  # step 0 was recorded already: it is not recorded twice
    assert [r.step for r in trainer.run(3)] == [2, 3, 4]
    assert list(old) == []  # the old run, still open, trains no more
    assert [r.step for r in trainer.history] == [0, 1, 2, 3, 4] and trainer.step == 4
    assert trainer.history[0] is start and trainer.record_start() is start


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_each_loss_part_starts_near_its_uniform_guess(objective, tokenizer, small_corpus):
    """The page draws each part against "uniform guess: ln V" or "ln 2"; at step 0 it must be there."""
    trainer = Trainer(objective, "tiny", corpus=small_corpus, tokenizer=tokenizer, seed=0, num_validation=16)
    start = next(trainer.run(1)).validation
    assert list(start) == list(trainer.reference_lines)
    for part, value in start.items():
        uniform = next(v for label, v in trainer.reference_lines[part].items() if label.startswith("uniform guess"))
        assert value == pytest.approx(uniform, abs=0.1)
    if objective == "mlm+nsp":  # the sum is above ln V: it must never be drawn against that line
        assert sum(start.values()) > math.log(len(tokenizer)) + 0.5
        fig = training_curves(trainer.history, trainer.reference_lines, PART_UNITS)
        assert [a.text for a in fig.layout.annotations] == ["masked LM loss", "next sentence loss"]
        assert {t.yaxis for t in fig.data} == {"y", "y2"}
        lines = {t.name: t.yaxis for t in fig.data if t.name.startswith("uniform guess")}
        assert lines == {f"uniform guess: ln V = ln {len(tokenizer)}: {fmt(math.log(len(tokenizer)))}": "y",
                         f"uniform guess: ln 2: {fmt(math.log(2))}": "y2"}


def test_lmviz_losses_split_into_the_parts_the_optimizer_adds(tokenizer, small_corpus):
    torch.manual_seed(0)
    model = build_model("mlm+nsp", "tiny", tokenizer).eval()
    batch = make_batch("mlm+nsp", small_corpus.train[:8], tokenizer, seed=3)
    with torch.no_grad():
        total, info = compute_loss(model, "mlm+nsp", batch)
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    token_type_ids=batch.token_type_ids)
    parts = loss_parts("mlm+nsp", info)
    assert sum(parts.values()) == pytest.approx(total.item(), abs=1e-6)
    nsp = F.cross_entropy(out.seq_relationship_logits, batch.nsp_labels)
    assert parts["next sentence"] == pytest.approx(nsp.item(), abs=1e-6)


def test_reference_lines_are_ordered(small_corpus, tokenizer):
    lines = Trainer("clm", "tiny", corpus=small_corpus, tokenizer=tokenizer).reference_lines
    uniform, unigram, entropy = lines["next token"].values()
    assert uniform == pytest.approx(math.log(len(tokenizer)))
    assert uniform > unigram > entropy > 0
    assert entropy == entropy_per_token(small_corpus.validation[:64])
    # the stories' entropy bounds next-token prediction only: it is not drawn for a masked LM
    for objective in ("mlm", "mlm+nsp"):
        lines = Trainer(objective, "tiny", corpus=small_corpus, tokenizer=tokenizer).reference_lines
        assert not any(VALIDATION_ENTROPY in part_lines for part_lines in lines.values())


def test_unknown_objective_or_size_is_refused(small_corpus, tokenizer):
    with pytest.raises(ValueError, match="Unknown objective"):
        Trainer("nsp-only", corpus=small_corpus, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="Unknown model size"):
        Trainer("clm", "huge", corpus=small_corpus, tokenizer=tokenizer)


def test_sentence_pairs_get_segment_ids_by_default(tokenizer):
    enc = tokenizer("anna felt happy .", "ben felt tired .")
    assert enc["token_type_ids"] == [0] * 6 + [1] * 5


def test_the_same_texts_give_the_same_tokenizer(small_corpus):
    texts = [s.text for s in small_corpus.train]
    assert train_tokenizer(texts).get_vocab() == train_tokenizer(list(texts)).get_vocab()
    small = train_tokenizer(texts, vocab_size=60)  # too small for every word: the rest is spelt in letters
    assert small.tokenize("penguin") == ["p", "##e", "##n", "##g", "##u", "##i", "##n"]
