"""lmviz.serving: many threads at once get their own, correct, results."""

import threading

import pytest

from lmviz.analysis import analyse_clm
from lmviz.serving import Batcher
from lmviz.text import NothingToScore

SENTENCES = ["the cat sat on a mat", "a dog ran to the park and saw a big red bird", "the bird saw the cat",
             "small blue bird ran", "the cat and the dog sat on the mat and saw the park"] * 4


def test_concurrent_requests_are_batched_and_equal_one_at_a_time(tiny_loaded):
    batcher = Batcher(tiny_loaded, window=0.2)
    results = [None] * len(SENTENCES)

    def ask(i):
        results[i] = batcher.analyse(SENTENCES[i], add_bos=i % 2 == 0)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(batcher.batch_sizes) > 1  # some requests really did share a forward pass
    for i, result in enumerate(results):
        alone = analyse_clm(tiny_loaded, SENTENCES[i], add_bos=i % 2 == 0)
        assert result.input_ids == alone.input_ids  # no cross-talk: each thread got its own sentence
        assert [r.nll for r in result.rows] == pytest.approx([r.nll for r in alone.rows], abs=1e-5)
        assert [r.rank for r in result.rows] == [r.rank for r in alone.rows]
        assert result.loss_model == pytest.approx(alone.loss_model, abs=1e-5)


def test_bad_input_fails_in_the_callers_thread_only(tiny_loaded):
    batcher = Batcher(tiny_loaded)
    with pytest.raises(NothingToScore):
        batcher.analyse("   ")
    assert batcher.analyse("the cat sat").rows  # the batcher still serves


def test_a_closed_batcher_ends_its_thread_and_still_answers(tiny_loaded):
    batcher = Batcher(tiny_loaded)
    assert batcher.analyse("the cat sat").rows
    batcher.close()
    batcher._thread.join(timeout=5)
    assert not batcher._thread.is_alive()  # the thread no longer holds the model
    late = batcher.analyse("the cat sat on a mat")  # a session that still had it is served all the same
    alone = analyse_clm(tiny_loaded, "the cat sat on a mat")
    assert [r.nll for r in late.rows] == pytest.approx([r.nll for r in alone.rows])
