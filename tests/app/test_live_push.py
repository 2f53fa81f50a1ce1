"""The phones' watcher (lmviz.app.live_push) without a server: one read of the store per round for every phone
of every room, and a push to exactly the phones whose room changed, once per change. The browser tests
(tests/e2e/test_live_class.py) drive the same with a real server, where a waiting phone receives nothing."""

import pytest

from lmviz.app import live_push
from lmviz.course.quiz import Question
from lmviz.live.store import Store

QUESTION = Question("which", "Which?", "cat", "It is.", "Look.", choices=("the", "cat"))


@pytest.fixture
def pushed(monkeypatch):
    """The sessions told to run again, in order; every session id counts as a live session."""
    told = []
    monkeypatch.setattr(live_push, "_active_session", lambda session_id: session_id)
    monkeypatch.setattr(live_push, "_rerun", lambda session, fragment_id: told.append((session, fragment_id)))
    return told


def test_one_read_a_round_and_a_push_only_where_the_room_changed(tmp_path, pushed, monkeypatch):
    with Store(f"sqlite:///{tmp_path / 'live.sqlite3'}") as store:
        reads = []
        room_states = store.room_states
        monkeypatch.setattr(store, "room_states", lambda codes: reads.append(codes) or room_states(codes))
        watcher = live_push.Watcher(lambda: store, every_s=3600)  # its thread sleeps: the test runs the rounds
        first, second = store.open_room(), store.open_room()
        for session, code in (("a", first), ("b", first), ("c", second)):
            watcher.watch(session, code, store.room_states([code])[code], f"fragment-{session}")
        reads.clear()
        assert watcher.check() == [] and len(reads) == 1  # nothing changed: one read for the three phones

        asked = store.ask(first, "toy", QUESTION)
        assert sorted(watcher.check()) == ["a", "b"] and len(reads) == 2
        assert sorted(pushed) == [("a", "fragment-a"), ("b", "fragment-b")]
        assert watcher.check() == []  # one push per change, whether or not the run it started has reported back

        store.answer(asked.id, store.join(first), "cat")
        store.reveal(asked.id)
        assert watcher.check() == []  # what a phone shows does not change with an answer or Reveal
        store.close_room(second)
        assert watcher.check() == ["c"]
        watcher.forget("c")
        store.close_room(first)
        assert sorted(watcher.check()) == ["a", "b"] and len(reads) == 6


def test_a_phone_away_is_told_once_back_an_ended_one_is_forgotten_a_broken_store_pushes_nothing(
        tmp_path, pushed, monkeypatch):
    with Store(f"sqlite:///{tmp_path / 'live.sqlite3'}") as store:
        watcher = live_push.Watcher(lambda: store, every_s=3600)
        code = store.open_room()
        watcher.watch("away", code, None, "fragment")
        monkeypatch.setattr(live_push, "_active_session", lambda session_id: None)
        monkeypatch.setattr(live_push, "_kept_session", lambda session_id: True)  # its screen locked
        assert watcher.check() == [] and watcher.watched() == 1 and pushed == []
        monkeypatch.setattr(live_push, "_active_session", lambda session_id: session_id)  # back: told at once
        assert watcher.check() == ["away"] and pushed == [("away", "fragment")]
        monkeypatch.setattr(live_push, "_active_session", lambda session_id: None)
        monkeypatch.setattr(live_push, "_kept_session", lambda session_id: False)  # its session ended
        assert watcher.check() == [] and watcher.watched() == 0
    broken = live_push.Watcher(lambda: Store("nowhere://"), every_s=3600)
    broken.watch("a", "ABCDE", None, "fragment")
    assert broken.check() == [] and pushed == [("away", "fragment")]


def test_under_apptest_nothing_is_watched():
    assert not live_push.serving()
