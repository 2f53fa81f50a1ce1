"""lmviz.serving.scorer.CausalScorer, the one way from a causal-LM page to its model: the same records on the
shared (batched) model and on a session's own one, every visitor text counted against the fair share, a failed
allocation told as NotEnoughMemory, and a cache key no other model shares."""

import dataclasses

import pytest

from lmviz.errors import NotEnoughMemory
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.lessons.next_token import next_token_logits
from lmviz.serving.batcher import Batcher
from lmviz.serving.fair_share import FairShare, TooMuchText
from lmviz.serving.scorer import CausalScorer

UNLIMITED = FairShare(float("inf"), float("inf"))


def scorer_for(loaded, batcher=None, share=UNLIMITED) -> CausalScorer:
    return CausalScorer(loaded, batcher, share, "ann", "float32", None)


@pytest.mark.parametrize("batched", [True, False])
def test_the_shared_and_the_sessions_own_model_give_analyse_clms_records(tiny_loaded, batched):
    batcher = Batcher(tiny_loaded) if batched else None
    scorer = scorer_for(tiny_loaded, batcher)
    assert scorer.shared is batched
    result = scorer.analyse("the cat sat on a mat", add_bos=True)
    alone = analyse_clm(tiny_loaded, "the cat sat on a mat", add_bos=True)
    assert result.input_ids == alone.input_ids
    assert [r.nll for r in result.rows] == pytest.approx([r.nll for r in alone.rows], abs=1e-5)
    if batcher is not None:
        assert list(batcher.batch_sizes) == [1]  # it went through the batcher
        batcher.close()


def test_every_visitor_text_counts_against_the_sessions_share_and_lmvizs_own_do_not(tiny_loaded):
    scorer = scorer_for(tiny_loaded, share=FairShare(chars_per_minute=30, chars_in_flight=1000))
    with pytest.raises(TooMuchText):
        scorer.analyse("the cat sat on a mat and the dog ran to the park")  # 48 characters, over a minute's 30
    assert scorer.analyse("the cat sat on a mat and the dog ran to the park", counted=False).rows
    with pytest.raises(TooMuchText):  # run counts all its texts together (16 + 16), leaving None out
        scorer.run(lambda loaded: next_token_logits(loaded, "the cat"), "the cat sat on a", None, "a dog ran to the")
    assert scorer.run(lambda loaded: next_token_logits(loaded, "the cat"), "the cat sat", None, "").input_ids


def test_a_failed_allocation_is_one_sentence_and_other_errors_pass_through(tiny_loaded):
    scorer = scorer_for(tiny_loaded)

    def out_of_memory(loaded):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    with pytest.raises(NotEnoughMemory) as told:
        scorer.run(out_of_memory, "the cat")
    assert told.value.device == "cpu" and str(told.value) == "The cpu ran out of memory for this text."

    def broken(loaded):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        scorer.run(broken, "the cat")


def test_the_cache_key_is_never_another_models(tiny_loaded):
    retrained = dataclasses.replace(tiny_loaded, identity="another")  # same name, device and dtype
    assert scorer_for(tiny_loaded).cache_key != scorer_for(retrained).cache_key
    assert scorer_for(tiny_loaded).cache_key == scorer_for(tiny_loaded, share=FairShare(1, 1)).cache_key
