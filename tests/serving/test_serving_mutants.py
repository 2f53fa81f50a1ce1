"""lmviz.serving.batcher: three rules that hand-made mutants of the code broke without any other test failing. A re-sent
request counts in full in the process's characters in flight; long texts waiting are read in the order they
came; a text of exactly ``piece_tokens`` tokens is short, batched with others."""

import threading
import time

import pytest

from lmviz.lessons.causal_lm import analyse_clm
from lmviz.serving import batcher as batcher_module
from lmviz.serving.batcher import Batcher
from lmviz.serving.fair_share import FairShare, TooMuchText
from tests.helpers import Clock


def test_a_resent_request_counts_in_full_in_the_characters_in_flight():
    """The same boxes again (another setting of the text just scored) are free in the session's minute, but the
    model scores every one of their characters again: the process's cap must count them all, both when the
    re-sent request asks to come in and while it is scored. Counting only its new characters (none) would let
    one visitor re-sending a long text fill the process past its cap."""
    share = FairShare(chars_per_minute=1000, chars_in_flight=150, clock=Clock())
    with share.admit("ann", ["a" * 100]):  # sent once: in ann's minute from now on
        pass
    with share.admit("bob", ["b" * 100]):
        with pytest.raises(TooMuchText, match="busy scoring other visitors"):  # 100 + 100 > 150, though 0 are new
            with share.admit("ann", ["a" * 100]):
                pass
    with share.admit("ann", ["a" * 100]):  # the process is free: the re-sent text is scored, 100 in flight
        with pytest.raises(TooMuchText, match="busy scoring other visitors"):
            with share.admit("bob", ["b" * 51]):
                pass
        with share.admit("bob", ["b" * 50]):  # exactly the cap
            pass


LONG = "the cat sat on a mat and the dog ran to the park and saw a big red bird and a small blue bird"  # 24 tokens


def test_long_texts_waiting_behind_a_long_one_are_read_first_come_first_served(tiny_loaded, monkeypatch):
    """Three distinct long texts queue, one after another, while the batcher is held inside a first long one;
    they must then be scored in the order they came, as each visitor waits in line. (Three identical texts,
    as in the close test, cannot tell one order from another.)"""
    batcher = Batcher(tiny_loaded, piece_tokens=4)
    batcher.analyse("the cat")  # a short text scored just now: a class is at work, long texts are read in pieces
    scored, analyse_batch = [], batcher_module.analyse_batch

    def recording_analyse_batch(loaded, requests, **options):  # runs in the serving thread, in the order it scores
        scored.append([request.text for request in requests])
        return analyse_batch(loaded, requests, **options)

    monkeypatch.setattr(batcher_module, "analyse_batch", recording_analyse_batch)
    reading, queued = threading.Event(), threading.Event()
    between = batcher._between_pieces

    def held_at_the_first_gap():  # until the other long texts are queued, in a known order, behind this one
        reading.set()
        queued.wait(10)
        between()

    batcher._between_pieces = held_at_the_first_gap
    waiting = ["the cat sat on a mat", "a dog ran to the big park", "the small bird saw a red cat"]  # 6 or 7 tokens
    results = {}

    def ask(text):
        results[text] = batcher.analyse(text)

    threads = [threading.Thread(target=ask, args=(LONG,))]
    threads[0].start()
    assert reading.wait(10)
    for count, text in enumerate(waiting, start=1):
        threads.append(threading.Thread(target=ask, args=(text,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while batcher._requests.qsize() < count and time.monotonic() < deadline:  # queued before the next one starts
            time.sleep(0.001)
        assert batcher._requests.qsize() == count
    queued.set()
    for thread in threads:
        thread.join(10)
    assert scored == [[LONG], *[[text] for text in waiting]]  # each alone, in the order they came
    assert all(results[text].text == text for text in [LONG, *waiting])  # and each visitor got its own
    batcher.close()
    assert not batcher._thread.is_alive()  # close() returns once the thread has ended


def test_a_text_of_exactly_piece_tokens_tokens_is_short_and_batched_with_others(tiny_loaded):
    """``piece_tokens`` is the longest a short text may be: a text of exactly that many tokens shares a forward
    pass with the others that arrive with it, whether it comes first (set aside or not as it is taken) or after
    the first (as the batch is gathered). Taken for a long one, it would be scored alone, and three students'
    sentences of that length would make three forward passes instead of one."""
    # max_batch=3: the batch is served the moment the third text is in it, however long the window
    batcher = Batcher(tiny_loaded, window=2.0, max_batch=3, piece_tokens=4)
    texts = ["the cat sat on", "a dog ran to", "the bird saw a"]
    assert all(len(tiny_loaded.tokenizer(text)["input_ids"]) == 4 for text in texts)
    results = {}

    def ask(text):
        results[text] = batcher.analyse(text)

    threads = [threading.Thread(target=ask, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert list(batcher.batch_sizes) == [3]  # one forward pass for the three
    for text in texts:
        alone = analyse_clm(tiny_loaded, text)
        assert results[text].input_ids == alone.input_ids
        assert [r.nll for r in results[text].rows] == pytest.approx([r.nll for r in alone.rows], abs=1e-5)
    batcher.close()
    assert not batcher._thread.is_alive()  # close() returns once the thread has ended
