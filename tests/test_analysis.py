"""lmviz.analysis on a tiny GPT-2: every number against the model and torch."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz.analysis import analyse_clm
from lmviz.text import NothingToScore, _visible, encode

TEXT = "the cat sat on a mat and the dog ran to the park"


def test_rows_are_the_shifted_inputs(tiny_loaded, tiny_tokenizer):
    result = analyse_clm(tiny_loaded, TEXT)
    ids = tiny_tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert result.input_ids == ids
    assert len(result.rows) == len(ids) - 1
    assert [r.target_id for r in result.rows] == ids[1:]
    assert [r.input_id for r in result.rows] == ids[:-1]
    assert [r.target_token for r in result.rows] == result.tokens[1:]


def test_loss_agrees_with_the_model_and_torch(tiny_loaded, tiny_gpt2, tiny_tokenizer):
    result = analyse_clm(tiny_loaded, TEXT)
    ids = torch.tensor([result.input_ids])
    with torch.no_grad():
        out = tiny_gpt2(input_ids=ids, labels=ids)
    reference = F.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="none")
    assert result.loss_model == pytest.approx(out.loss.item(), abs=1e-6)
    assert result.loss == pytest.approx(out.loss.item(), abs=1e-5)
    assert result.max_difference < 1e-5
    for value in (result.loss_model, result.loss_cross_entropy):
        assert value == pytest.approx(result.loss, abs=1e-5)
    assert [r.nll for r in result.rows] == pytest.approx(reference.tolist(), abs=1e-5)
    assert sum(r.nll for r in result.rows) / len(result.rows) == pytest.approx(result.loss, abs=1e-6)
    assert result.perplexity == pytest.approx(math.exp(result.loss))


def test_ranks_and_top_k_are_consistent_with_the_probabilities(tiny_loaded, tiny_gpt2):
    result = analyse_clm(tiny_loaded, TEXT, top_k=5)
    ids = torch.tensor([result.input_ids])
    with torch.no_grad():
        probs = torch.softmax(tiny_gpt2(input_ids=ids).logits[0, :-1], dim=-1)
    for row in result.rows:
        p = probs[row.position]
        assert row.prob == pytest.approx(p[row.target_id].item(), abs=1e-6)
        assert row.nll == pytest.approx(-math.log(row.prob), abs=1e-5)
        assert row.rank == int((p > p[row.target_id]).sum()) + 1
        top = [prob for _, prob in row.top_k]
        assert top == sorted(top, reverse=True) and len(top) == 5
        assert top == pytest.approx(p.topk(5).values.tolist(), abs=1e-6)
        if row.rank == 1:
            assert row.top_k[0][1] == pytest.approx(row.prob, abs=1e-6)
        if row.rank > 5:
            assert row.prob <= top[-1] + 1e-7


def test_bos_gives_the_first_word_a_loss(tiny_loaded):
    plain = analyse_clm(tiny_loaded, TEXT)
    with_bos = analyse_clm(tiny_loaded, TEXT, add_bos=True)
    assert with_bos.input_ids == [0] + plain.input_ids  # <|endoftext|> is id 0
    assert len(with_bos.rows) == len(plain.rows) + 1
    assert with_bos.rows[0].target_token == "the" and with_bos.bos_added


@pytest.mark.parametrize("text, message", [("", "nothing to score"), ("   \n\t", "nothing to score"),
                                           ("cat", "no next token")])
def test_texts_with_nothing_to_predict_say_why(tiny_loaded, text, message):
    with pytest.raises(NothingToScore, match=message):
        analyse_clm(tiny_loaded, text)


def test_single_token_with_bos_is_scored(tiny_loaded):
    result = analyse_clm(tiny_loaded, "cat", add_bos=True)
    assert len(result.rows) == 1 and math.isfinite(result.loss)


def test_long_text_is_cut_and_says_where(tiny_tokenizer):
    ids, before = encode(tiny_tokenizer, " ".join(["the cat"] * 40), add_bos=False, max_tokens=16)
    assert len(ids) == 16 and before == 80


def test_long_text_is_cut_at_the_models_limit(tiny_loaded):
    result = analyse_clm(tiny_loaded, " ".join(["the cat sat on a mat"] * 20))  # 120 words, tiny GPT-2 has 64 positions
    assert result.truncated_from == 120 and len(result.tokens) == 64 and len(result.rows) == 63


def test_top_k_larger_than_the_vocabulary_is_capped(tiny_loaded):
    result = analyse_clm(tiny_loaded, TEXT, top_k=10_000)
    assert all(len(r.top_k) == tiny_loaded.model.config.vocab_size for r in result.rows)
    assert sum(p for _, p in result.rows[0].top_k) == pytest.approx(1.0, abs=1e-5)


def test_readable_tokens_show_bytes_and_invisible_characters(bundled):
    from lmviz.text import readable_token

    tok = bundled.tokenizer
    pieces = [readable_token(tok, i) for i in tok("日 a\u202eb\x1b\r\n", add_special_tokens=False)["input_ids"]]
    shown = "".join(pieces)
    assert "\ufffd" not in shown and "\x1b" not in shown and "\u202e" not in shown and "\r" not in shown
    assert "<U+001B>" in shown and "␍" in shown and "⏎" in shown
    assert "<E6 97><A5>" in shown  # 日 is E6 97 A5 in UTF-8, split over two byte tokens
    assert "<E2 80><AE>" in shown  # the right-to-left override U+202E, also split into bytes
    assert _visible("a\u202eb\u200d c\x00") == "a<U+202E>b<U+200D>␣c<U+0000>"


def test_typed_special_token_text_stays_text(bundled):
    result = analyse_clm(bundled, "<|endoftext|> hello")
    assert 0 not in result.input_ids  # id 0 is the real <|endoftext|>
    with_start = analyse_clm(bundled, "hello there", add_bos=True)
    assert with_start.input_ids[0] == 0 and with_start.tokens[0] == "<|endoftext|>"
