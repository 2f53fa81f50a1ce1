"""A waiting phone costs the server nothing: its page is drawn again only when what it shows changes.

A phone that polled (a fragment re-run every 2 s) cost the server 0.074 of a core while it only waited, so that
about 25 waiting phones filled two cores. Here the phone's page runs no timer. Each process has one watcher
thread: once a second, if any phone on this process is in a room, it reads every watched room's state in one
query (Store.room_states: open or not, the current question and whether it is open), and asks Streamlit to run
the page again for exactly the phones whose room's state differs from the one their page shows. Between changes
a phone's only cost is its open WebSocket. With PostgreSQL, each replica's watcher reads the shared database, so
a question asked on one replica reaches the phones on the others.

What runs again is the phone's fragment alone (the question and its answer form), as when the phone itself sends
an answer: 200 phones told at once cost 200 fragment runs, not 200 runs of the whole app. The run is requested
as Streamlit itself requests one when a source file changes (run on save), on the session's event loop, with the
session's last client state (its page and query string) and the fragment's id. That is Streamlit's internal API
(AppSession, the fragment's thread state; streamlit is pinned in requirements.txt): tests/e2e/test_live_class.py
fails if it changes under us. Where no Streamlit server runs the session (AppTest), ``watch`` does nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

from lmviz.live.codes import LiveProblem
from lmviz.live.store import Store

WATCH_S = 1.0  # how often the watcher reads the watched rooms: a question reaches the phones within about this
_LOG = logging.getLogger(__name__)


class Watcher:
    """The process's phones, each with the room it is in and the room's state its page shows."""

    def __init__(self, store: Callable[[], Store], every_s: float = WATCH_S):
        self._store, self._every_s = store, every_s
        self._lock = threading.Lock()
        # session id -> (room code, the room's state its page shows, the id of the fragment that shows it)
        self._shown: dict[str, tuple[str, tuple | None, str]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, session_id: str, code: str, state: tuple | None, fragment_id: str) -> None:
        with self._lock:
            self._shown[session_id] = (code, state, fragment_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lmviz-live-watcher", daemon=True)
                self._thread.start()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._shown.pop(session_id, None)

    def watched(self) -> int:
        """How many phones this process watches."""
        with self._lock:
            return len(self._shown)

    def _run(self) -> None:
        while True:
            time.sleep(self._every_s)
            try:
                self.check()
            except Exception:  # a database that is down for a moment: the next round tries again
                _LOG.warning("The live class's watcher could not read the rooms", exc_info=True)

    def check(self) -> list[str]:
        """One round: the sessions told to draw their page again."""
        with self._lock:
            shown = dict(self._shown)
        if not shown:
            return []
        try:
            states = self._store().room_states(sorted({code for code, _, _ in shown.values()}))
        except LiveProblem:
            return []
        pushed = []
        for session_id, (code, state, fragment_id) in shown.items():
            session = _active_session(session_id)
            if session is None:
                # A phone away (its screen locked, its WebSocket closed) keeps its place, and is told what changed
                # once it is back: Streamlit's page does not run itself again on reconnecting. A session that has
                # ended is forgotten.
                if not _kept_session(session_id):
                    self.forget(session_id)
                continue
            now = states.get(code)
            if now != state:
                with self._lock:  # one push per change: the run it starts says what it then shows
                    if self._shown.get(session_id) == (code, state, fragment_id):
                        self._shown[session_id] = (code, now, fragment_id)
                _rerun(session, fragment_id)
                pushed.append(session_id)
        return pushed


def serving() -> bool:
    """Whether a Streamlit server runs this process (AppTest's runtime is a stand-in)."""
    return Runtime.exists() and type(Runtime.instance()) is Runtime


def _active_session(session_id: str):
    """The session's AppSession, if a Streamlit server runs it now."""
    if not serving():
        return None
    info = Runtime.instance()._session_mgr.get_active_session_info(session_id)
    return None if info is None else info.session


def _kept_session(session_id: str) -> bool:
    """Whether the server still keeps the session, active or not (its browser may reconnect to it)."""
    return serving() and Runtime.instance()._session_mgr.get_session_info(session_id) is not None


def _rerun(session, fragment_id: str) -> None:
    def request() -> None:  # on the session's event loop, where its client state is read and written
        last = session._client_state
        session.request_rerun(ClientState(query_string=last.query_string, page_script_hash=last.page_script_hash,
                                          page_name=last.page_name, fragment_id=fragment_id))

    session._call_soon_on_event_loop(request)


_watcher: Watcher | None = None  # the process's one, made by the first phone watched
_watcher_lock = threading.Lock()


def watch(store: Callable[[], Store], code: str, state: tuple | None) -> bool:
    """Called in a fragment: have it run again when the room ``code`` leaves ``state`` (what it shows now).
    False where no Streamlit server runs this session (AppTest): nothing will push."""
    ctx = get_script_run_ctx()
    fragment_id = ThreadState.get().fragment_id if ctx is not None else None
    if ctx is None or not fragment_id or _active_session(ctx.session_id) is None:
        return False
    global _watcher
    with _watcher_lock:
        if _watcher is None:
            _watcher = Watcher(store)
    _watcher.watch(ctx.session_id, code, state, fragment_id)
    return True


def forget() -> None:
    """This session's page no longer shows a room."""
    ctx = get_script_run_ctx()
    if ctx is not None and _watcher is not None:
        _watcher.forget(ctx.session_id)
