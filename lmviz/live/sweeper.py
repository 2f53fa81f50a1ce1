"""The live class's sweep on its own schedule, so that what the docs promise happens whether or not anyone opens
a room: a room nobody has used for IDLE_HOURS is closed and its students' sentences deleted, and what closed more
than LMVIZ_LIVE_KEEP_HOURS ago is deleted.

Every serving process runs one sweeper thread (lmviz.app.live starts it at the first page any browser opens),
sweeping every SWEEP_EVERY_S seconds. With PostgreSQL every replica sweeps: Store.sweep takes a transaction-scoped
lock, so two sweeps run one after the other, and the second finds nothing left to do. A host whose server may
sit unvisited can also run ``python -m lmviz live sweep`` from cron.

No Streamlit and no torch here: the clock and the store are arguments, so tests run it on both back ends."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lmviz.live.codes import LiveProblem
from lmviz.live.store import Store, Swept

SWEEP_EVERY_S = 60  # a forgotten room's sentences go at most this long after its IDLE_HOURS
_LOG = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, store: Callable[[], Store], every_s: float = SWEEP_EVERY_S,
                 clock: Callable[[], float] = time.time):
        self._store, self.every_s, self._clock = store, every_s, clock
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.rounds = 0  # sweeps done, for the tests

    def sweep_once(self) -> Swept | None:
        """One sweep; None when the database cannot be used now (said in the log, tried again next round)."""
        try:
            swept = self._store().sweep(now=self._clock())
        except LiveProblem as problem:
            _LOG.warning("The live class's sweep could not run: %s", problem)
            return None
        self.rounds += 1
        return swept

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lmviz-live-sweeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep_once()
            except Exception:  # a database error the store has no sentence for: the next round tries again
                _LOG.exception("The live class's sweep failed")
            self._stop.wait(self.every_s)


_sweeper: Sweeper | None = None
_lock = threading.Lock()


def sweep_in_background(store: Callable[[], Store]) -> Sweeper:
    """This process's sweeper, started on the first call."""
    global _sweeper
    with _lock:
        if _sweeper is None:
            _sweeper = Sweeper(store)
            _sweeper.start()
        return _sweeper
