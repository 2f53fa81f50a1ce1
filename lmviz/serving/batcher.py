"""Serving a whole class at once: requests that arrive together share one forward pass.

Thirty students pressing Enter within a second each start a Streamlit script
run, in its own thread. Run one by one, each waits for all the others; run at
the same time, they fight over the same CPU cores. A ``Batcher`` instead
collects the requests that arrive within a few milliseconds and scores them
as one padded batch (lmviz.serving.scoring.analyse_batch), then hands each thread its
own result. A long text is read a piece at a time (short pieces while a class is
at work), with the short texts that arrive meanwhile scored between its pieces.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
from concurrent.futures import Future

from lmviz.errors import NotEnoughMemory
from lmviz.lessons.causal_lm import ClmAnalysis, make_request
from lmviz.serving.scoring import PIECE_TOKENS, analyse_batch

WINDOW_SECONDS = 0.01  # how long the first request of a batch waits for company
MAX_BATCH = 32
# A short text scored this recently means a class is at work: a long text is then read in pieces of
# piece_tokens. Otherwise (a teacher alone on a laptop) in pieces ALONE_PIECES_LONGER times as long: on a
# CPU, each forward pass reads all the weights again, so many short pieces take longer than one pass
# (benchmarks/noisy_neighbour.py measures both).
CLASS_AT_WORK_SECONDS = 10.0
ALONE_PIECES_LONGER = 4
# Short texts go before a long one, but for this long at most while they keep coming: it is never starved.
LONG_WAITS_AT_MOST_SECONDS = 2.0
_STOP = object()  # put on the queue by close(): the serving thread ends, and lets go of the model


class Batcher:
    """One per model and process; ``analyse`` may be called from any thread.

    A text longer than ``piece_tokens`` is never padded into a batch: it is scored alone, a piece at a
    time (lmviz.serving.scoring.forward_in_pieces; pieces of ``piece_tokens`` while a class is at work, longer
    ones otherwise), with the short texts waiting scored first, between two of its pieces. So one
    visitor's long texts, sent as fast as they can, delay another's sentence by one piece at most, not
    by a whole long text (benchmarks/noisy_neighbour.py). A long text waits for short ones at most
    ``long_waits_at_most`` seconds at a time, so a class that never pauses does not starve it."""

    def __init__(self, loaded, window: float = WINDOW_SECONDS, max_batch: int = MAX_BATCH,
                 piece_tokens: int = PIECE_TOKENS, long_waits_at_most: float = LONG_WAITS_AT_MOST_SECONDS):
        self.loaded, self.window, self.max_batch, self.piece_tokens = loaded, window, max_batch, piece_tokens
        self.long_waits_at_most = long_waits_at_most
        self._requests: queue.Queue = queue.Queue()
        self._long: collections.deque = collections.deque()  # long texts waiting their turn, in order
        # what was served together, for the benchmark; bounded, as a server runs for a whole course
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=10_000)
        self._closed, self._closing, self._stopping = False, threading.Lock(), False
        self._short_scored_at = -math.inf  # when a batch of short texts was last scored
        self._long_moved_at = 0.0  # when a long text waiting last started, went on a piece or arrived
        self._thread = threading.Thread(target=self._serve, daemon=True, name="lmviz-batcher")
        self._thread.start()

    def analyse(self, text: str, add_bos: bool = False, top_k: int = 5) -> ClmAnalysis:
        """Like lmviz.lessons.causal_lm.analyse_clm; bad input raises here, in the caller's thread."""
        request = make_request(self.loaded, text, add_bos, top_k)
        done: Future = Future()
        with self._closing:
            if self._closed:  # a session still holding a closed batcher: served alone, in its own thread
                return analyse_batch(self.loaded, [request])[0]
            self._requests.put((request, done))
        return done.result()

    def close(self) -> None:
        """Answer the requests already queued, then end the serving thread, and return once it has ended.

        Waiting for it matters at exit: a process that ends while the thread is still inside torch is
        aborted by the C++ runtime ("terminate called without an active exception")."""
        with self._closing:
            self._closed = True
            self._requests.put(_STOP)
        self._thread.join()

    def _serve(self) -> None:
        while not (self._stopping and not self._long):
            if self._long and (self._stopping or self._requests.empty() or self._long_waited_enough()):
                self._answer_long(self._long.popleft())
            else:
                self._take(self._requests.get())

    def _between_pieces(self) -> None:
        """The short texts that arrived while a long one was being read, and any that come while they are
        scored, until none waits or the long one has waited long_waits_at_most (after one batch at least)."""
        self._long_moved_at = time.monotonic()
        while True:
            try:
                self._take(self._requests.get_nowait())
            except queue.Empty:
                return
            if self._long_waited_enough():
                return

    def _next_piece_tokens(self) -> int:
        class_at_work = time.monotonic() - self._short_scored_at < CLASS_AT_WORK_SECONDS
        return self.piece_tokens if class_at_work else ALONE_PIECES_LONGER * self.piece_tokens

    def _long_waited_enough(self) -> bool:
        return time.monotonic() - self._long_moved_at >= self.long_waits_at_most

    def _take(self, item) -> None:
        """Answer ``item`` with the short texts that come within the window, or set it aside
        (a long text, the stop signal)."""
        if item is _STOP:
            self._stopping = True  # nothing comes after it: close() put it last
        elif len(item[0].ids) > self.piece_tokens:
            if not self._long:
                self._long_moved_at = time.monotonic()  # it starts waiting now
            self._long.append(item)
        else:
            self._answer(self._gather(item))
            self._short_scored_at = time.monotonic()

    def _gather(self, first) -> list:
        batch = [first]
        deadline = time.monotonic() + self.window
        while len(batch) < self.max_batch:
            try:
                item = self._requests.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP or len(item[0].ids) > self.piece_tokens:
                self._take(item)  # set aside, served after this batch
                continue
            batch.append(item)
        self.batch_sizes.append(len(batch))
        return batch

    def _answer_long(self, item) -> None:
        request, done = item
        self.batch_sizes.append(1)
        try:
            done.set_result(analyse_batch(self.loaded, [request], between_pieces=self._between_pieces,
                                          piece_tokens=self._next_piece_tokens)[0])
        except Exception as error:  # NotEnoughMemory among others: the caller shows it, the others go on
            done.set_exception(error)
        self._long_moved_at = time.monotonic()  # the next long text, if any, starts waiting now

    def _answer(self, batch: list) -> None:
        try:
            results = analyse_batch(self.loaded, [request for request, _ in batch])
        except NotEnoughMemory as error:
            if len(batch) == 1:
                batch[0][1].set_exception(error)
                return
            for item in batch:  # on a small GPU: one text's scores must not sink the others'
                self._answer([item])
            return
        except Exception as error:  # every waiting caller gets the error, none waits forever
            for _, done in batch:
                done.set_exception(error)
            return
        for (_, done), result in zip(batch, results):
            done.set_result(result)
