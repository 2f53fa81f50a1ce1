"""lmviz's own tiny GPT and BERT, shipped in assets/: they load offline and have learnt something."""

import json
import math

import pytest

from lmviz.core.corpus import entropy_per_token, generate_corpus
from lmviz.lessons.bert import analyse_bert_loss, analyse_mlm, analyse_nsp
from lmviz.lessons.training import evaluate
from lmviz.models.loading import ASSETS, SHIPPED, TINY_BERT, TINY_GPT, load_bert, load_causal_lm


@pytest.fixture(scope="module")
def held_out():
    """Stories from a seed the checkpoints were not trained on."""
    return generate_corpus(num_train=0, num_validation=200, seed=7).validation


def test_shipped_files_are_small_and_in_hugging_face_format():
    total = sum(f.stat().st_size for folder in SHIPPED.values() for f in folder.iterdir())
    assert total < 20 * 2**20
    for folder in SHIPPED.values():
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
            f.name for f in folder.iterdir()}
    report = json.loads((ASSETS / "tiny-models.json").read_text())
    assert all(model["command"].startswith("python -m scripts.pretrain_tiny") for model in report["models"])


def test_tiny_gpt_is_close_to_the_stories_own_entropy(held_out):
    loaded = load_causal_lm(TINY_GPT)
    metrics = evaluate(loaded.model, "clm", loaded.tokenizer, held_out)
    entropy, uniform = entropy_per_token(held_out), math.log(len(loaded.tokenizer))
    assert entropy < metrics["token_loss"] < entropy + 0.25 < uniform


def test_tiny_bert_beats_chance_on_both_tasks(held_out):
    loaded = load_bert(TINY_BERT)
    metrics = evaluate(loaded.model, "mlm+nsp", loaded.tokenizer, held_out, seed=3)
    assert metrics["token_accuracy"] > 50 / len(loaded.tokenizer)  # chance is 1/V
    assert metrics["nsp_accuracy"] > 0.65  # chance is 0.5


def test_lmviz_losses_equal_the_shipped_berts_own(held_out):
    loaded = load_bert(TINY_BERT)
    story = held_out[0].sentences
    mlm = analyse_mlm(loaded, " ".join(story), seed=1)
    assert mlm.loss == pytest.approx(mlm.loss_model, abs=1e-5)
    for follows, b in ((True, story[1]), (False, held_out[1].sentences[1])):
        nsp = analyse_nsp(loaded, story[0], b, follows)
        assert nsp.loss_two_logits == pytest.approx(nsp.loss_model, abs=1e-5)
        total = analyse_bert_loss(loaded, story[0], b, follows, seed=2)
        assert total.total == pytest.approx(total.total_model, abs=1e-5)
