"""lmviz.lessons.causal_lm on a tiny GPT-2 and the bundled model: every number against the model and torch."""

import inspect
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.text import _visible, encode
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.lessons import causal_lm
from lmviz.lessons.causal_lm import (
    Request,
    analyse_clm,
    loss_three_ways,
    records_from_logits,
    score_positions,
    topk_by_blocks,
)
from lmviz.models.loading import LoadedModel
from lmviz.serving.scoring import analyse_batch

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
    from lmviz.core.text import readable_token

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


@pytest.mark.parametrize("vocab", [49152, 50257, 3 * 128 * 5])  # SmolLM2's, GPT-2's (a shorter last block), few blocks
def test_topk_by_blocks_equals_torch_topk(vocab):
    gen = torch.Generator().manual_seed(vocab)
    scores = torch.randn(40, vocab, generator=gen) * 4  # (N, V)
    scores[:10] = scores[:10].round()  # many equal scores
    scores[10:20, : vocab // 2] = -math.inf  # banned tokens, as some models' logits have
    scores[20, -1] = 100.0  # the best token in the last, shorter block
    scores[21, :3] = 100.0  # three best tokens in the first block
    for k in (1, 5, 20):
        values, ids = topk_by_blocks(scores, k)
        expected = scores.topk(k, dim=-1)
        assert torch.equal(values, expected.values)
        assert torch.equal(scores.gather(1, ids), values)  # each id points at its value (ids may differ among ties)
        assert all(len(set(row)) == k for row in ids.tolist())


def rank_by_counting(log_p, targets):
    """The definition: 1 + how many tokens score higher than the label, over the whole vocabulary."""
    return (log_p > log_p.gather(-1, targets[:, None])).sum(-1) + 1


def test_score_positions_equals_one_pass_over_the_vocabulary(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 5000, generator=gen) * 3  # (N, V)
    targets = torch.randint(5000, (50,), generator=gen)
    targets[:10] = logits[:10].argmax(-1)  # labels inside the top 5...
    logits[10, targets[10]] = -math.inf  # ...one the model rules out (p = 0, rank past every other token)
    log_p = torch.log_softmax(logits, dim=-1)
    whole = score_positions(logits, targets, 5)
    assert torch.equal(whole["rank"], rank_by_counting(log_p, targets))
    assert torch.equal(whole["nll"], -log_p.gather(-1, targets[:, None])[:, 0])
    assert torch.equal(whole["top_p"], log_p.topk(5, dim=-1).values.exp())
    assert whole["rank"][:10].tolist() == [1] * 10 and whole["nll"][10] == math.inf
    monkeypatch.setitem(causal_lm.CHUNK_SCORES, "cpu", 3 * 5000)  # 3 positions at a time: 17 pieces, joined again
    in_pieces = score_positions(logits, targets, 5)
    assert all(torch.equal(whole[key], in_pieces[key]) for key in whole)


def test_the_check_in_pieces_equals_the_models_loss(tiny_gpt2, monkeypatch):
    ids = torch.randint(50, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = tiny_gpt2(input_ids=ids, labels=ids)
    shifted, labels = out.logits[0, :-1], ids[0, 1:]  # (39, V), (39,)
    monkeypatch.setitem(causal_lm.CHUNK_SCORES, "cpu", 4 * 50)  # 4 positions at a time: 10 pieces
    by_hand, model_own, cross_entropy = loss_three_ways(tiny_gpt2, shifted, labels,
                                                        score_positions(shifted, labels, 5)["nll"])
    assert model_own == pytest.approx(out.loss.item(), abs=1e-6)
    assert cross_entropy == pytest.approx(F.cross_entropy(shifted, labels).item(), abs=1e-6)
    assert by_hand == pytest.approx(out.loss.item(), abs=1e-5)


def test_the_bundled_model_against_torch(bundled):
    """A real vocabulary (49 152 tokens, so top-k by blocks) and a text of several pieces."""
    text = ("The museum was quiet on Tuesday. A child pressed her nose against the glass and asked "
            "why the whale had no teeth; her grandfather, who had read the sign, said it ate krill.") * 2
    result = analyse_clm(bundled, text)
    ids = torch.tensor([result.input_ids])
    with torch.inference_mode():
        out = bundled.model(input_ids=ids, labels=ids)
    log_p = torch.log_softmax(out.logits[0, :-1], dim=-1)  # (N, V)
    assert len(result.rows) > causal_lm.CHUNK_SCORES["cpu"] // log_p.shape[-1]  # more than one piece
    assert result.loss_model == pytest.approx(out.loss.item(), abs=1e-5)
    assert result.loss_cross_entropy == pytest.approx(out.loss.item(), abs=1e-5)
    assert result.max_difference < 1e-5
    assert [r.nll for r in result.rows] == pytest.approx(
        F.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="none").tolist(), abs=1e-5)
    assert [r.rank for r in result.rows] == rank_by_counting(log_p, ids[0, 1:]).tolist()
    assert any(r.rank > 5 for r in result.rows) and any(r.rank == 1 for r in result.rows)
    top_p = log_p.topk(5, dim=-1).values.exp()  # (N, 5)
    assert [p for r in result.rows for _, p in r.top_k] == pytest.approx(top_p.flatten().tolist(), abs=1e-7)


def test_show_the_code_shows_the_computation():
    """What "Show the code" puts on screen: the math from logits to records; the serving code (batching,
    pieces, out-of-memory handling) stays in lmviz.serving, never on screen."""
    records, scores = inspect.getsource(records_from_logits), inspect.getsource(score_positions)
    assert "score_positions(" in records and "loss_three_ways(" in records
    assert "except" not in records and "memory" not in records and "pad" not in records
    assert "log_softmax" in scores and len(scores.splitlines()) < 25
    page = (Path(__file__).resolve().parents[2] / "app_pages" / "your_sentence.py").read_text()
    shown = page[page.index("show_code("):].split("\n", 1)[0]
    assert "records_from_logits" in shown and "analyse_batch" not in shown


class FailingModel(torch.nn.Module):
    """A model whose forward pass fails as the CPU allocator does when memory runs out, or otherwise."""

    def __init__(self, error):
        super().__init__()
        self.config, self.error = type("Config", (), {"vocab_size": 50})(), error

    def forward(self, **inputs):
        raise self.error


def test_running_out_of_memory_is_one_sentence_and_other_errors_pass(tiny_tokenizer):
    def loaded(error):
        return LoadedModel(FailingModel(error), tiny_tokenizer, "failing", "a test", "cpu", "float32", 0.0)

    requests = [Request("", [2, 3, 4], None, False), Request("", [2, 3], None, False)]
    with pytest.raises(NotEnoughMemory, match=r"^The cpu ran out of memory: .* these 2 texts' 3 tokens alone take"):
        analyse_batch(loaded(RuntimeError("DefaultCPUAllocator: can't allocate memory")), requests)
    with pytest.raises(ValueError, match="not memory"):
        analyse_batch(loaded(ValueError("not memory")), requests)
