"""Serving a whole class at once: requests that arrive together share one forward pass.

Thirty students pressing Enter within a second each start a Streamlit script
run, in its own thread. Run one by one, each waits for all the others; run at
the same time, they fight over the same CPU cores. A ``Batcher`` instead
collects the requests that arrive within a few milliseconds and scores them
as one padded batch (lmviz.analysis.analyse_batch), then hands each thread its
own result.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from concurrent.futures import Future

from lmviz.analysis import ClmAnalysis, NotEnoughMemory, analyse_batch, make_request

WINDOW_SECONDS = 0.01  # how long the first request of a batch waits for company
MAX_BATCH = 32
MAX_BATCH_TOKENS = 8192  # a few long texts are better scored apart: padding costs memory
_STOP = object()  # put on the queue by close(): the serving thread ends, and lets go of the model


class Batcher:
    """One per model and process; ``analyse`` may be called from any thread."""

    def __init__(self, loaded, window: float = WINDOW_SECONDS, max_batch: int = MAX_BATCH):
        self.loaded, self.window, self.max_batch = loaded, window, max_batch
        self._requests: queue.Queue = queue.Queue()
        # what was served together, for the benchmark; bounded, as a server runs for a whole course
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=10_000)
        self._closed, self._closing = False, threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="lmviz-batcher")
        self._thread.start()

    def analyse(self, text: str, add_bos: bool = False, top_k: int = 5) -> ClmAnalysis:
        """Like lmviz.analysis.analyse_clm; bad input raises here, in the caller's thread."""
        request = make_request(self.loaded, text, add_bos, top_k)
        done: Future = Future()
        with self._closing:
            if self._closed:  # a session still holding a closed batcher: served alone, in its own thread
                return analyse_batch(self.loaded, [request])[0]
            self._requests.put((request, done))
        return done.result()

    def close(self) -> None:
        """End the serving thread once the requests already queued are answered."""
        with self._closing:
            self._closed = True
            self._requests.put(_STOP)

    def _gather(self, first) -> list:
        batch = [first]
        deadline = time.monotonic() + self.window
        tokens = len(batch[0][0].ids)
        while len(batch) < self.max_batch and tokens < MAX_BATCH_TOKENS:
            try:
                item = self._requests.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                self._requests.put(item)  # served after this batch
                break
            batch.append(item)
            tokens += len(item[0].ids)
        return batch

    def _serve(self) -> None:
        while (first := self._requests.get()) is not _STOP:
            batch = self._gather(first)
            self.batch_sizes.append(len(batch))
            self._answer(batch)

    def _answer(self, batch: list) -> None:
        try:
            results = analyse_batch(self.loaded, [request for request, _ in batch])
        except NotEnoughMemory as error:
            if len(batch) == 1:
                batch[0][1].set_exception(error)
                return
            for item in batch:  # one long text must not sink the short ones that came with it
                self._answer([item])
            return
        except Exception as error:  # every waiting caller gets the error, none waits forever
            for _, done in batch:
                done.set_exception(error)
            return
        for (_, done), result in zip(batch, results):
            done.set_result(result)
