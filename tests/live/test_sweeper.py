"""The sweep on its own schedule (lmviz.live.sweeper), on both back ends: a room the teacher forgets to end loses
its students' sentences within a few rounds with no room opened, two replicas sweeping at once close each room
once, and on SQLite a deleted sentence's text is left in neither the database file nor its log."""

import sqlite3
import threading
import time

from lmviz.live import store as live_store
from lmviz.live.store import IDLE_HOURS, Store
from lmviz.live.sweeper import Sweeper
from tests.live.test_store import PICKED

T0 = 1_750_000_000.0
IDLE_S = IDLE_HOURS * 3600


def forgotten_room(store: Store, text: str = "My forgotten sentence, unique 7f3a.") -> str:
    code = store.open_room(now=T0)
    store.add_sentence(code, store.join(code, now=T0), text, 2.5, now=T0, tokens=[("␣unique", 4.0)])
    return code


def until(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_forgotten_rooms_sentences_go_by_themselves_with_no_room_opened(store):
    code = forgotten_room(store)
    clock = [T0 + IDLE_S - 1]  # idle for just under the limit
    sweeper = Sweeper(lambda: store, every_s=0.02, clock=lambda: clock[0])
    sweeper.start()
    try:
        assert until(lambda: sweeper.rounds >= 3)
        assert store.room(code).is_open and len(store.sentences(code, approved_only=False)) == 1
        clock[0] = T0 + IDLE_S + 1
        assert until(lambda: not store.room(code).is_open), "the sweeper never closed the idle room"
        assert store.sentences(code, approved_only=False) == [] and store.surprising_tokens(code) == []
        clock[0] = T0 + IDLE_S + 1 + store.keep_hours * 3600 + 1
        assert until(lambda: store.room(code) is None), "the closed room was never deleted"
    finally:
        sweeper.stop()


def test_two_replicas_sweeping_at_once_close_each_room_once(store):
    codes = [forgotten_room(store, f"Sentence {n} of a forgotten room.") for n in range(12)]
    now = T0 + IDLE_S + 1
    with Store(store.url, keep_hours_after_closing=24) as replica:  # another process's connection(s)
        results, errors = [], []
        start = threading.Barrier(2)

        def sweep(on: Store):
            start.wait()
            try:
                results.append(on.sweep(now=now))
            except Exception as error:  # what a deadlock or a lost update would raise
                errors.append(error)

        threads = [threading.Thread(target=sweep, args=(on,)) for on in (store, replica)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors
    assert sorted(r.closed for r in results) == [0, 12] and sorted(r.sentences for r in results) == [0, 12]
    assert not any(store.room(code).is_open for code in codes)
    assert all(store.sentences(code, approved_only=False) == [] for code in codes)


def test_on_sqlite_a_swept_sentence_is_in_neither_the_file_nor_its_log(tmp_path, monkeypatch):
    """On an SQLite built without secure deletion by default (this machine's Debian build has it on; Python's
    own builds elsewhere may not), as every connection here starts: the store turns it on itself."""
    connect = sqlite3.connect

    def connect_without_secure_delete(*args, **kwargs):
        connection = connect(*args, **kwargs)
        connection.execute("PRAGMA secure_delete=OFF")
        return connection

    monkeypatch.setattr(live_store.sqlite3, "connect", connect_without_secure_delete)
    path = tmp_path / "live.sqlite3"
    text = "Nobody may read this sentence again, 91c2e."
    with Store(f"sqlite:///{path}") as store:
        assert store._db._connection().execute("PRAGMA secure_delete").fetchone()[0] == 1
        forgotten_room(store, text)
        store._db.checkpoint()
        assert text.encode() in path.read_bytes()  # it was written to the file: the test can see it
        swept = store.sweep(now=T0 + IDLE_S + 1)
        assert (swept.closed, swept.sentences) == (1, 1)
        for kept in (path, path.with_name(path.name + "-wal")):
            assert not kept.exists() or text.encode() not in kept.read_bytes(), kept


def test_with_nothing_kept_after_closing_an_open_rooms_question_of_now_stays(store_url):
    """LMVIZ_LIVE_KEEP_HOURS=0 deletes what closed at the next sweep, but never the question an open room shows
    now: its phones are telling their students right or wrong, and the projector shows its results."""
    with Store(store_url, keep_hours_after_closing=0) as store:
        code = store.open_room(now=T0)
        token = store.join(code, now=T0)
        first = store.ask(code, "toy", PICKED, now=T0)
        store.close_question(first.id, now=T0 + 1)
        second = store.ask(code, "toy", PICKED, now=T0 + 2)
        store.answer(second.id, token, "cat", now=T0 + 3)
        store.close_question(second.id, now=T0 + 4)
        store.sweep(now=T0 + 60)
        assert store.asked(first.id) is None  # an earlier question: gone, as the setting says
        assert store.current(code).id == second.id and store.aggregate(second.id).answered == 1
