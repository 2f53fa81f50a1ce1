"""lmviz.serving.batcher: many threads at once get their own, correct, results; long texts are read in pieces with
short ones first; FairShare's limits on one session's texts."""

import dataclasses
import threading
import time

import pytest
import torch

from lmviz.errors import NothingToScore
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.settings import CHARS_PER_MINUTE_VARIABLE, DEFAULT_CHARS_PER_MINUTE, chars_per_minute
from lmviz.serving.batcher import ALONE_PIECES_LONGER, CLASS_AT_WORK_SECONDS, Batcher
from lmviz.serving.fair_share import FairShare, TooMuchText
from lmviz.serving.scoring import forward_in_pieces
from tests.helpers import Clock

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
    assert not batcher._thread.is_alive()  # close() returns once the thread, which holds the model, has ended
    late = batcher.analyse("the cat sat on a mat")  # a session that still had it is served all the same
    alone = analyse_clm(tiny_loaded, "the cat sat on a mat")
    assert [r.nll for r in late.rows] == pytest.approx([r.nll for r in alone.rows])


LONG = "the cat sat on a mat and the dog ran to the park and saw a big red bird and a small blue bird"  # 24 tokens


class RecordingModel(torch.nn.Module):
    """The tiny model, recording the shape of every forward pass it is asked for, in order."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, []

    def forward(self, input_ids, **options):
        self.calls.append(tuple(input_ids.shape))
        return self.model(input_ids=input_ids, **options)

    def __getattr__(self, name):  # config, loss_function, ...: the tiny model's own
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)


def test_forward_in_pieces_equals_one_forward_pass(tiny_loaded):
    ids = torch.tensor([tiny_loaded.tokenizer(LONG)["input_ids"]])
    gaps = []
    with torch.inference_mode():
        whole = tiny_loaded.model(input_ids=ids).logits
        pieces, seconds = forward_in_pieces(tiny_loaded, ids, lambda: gaps.append(1), piece=5)
    assert ids.shape[1] == 24 and len(gaps) == 4  # 5 pieces (5, 5, 5, 5, 4): a gap between each two
    assert pieces.shape == whole.shape
    assert torch.allclose(pieces, whole, atol=1e-5)
    assert seconds > 0


def test_a_long_text_is_read_in_pieces_and_short_ones_go_first(tiny_loaded):
    recording = RecordingModel(tiny_loaded.model)
    loaded = dataclasses.replace(tiny_loaded, model=recording)
    batcher = Batcher(loaded, window=0.05, piece_tokens=4)
    batcher.analyse("the cat")  # a short text scored just now: a class is at work
    recording.calls.clear()
    reading, shorts_queued = threading.Event(), threading.Event()
    between = batcher._between_pieces

    def held_at_the_first_gap():  # until the short texts are queued: what arrives while the long one is read
        reading.set()
        shorts_queued.wait(10)
        between()

    batcher._between_pieces = held_at_the_first_gap
    shorts = ["the cat sat", "a dog ran", "the bird saw"]  # 3 tokens each
    results = {}

    def ask(text):
        results[text] = batcher.analyse(text)

    long_thread = threading.Thread(target=ask, args=(LONG,))
    long_thread.start()
    assert reading.wait(10)
    threads = [threading.Thread(target=ask, args=(text,)) for text in shorts]
    for thread in threads:
        thread.start()
    while batcher._requests.qsize() < len(shorts):
        time.sleep(0.01)
    shorts_queued.set()
    for thread in [long_thread, *threads]:
        thread.join(10)
    # the long text's first piece, then the three short texts in one batch, then the rest of the long one
    assert recording.calls == [(1, 4), (3, 3), (1, 4), (1, 4), (1, 4), (1, 4), (1, 4)]
    for text in [LONG, *shorts]:
        alone = analyse_clm(tiny_loaded, text)
        assert results[text].input_ids == alone.input_ids
        assert [r.nll for r in results[text].rows] == pytest.approx([r.nll for r in alone.rows], abs=1e-5)
        assert results[text].loss_model == pytest.approx(alone.loss_model, abs=1e-5)
    batcher.close()


def test_a_long_text_goes_on_when_it_has_waited_enough_however_many_short_ones_keep_coming(tiny_loaded):
    recording = RecordingModel(tiny_loaded.model)
    batcher = Batcher(dataclasses.replace(tiny_loaded, model=recording), window=0, piece_tokens=4,
                      long_waits_at_most=0)  # (the default is seconds, as many batches as come then)
    batcher.analyse("the cat")  # a class at work
    recording.calls.clear()
    answer, askers, arrivals = batcher._answer, [], 12

    def ask_short():
        askers.append(threading.Thread(target=batcher.analyse, args=("a dog ran",)))
        askers[-1].start()
        deadline = time.monotonic() + 10
        while batcher._requests.empty() and time.monotonic() < deadline:
            time.sleep(0.001)

    def answer_while_another_arrives(batch):  # a class that never stops: a short text comes during each batch
        nonlocal arrivals
        if arrivals:
            arrivals -= 1
            ask_short()
        answer(batch)

    batcher._answer = answer_while_another_arrives
    between = batcher._between_pieces
    batcher._between_pieces = lambda: (ask_short() if not askers else None, between())
    batcher.analyse(LONG)
    for thread in askers:
        thread.join(10)
    # the long text's 6 pieces, one batch of one short text between each two, although one always waits
    assert recording.calls[:11] == [(1, 4), (1, 3)] * 5 + [(1, 4)]
    assert recording.calls[11:] == [(1, 3)] * (len(askers) - 5)  # the rest after it, all answered
    batcher.close()


def test_long_texts_are_never_padded_into_a_batch(tiny_loaded):
    recording = RecordingModel(tiny_loaded.model)
    batcher = Batcher(dataclasses.replace(tiny_loaded, model=recording), window=0.3, piece_tokens=8)
    batcher.analyse("the cat")  # a class at work
    recording.calls.clear()
    texts = [LONG, "the cat sat", LONG + " and the cat", "a dog ran"]
    threads = [threading.Thread(target=batcher.analyse, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert max(length for _, length in recording.calls) <= 8  # no forward pass wider than a piece
    assert sorted(batch for batch, length in recording.calls if batch > 1) == [2]  # the two short ones, together
    batcher.close()
    assert not batcher._thread.is_alive()  # close() returns once the thread has ended


def test_a_long_text_is_read_in_short_pieces_only_while_a_class_is_at_work(tiny_loaded):
    recording = RecordingModel(tiny_loaded.model)
    batcher = Batcher(dataclasses.replace(tiny_loaded, model=recording), piece_tokens=4)
    alone = batcher.analyse(LONG)
    assert ALONE_PIECES_LONGER == 4 and recording.calls == [(1, 16), (1, 8)]  # nobody else here: longer pieces
    batcher.analyse("the cat")
    recording.calls.clear()
    in_pieces = batcher.analyse(LONG)
    assert recording.calls == [(1, 4)] * 6  # a short text was scored just now
    assert [r.nll for r in in_pieces.rows] == pytest.approx([r.nll for r in alone.rows], abs=1e-5)
    batcher._short_scored_at -= CLASS_AT_WORK_SECONDS + 1  # the class has gone quiet since
    recording.calls.clear()
    batcher.analyse(LONG)
    assert recording.calls == [(1, 16), (1, 8)]
    batcher.close()


def test_close_answers_the_long_texts_still_waiting(tiny_loaded):
    batcher = Batcher(tiny_loaded, piece_tokens=4)
    batcher.analyse("the cat")  # a class at work: long texts are read in pieces
    reading, closed = threading.Event(), threading.Event()
    between = batcher._between_pieces

    def held_at_the_first_gap():  # until two more long texts wait and the batcher is closed
        reading.set()
        closed.wait(10)
        between()

    batcher._between_pieces = held_at_the_first_gap
    results = []
    threads = [threading.Thread(target=lambda: results.append(batcher.analyse(LONG))) for _ in range(3)]
    threads[0].start()
    assert reading.wait(10)
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 10
    while batcher._requests.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert batcher._requests.qsize() == 2  # both wait behind the first
    closer = threading.Thread(target=batcher.close)  # close() waits for the thread, which is held: from aside
    closer.start()
    while not batcher._closed and time.monotonic() < deadline:
        time.sleep(0.001)
    closed.set()
    closer.join(10)
    for thread in threads:
        thread.join(10)
    assert len(results) == 3 and all(r.input_ids == results[0].input_ids for r in results)
    assert not closer.is_alive() and not batcher._thread.is_alive()


def test_fair_share_counts_each_sessions_characters_of_the_last_minute():
    clock = Clock()
    share = FairShare(chars_per_minute=100, chars_in_flight=1000, clock=clock)
    with share.admit("ann", ["a" * 60]):
        pass
    clock.now += 20
    with share.admit("ann", ["a" * 60]):  # the same boxes again (another setting): not counted twice
        pass
    with share.admit("bob", ["b" * 100]):  # every session has its own minute
        pass
    with pytest.raises(TooMuchText, match=r"You have sent 60 characters .* at most 100 a minute .* in 40 s\."):
        with share.admit("ann", ["c" * 41]):
            pass
    with share.admit("ann", ["c" * 40]):  # exactly the limit
        pass
    clock.now += 40  # the first text leaves the minute; the 40 characters sent 40 s ago remain
    with pytest.raises(TooMuchText, match=r"in 20 s\."):
        with share.admit("ann", ["d" * 61]):
            pass
    with share.admit("ann", ["d" * 60]):
        pass


def test_fair_share_counts_boxes_already_sent_again_when_they_come_in_a_new_combination():
    share = FairShare(chars_per_minute=100, chars_in_flight=1000, clock=Clock())
    user, answer, other = "u" * 30, "a" * 30, "o" * 30
    with share.admit("ann", [user, answer]):  # the chat page's first request: 60 characters
        pass
    with pytest.raises(TooMuchText, match="You have sent 60 characters"):  # a new pair: the user's box counts again
        with share.admit("ann", [user, other]):
            pass


def test_fair_share_refuses_a_request_longer_than_a_minutes_share():
    share = FairShare(chars_per_minute=100, chars_in_flight=1000, clock=Clock())
    with pytest.raises(TooMuchText, match=r"What you sent has 101 characters; .* at most 100 a minute .* Shorten it\."):
        with share.admit("ann", ["x" * 60, "y" * 41]):  # a request's boxes count together
            pass


def test_lmvizs_own_text_is_never_counted_nor_refused():
    share = FairShare(chars_per_minute=10, chars_in_flight=10, clock=Clock())
    with share.admit("ann", ["a" * 10]):
        with share.admit("bob", []):  # the process is full, and ann is busy: nothing of a visitor's is asked
            with share.admit("ann", []):
                pass


def test_a_sessions_second_request_waits_for_its_first_and_is_refused_only_after_its_turn_runs_out():
    share = FairShare(chars_per_minute=1000, chars_in_flight=1000, clock=Clock(), turn_seconds=5)
    first_in, first_may_end, order = threading.Event(), threading.Event(), []

    def first():
        with share.admit("ann", ["a" * 10]):
            first_in.set()
            first_may_end.wait(5)
            order.append("first done")

    def second():
        with share.admit("ann", ["b" * 10]):  # a rerun of the page while the first is still scored
            order.append("second scored")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_in.wait(5)
    threads[1].start()
    time.sleep(0.2)
    assert order == []  # the second waits its turn
    with share.admit("bob", ["c" * 10]):  # other sessions do not
        pass
    first_may_end.set()
    for thread in threads:
        thread.join(5)
    assert order == ["first done", "second scored"]
    impatient = FairShare(chars_per_minute=1000, chars_in_flight=1000, clock=Clock(), turn_seconds=0.1)
    refused = []

    def too_late():
        try:
            with impatient.admit("ann", ["b"]):
                pass
        except TooMuchText as problem:
            refused.append(str(problem))

    with impatient.admit("ann", ["a"]):
        waiting = threading.Thread(target=too_late)
        waiting.start()
        waiting.join(5)
    assert refused == ["Your previous text is still being scored. Try again in a moment."]


def test_fair_share_caps_the_characters_the_process_scores_at_once():
    share = FairShare(chars_per_minute=1000, chars_in_flight=150, clock=Clock())
    with share.admit("ann", ["a" * 100]):
        with pytest.raises(TooMuchText, match="busy scoring other visitors"):
            with share.admit("bob", ["b" * 51]):
                pass
        with share.admit("bob", ["b" * 50]):
            with pytest.raises(TooMuchText, match="busy"):  # a request sent before counts in full too
                with share.admit("cid", ["c"]):
                    pass
    with share.admit("bob", ["b" * 50]):  # the same boxes again
        with share.admit("cid", ["c" * 100]):  # ann's text is done: the room is free again
            pass


def test_fair_share_frees_a_session_whose_text_failed_and_forgets_old_sessions():
    clock = Clock()
    share = FairShare(chars_per_minute=100, chars_in_flight=1000, clock=clock, turn_seconds=0.1)
    with pytest.raises(RuntimeError):
        with share.admit("ann", ["a" * 10]):
            raise RuntimeError("the model failed")
    with share.admit("ann", ["b" * 10]):  # not "still being scored"
        pass
    clock.now += 61
    with share.admit("bob", ["c"]):
        pass
    assert list(share._sent) == ["bob"]  # ann's minute is over: nothing of her session is kept


@pytest.mark.parametrize("value, expected", [("", DEFAULT_CHARS_PER_MINUTE), ("2500", 2500), ("inf", float("inf")),
                                             ("lots", DEFAULT_CHARS_PER_MINUTE), ("0", DEFAULT_CHARS_PER_MINUTE),
                                             ("-5", DEFAULT_CHARS_PER_MINUTE), ("nan", DEFAULT_CHARS_PER_MINUTE)])
def test_the_limit_comes_from_the_environment_and_a_broken_value_keeps_the_default(monkeypatch, value, expected):
    monkeypatch.setenv(CHARS_PER_MINUTE_VARIABLE, value)
    assert chars_per_minute() == expected
