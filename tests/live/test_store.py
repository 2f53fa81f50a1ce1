"""The live class's store, every test on both back ends (SQLite and a real PostgreSQL, tests/live/conftest.py):
what is kept and for how long, the rules of a vote, the limits and their sentences, and a room of 200 phones
answering at once."""

import csv
import io
import math
import sqlite3
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lmviz.course.quiz import Question, check
from lmviz.errors import LearnerError
from lmviz.live import store as live
from lmviz.live.codes import WrongCode
from lmviz.live.store import (
    MIN_SHOWN,
    NotAnAnswer,
    NotInRoom,
    QuestionClosed,
    RoomClosed,
    RoomFull,
    SentenceRefused,
    Store,
    StoreUnavailable,
    TooManyRooms,
    freeze,
    thaw,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0  # the tests' clock: a fixed moment, in seconds since the epoch
HOUR = 3600.0
FUTURE = 10  # seconds a thread pool may take to finish its work; far more than it needs

PICKED = Question("which", "Which token did the model find most surprising?", "cat", "Its loss is the highest.",
                  "Look at the loss column.", choices=("the", "cat", "sat"))
TYPED = Question("loss", "What is −log 0.5?", 0.6931471805599453, "−log 0.5 = log 2.", "It is log 2.", digits=2)
COUNTED = Question("count", "How many tokens does the model predict?", 7, "One fewer than the tokens.",
                   "Count the rows of the table.", digits=0)
TABLED = Question("which", "Which row adds most to the loss?", "1: cat", "Its p is the smallest.", "Compare the p.",
                  choices=("0: the", "1: cat"), table=(("row", "p"), ("0: the", "0.5"), ("1: cat", "0.25")))


def one_sentence(problem: Exception) -> str:
    text = str(problem)
    assert isinstance(problem, LearnerError), type(problem)
    assert text.endswith(".") and "\n" not in text and "Traceback" not in text, text
    return text


def room_with(store, phones: int, question=PICKED, now=T0):
    code = store.open_room(now=now)
    tokens = [store.join(code, now=now) for _ in range(phones)]
    asked = store.ask(code, "next_token", question, {"text": "The cat sat."}, now=now)
    return code, tokens, asked


def columns(store) -> dict[str, list[str]]:
    """Every table's columns, read from the database itself."""
    if store.backend == "sqlite":
        with sqlite3.connect(store.url.removeprefix("sqlite:///")) as connection:
            tables = [t for (t,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: [row[1] for row in connection.execute(f"PRAGMA table_info({t})")] for t in tables}
    import psycopg

    with psycopg.connect(store.url, connect_timeout=10) as connection:
        rows = connection.execute("SELECT table_name, column_name FROM information_schema.columns "
                                  "WHERE table_schema = 'public' ORDER BY ordinal_position").fetchall()
    found = {}
    for table, column in rows:
        found.setdefault(table, []).append(column)
    return found


def stored_answers(store, table: str = "live_answers") -> int:
    """The rows of a table (the answers by default), read from the database itself."""
    if store.backend == "sqlite":
        with sqlite3.connect(store.url.removeprefix("sqlite:///")) as connection:
            return connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    import psycopg

    with psycopg.connect(store.url, connect_timeout=10) as connection:
        return connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


# what is kept


def test_sqlite_writes_ahead_and_postgresql_has_no_journal_mode(store):
    if store.backend == "sqlite":
        assert store.journal_mode() == "wal"
        with sqlite3.connect(store.url.removeprefix("sqlite:///")) as connection:  # the file's own setting
            assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    else:
        assert store.journal_mode() is None


PERSONAL = ("address", "agent", "name", "mail", "host", "phone", "browser", "device")


def test_no_table_has_a_column_for_anything_personal(store):
    tables = columns(store)
    assert {"live_rooms", "live_participants", "live_questions", "live_answers", "live_sentences",
            "live_sentence_tokens"} <= set(tables)
    for table, names in tables.items():
        for column in names:
            parts = column.lower().split("_")
            assert not any(word in column.lower() for word in PERSONAL) and not {"ip", "ua"} & set(parts), \
                f"{table}.{column} looks personal"


def test_a_question_is_frozen_as_data_with_the_pages_inputs(store):
    code, _, asked = room_with(store, 1, TYPED)
    assert asked.question == TYPED and asked.vote == 1 and asked.number == 1 and asked.is_open
    assert store.asked(asked.id) == asked
    assert store.current(code) == asked
    assert asked.url_state == {"text": "The cat sat."}
    assert freeze(TYPED)["tolerance"] == TYPED.tolerance
    for question in (PICKED, TYPED, COUNTED, TABLED):
        assert thaw(freeze(question)) == question
    code, _, asked = room_with(store, 1, TABLED)
    assert asked.question.table == TABLED.table  # what a phone shows under it, read back from the database


def test_a_numpy_answer_is_frozen_as_a_plain_number():
    import numpy as np

    question = Question("count", "How many tokens are masked?", np.int64(3), "r", "h", digits=0)
    frozen = freeze(question)
    assert type(frozen["answer"]) is int and thaw(frozen) == question


def test_asking_closes_the_question_before_and_numbers_them(store):
    code, _, first = room_with(store, 1)
    second = store.ask(code, "next_token", TYPED, now=T0 + 60)
    assert not store.asked(first.id).is_open and second.number == 2
    assert [a.id for a in store.questions(code)] == [first.id, second.id]


# joining


def test_a_reload_keeps_its_token_and_another_rooms_token_is_not_carried(store):
    code, other = store.open_room(now=T0), store.open_room(now=T0)
    token = store.join(code.lower(), now=T0)
    assert store.join(code, token, now=T0) == token
    assert store.join(other, token, now=T0) != token
    assert store.join(code, "forged-token-of-the-right-shape", now=T0) != token
    assert store.room(code).participants == 2


def test_a_wrong_or_ended_code_gives_one_sentence(store):
    code = store.open_room(now=T0)
    wrong = "ZZZZZ" if code != "ZZZZZ" else "YYYYY"
    with pytest.raises(WrongCode) as raised:
        store.join(wrong, now=T0)
    assert wrong in one_sentence(raised.value)
    with pytest.raises(WrongCode):
        store.join("O0O0O", now=T0)
    store.close_room(code, now=T0)
    with pytest.raises(RoomClosed) as raised:
        store.join(code, now=T0)
    assert "ended" in one_sentence(raised.value)


def test_the_limits_of_a_room_and_of_the_server_give_a_sentence(store, monkeypatch):
    monkeypatch.setattr(live, "MAX_PARTICIPANTS", 3)
    monkeypatch.setattr(live, "MAX_OPEN_ROOMS", 2)
    code = store.open_room(now=T0)
    tokens = [store.join(code, now=T0) for _ in range(3)]
    with pytest.raises(RoomFull) as raised:
        store.join(code, now=T0)
    assert "3 phones" in one_sentence(raised.value)
    assert store.join(code, tokens[0], now=T0) == tokens[0]  # one already in may come back
    store.open_room(now=T0)
    with pytest.raises(TooManyRooms) as raised:
        store.open_room(now=T0)
    one_sentence(raised.value)
    store.close_room(code, now=T0)
    store.open_room(now=T0)  # a closed room does not count


def test_the_real_limits_are_the_issues():
    assert (live.MAX_PARTICIPANTS, live.MAX_OPEN_ROOMS, live.IDLE_HOURS, live.KEEP_HOURS, live.MIN_SHOWN,
            live.MAX_SENTENCE) == (300, 50, 3, 24, 5, 200)


# answering


def test_the_last_answer_from_a_phone_wins(store):
    _, (token, other), asked = room_with(store, 2)
    assert store.answer(asked.id, token, "the", now=T0).right is False
    assert store.answer(asked.id, token, "cat", now=T0 + 1).right is True
    store.answer(asked.id, other, "sat", now=T0 + 2)
    assert store.my_answer(asked.id, token) == "cat"
    assert store.aggregate(asked.id).answered == 2
    assert stored_answers(store) == 2


def test_a_closed_question_refuses_and_keeps_what_was_sent(store):
    code, (token,), asked = room_with(store, 1)
    store.answer(asked.id, token, "cat", now=T0)
    store.close_question(asked.id, now=T0 + 10)
    with pytest.raises(QuestionClosed) as raised:
        store.answer(asked.id, token, "the", now=T0 + 11)
    assert "closed" in one_sentence(raised.value)
    assert store.my_answer(asked.id, token) == "cat"


def test_an_answer_read_open_but_closed_before_its_write_is_refused_and_not_stored(store, monkeypatch):
    """The moment the answer's SQL guard is for: the phone's read of the question found it open, and the teacher
    closed it before the phone's write. The stale read is made exactly that, so only the guard can refuse."""
    _, (token,), asked = room_with(store, 1)
    read_while_open = store.asked(asked.id)
    store.close_question(asked.id, now=T0 + 5)
    monkeypatch.setattr(store, "asked", lambda question_id: read_while_open)
    with pytest.raises(QuestionClosed) as raised:
        store.answer(asked.id, token, "cat", now=T0 + 6)
    assert "just closed" in one_sentence(raised.value)
    assert store.my_answer(asked.id, token) is None and stored_answers(store) == 0


def test_what_is_not_an_answer_gets_the_quizs_sentence_and_is_not_stored(store):
    _, (token,), asked = room_with(store, 1, TYPED)
    for given in ("", "   ", "abc", "1e999", None):
        with pytest.raises(NotAnAnswer) as raised:
            store.answer(asked.id, token, given, now=T0)
        assert one_sentence(raised.value) == check(TYPED, given).message
    _, (token,), picked = room_with(store, 1, PICKED)
    with pytest.raises(NotAnAnswer) as raised:
        store.answer(picked.id, token, "dog", now=T0)
    one_sentence(raised.value)
    assert stored_answers(store) == 0


def test_a_room_is_run_by_the_secret_it_was_opened_with_and_by_nothing_else(store):
    code = store.open_room(now=T0, teacher_secret="the-teachers-own-secret-0123")
    other = store.open_room(now=T0, teacher_secret="another-teachers-secret-4567")
    assert store.is_teacher(code, "the-teachers-own-secret-0123")
    for wrong in (None, "", code, "another-teachers-secret-4567", "the-teachers-own-secret-012"):
        assert not store.is_teacher(code, wrong)
    assert not store.is_teacher(store.open_room(now=T0), code)  # a room opened without a secret: nobody's
    with store._db.transaction(write=False) as tx:  # the database keeps a hash, never the secret
        kept = [row[0] for row in tx.all("SELECT secret_hash FROM live_teachers")]
    assert len(kept) == 2 and not {"the-teachers-own-secret-0123", "another-teachers-secret-4567"} & set(kept)
    store.close_room(code, now=T0 + 1)
    assert not store.is_teacher(code, "the-teachers-own-secret-0123") and store.is_teacher(
        other, "another-teachers-secret-4567")


def test_the_rooms_states_change_exactly_when_what_a_phone_shows_does(store):
    code, (token,), asked = room_with(store, 1)
    empty = store.open_room(now=T0)
    states = store.room_states([code, empty, "NONE2"])
    assert states == {code: (True, asked.id, True), empty: (True, None, None)}
    store.answer(asked.id, token, "cat", now=T0 + 1)
    store.reveal(asked.id)
    assert store.room_states([code])[code] == states[code]  # an answer or Reveal changes no phone's page
    store.close_question(asked.id, now=T0 + 2)
    assert store.room_states([code])[code] == (True, asked.id, False)
    again = store.ask_again(asked.id, now=T0 + 3)
    assert store.room_states([code])[code] == (True, again.id, True)
    store.close_room(code, now=T0 + 4)
    assert store.room_states([code])[code] == (False, again.id, False)
    assert store.room_states([]) == {}


def test_a_phone_not_in_the_room_is_refused(store):
    _, _, asked = room_with(store, 1)
    other = store.open_room(now=T0)
    stranger = store.join(other, now=T0)
    with pytest.raises(NotInRoom) as raised:
        store.answer(asked.id, stranger, "cat", now=T0)
    one_sentence(raised.value)
    assert stored_answers(store) == 0


def test_under_five_answers_only_their_count_is_shown(store):
    _, tokens, asked = room_with(store, MIN_SHOWN)
    for token in tokens[:-1]:
        store.answer(asked.id, token, "cat", now=T0)
    hidden = store.aggregate(asked.id)
    assert (hidden.answered, hidden.shown, hidden.counts, hidden.share_right) == (MIN_SHOWN - 1, False, (), None)
    store.answer(asked.id, tokens[-1], "the", now=T0)
    shown = store.aggregate(asked.id)
    assert shown.shown and shown.answered == MIN_SHOWN
    assert [(c.answer, c.count, c.right) for c in shown.counts] == [("the", 1, 0), ("cat", 4, 4), ("sat", 0, 0)]
    assert shown.share_right == pytest.approx(4 / 5)


TYPED_ANSWERS = ["0.69", "0,69", " 0.693 ", "0.6931", "0.7", "1", "-0.001", "−0.7", "0.684", "0.6815"]


def test_typed_numbers_are_binned_at_the_questions_digits_and_checked_as_the_quiz_checks(store):
    _, tokens, asked = room_with(store, len(TYPED_ANSWERS), TYPED)
    verdicts = [store.answer(asked.id, token, given, now=T0) for token, given in zip(tokens, TYPED_ANSWERS)]
    expected = [check(TYPED, given).right for given in TYPED_ANSWERS]
    assert [v.right for v in verdicts] == expected
    result = store.aggregate(asked.id)
    assert result.share_right == pytest.approx(sum(expected) / len(expected))
    # 0.6815 is 0.68 at 2 digits but more than 0.01 from 0.69315: a bin may hold right and wrong answers
    assert [(c.answer, c.count, c.right) for c in result.counts] == [
        ("-0.70", 1, 0), ("0.00", 1, 0), ("0.68", 2, 1), ("0.69", 4, 4), ("0.70", 1, 1), ("1.00", 1, 0)]
    assert sum(c.right for c in result.counts) == sum(expected)


def test_a_count_is_binned_at_whole_numbers_and_checked_exactly(store):
    _, tokens, asked = room_with(store, 6, COUNTED)
    for token, given in zip(tokens, ["7", "7.0", " 7 ", "8", "6.9", "70"]):
        store.answer(asked.id, token, given, now=T0)
    result = store.aggregate(asked.id)
    assert [(c.answer, c.count, c.right) for c in result.counts] == [("7", 4, 3), ("8", 1, 0), ("70", 1, 0)]
    assert result.share_right == pytest.approx(3 / 6)


def test_the_second_vote_is_counted_apart_from_the_first(store):
    code, tokens, first = room_with(store, 6)
    for token in tokens:
        store.answer(first.id, token, "the", now=T0)
    second = store.ask_again(first.id, now=T0 + 60)
    assert (second.number, second.vote, second.question, second.url_state) == (1, 2, PICKED, first.url_state)
    assert not store.asked(first.id).is_open
    with pytest.raises(QuestionClosed):
        store.answer(first.id, tokens[0], "cat", now=T0 + 61)
    for token in tokens[:5]:
        store.answer(second.id, token, "cat", now=T0 + 62)
    before, after = store.aggregate(first.id), store.aggregate(second.id)
    assert (before.answered, before.share_right) == (6, 0.0)
    assert (after.answered, after.share_right) == (5, 1.0)
    assert [(a.number, a.vote) for a in store.questions(code)] == [(1, 1), (1, 2)]
    for again in (first.id, second.id):
        with pytest.raises(LearnerError) as raised:
            store.ask_again(again, now=T0 + 70)
        one_sentence(raised.value)


def test_reveal_is_kept_per_vote(store):
    code, _, first = room_with(store, 1)
    second = store.ask_again(first.id, now=T0 + 1)
    store.reveal(second.id)
    assert [a.revealed for a in store.questions(code)] == [False, True]


def test_the_aggregates_download_as_csv_per_question_and_vote(store):
    code, tokens, first = room_with(store, 6)
    for token, given in zip(tokens, ["cat", "cat", "cat", "the", "sat", "cat"]):
        store.answer(first.id, token, given, now=T0)
    second = store.ask_again(first.id, now=T0 + 60)
    store.answer(second.id, tokens[0], "cat", now=T0 + 61)
    rows = list(csv.DictReader(io.StringIO(store.aggregates_csv(code))))
    assert [(r["question"], r["vote"], r["answer"], r["count"], r["right"]) for r in rows] == [
        ("1", "1", "the", "1", "0"), ("1", "1", "cat", "4", "4"), ("1", "1", "sat", "1", "0"),
        ("1", "2", "fewer than 5 answers: not shown", "", "")]
    assert {r["share_right"] for r in rows[:3]} == {"0.6667"} and rows[3]["answered"] == "1"
    assert rows[0]["key"] == "which" and rows[0]["lesson"] == "next_token" and rows[0]["asked"] == PICKED.ask


def test_a_csv_cell_a_spreadsheet_would_run_is_written_as_text(store):
    """A choice can be a token a student typed ("=1+1", "@SUM(A1)"): the CSV writes it with a leading ', and
    typed numbers, "-0.5" among them, as numbers."""
    formula = Question("which", "=HYPERLINK(\"x\") which token?", "=1+1", "r.", "h.", choices=("=1+1", "@SUM(A1)", "a"))
    code, tokens, asked = room_with(store, 5, question=formula)
    for token, given in zip(tokens, ["=1+1", "=1+1", "@SUM(A1)", "a", "a"]):
        store.answer(asked.id, token, given, now=T0)
    rows = list(csv.DictReader(io.StringIO(store.aggregates_csv(code))))
    assert [r["answer"] for r in rows] == ["'=1+1", "'@SUM(A1)", "a"]
    assert rows[0]["asked"] == "'" + formula.ask
    code, tokens, asked = room_with(store, 5, question=TYPED)
    for token in tokens:
        store.answer(asked.id, token, "-0.5", now=T0)
    assert [r["answer"] for r in csv.DictReader(io.StringIO(store.aggregates_csv(code)))] == ["-0.50"]


# keeping and deleting


def test_the_sweep_deletes_exactly_what_closed_more_than_the_keep_time_ago(store):
    def answered_room(now):
        code, (token, *_), asked = room_with(store, 1, now=now)
        store.answer(asked.id, token, "cat", now=now)
        return code, asked

    old, old_q = answered_room(T0)
    store.close_room(old, now=T0)
    edge, _ = answered_room(T0 + HOUR)
    store.close_room(edge, now=T0 + HOUR)
    idle, _ = answered_room(T0 + HOUR)
    busy, busy_q = answered_room(T0)  # open and used all along, with a question closed long ago
    store.close_question(busy_q.id, now=T0)
    newer = store.ask(busy, "next_token", PICKED, now=T0 + 24.5 * HOUR)
    now = T0 + 25 * HOUR  # the old room closed 25 h ago, the edge room exactly 24 h ago
    store.sweep(now=now)
    assert store.room(old) is None and store.asked(old_q.id) is None
    assert store.room(edge) is not None and not store.room(edge).is_open
    assert store.room(idle).closed_at == now  # idle for 24 h: closed now, kept 24 h more
    assert store.room(busy).is_open
    assert [a.id for a in store.questions(busy)] == [newer.id]
    assert stored_answers(store) == 2  # the edge room's and the idle room's
    store.sweep(now=now + 24 * HOUR + 1)
    assert store.room(edge) is None and store.room(idle) is None and stored_answers(store) == 0


def test_a_room_idle_for_three_hours_is_closed_and_opening_a_room_sweeps(store, monkeypatch):
    monkeypatch.setattr(live, "MAX_OPEN_ROOMS", 1)
    code = store.open_room(now=T0)
    store.join(code, now=T0 + HOUR)
    store.sweep(now=T0 + 4 * HOUR - 1)
    assert store.room(code).is_open  # used an hour after it opened: idle for just under 3 h
    store.open_room(now=T0 + 4 * HOUR + 1)  # the limit is one room, and the idle one is closed first
    assert not store.room(code).is_open


def test_closing_a_room_deletes_its_sentences_at_once(store):
    code, (token, other), asked = room_with(store, 2)
    first = store.add_sentence(code, token, "The cat sat on the mat.", 3.2, now=T0)
    store.add_sentence(code, other, "A dog ran.", None, now=T0)
    store.approve_sentence(first)
    assert [s.sentence for s in store.sentences(code)] == ["The cat sat on the mat."]
    assert len(store.sentences(code, approved_only=False)) == 2
    kept = store.open_room(now=T0)
    store.add_sentence(kept, store.join(kept, now=T0), "Another room's.", 1.0, now=T0)
    store.close_room(code, now=T0 + 60)
    assert store.sentences(code, approved_only=False) == []
    assert len(store.sentences(kept, approved_only=False)) == 1
    assert not store.asked(asked.id).is_open
    with pytest.raises(RoomClosed):
        store.add_sentence(code, token, "Too late.", 1.0, now=T0 + 61)


def test_a_sentence_empty_too_long_or_too_soon_gets_a_sentence(store):
    code, (token,), _ = room_with(store, 1)
    for text in ("", "   ", "x" * (live.MAX_SENTENCE + 1)):
        with pytest.raises(SentenceRefused) as raised:
            store.add_sentence(code, token, text, 1.0, now=T0)
        one_sentence(raised.value)
    store.add_sentence(code, token, "x" * live.MAX_SENTENCE, 1.0, now=T0)
    with pytest.raises(SentenceRefused) as raised:
        store.add_sentence(code, token, "Again.", 1.0, now=T0 + 10)
    assert "20 s" in one_sentence(raised.value)
    store.add_sentence(code, token, "Again.", 1.0, now=T0 + live.SENTENCE_PAUSE_S)


def test_the_rooms_sentences_as_numbers_every_sentence_sent_and_from_5_on(store):
    code = store.open_room(now=T0)
    losses = [3.5, 2.25, None, 4.0, 1.75]
    for i, loss in enumerate(losses):
        store.add_sentence(code, store.join(code, now=T0), f"Sentence {i}.", loss, now=T0)
    few = store.sentence_numbers(code)
    assert (few.sent, few.scored, few.shown, few.mean, few.spread) == (5, 4, False, None, None)  # 4 with a loss
    store.add_sentence(code, store.join(code, now=T0), "One more.", 5.5, now=T0)
    numbers = store.sentence_numbers(code)
    scored = [3.5, 2.25, 4.0, 1.75, 5.5]
    assert (numbers.sent, numbers.scored, numbers.shown) == (6, 5, True)
    assert numbers.mean == pytest.approx(statistics.mean(scored))
    assert numbers.spread == pytest.approx(statistics.pstdev(scored))  # of these sentences: divided by their number
    assert (numbers.low, numbers.high) == (1.75, 5.5)
    assert store.sentence_numbers(store.open_room(now=T0)) == live.SentenceNumbers(0, 0)


def test_the_surprising_tokens_come_from_approved_sentences_only_and_go_with_the_room(store):
    code, (a, b, c), _ = room_with(store, 3)
    first = store.add_sentence(code, a, "The cat sat.", 3.0, now=T0, tokens=[("␣cat", 6.5), ("␣sat", 2.0), (".", 0.5)])
    second = store.add_sentence(code, b, "The cat ran.", 2.0, now=T0, tokens=[("␣cat", 4.0), ("␣ran", 3.0)])
    store.add_sentence(code, c, "Rude words.", 9.0, now=T0, tokens=[("␣Rude", 12.0), ("␣words", 8.0)])
    assert store.surprising_tokens(code) == []  # nothing approved: no piece of any text
    store.approve_sentence(first)
    store.approve_sentence(second)
    assert store.surprising_tokens(code) == [live.Surprise("␣cat", 6.5, 2), live.Surprise("␣ran", 3.0, 1),
                                             live.Surprise("␣sat", 2.0, 1), live.Surprise(".", 0.5, 1)]
    assert [t.token for t in store.surprising_tokens(code, limit=2)] == ["␣cat", "␣ran"]
    assert stored_answers(store, "live_sentence_tokens") == 7
    store.close_room(code, now=T0 + 60)
    assert store.surprising_tokens(code) == [] and stored_answers(store, "live_sentence_tokens") == 0


def test_a_removed_sentence_is_gone_from_the_queue_the_numbers_and_the_tokens(store):
    code, (a, b), _ = room_with(store, 2)
    kept = store.add_sentence(code, a, "The cat sat.", 3.0, now=T0, tokens=[("␣cat", 6.5)])
    removed = store.add_sentence(code, b, "Rude words.", 9.0, now=T0, tokens=[("␣Rude", 12.0), ("␣words", 8.0)])
    store.remove_sentence(removed)
    assert [s.id for s in store.sentences(code, approved_only=False)] == [kept]
    assert store.sentence_numbers(code).sent == 1 and stored_answers(store, "live_sentence_tokens") == 1


def test_a_loss_that_is_not_a_finite_number_is_not_stored(store):
    code, (token,), _ = room_with(store, 1)
    for loss, tokens in ((math.inf, ()), (1.0, [("x", math.nan)])):
        with pytest.raises(ValueError):
            store.add_sentence(code, token, "A sentence.", loss, now=T0, tokens=tokens)
    assert store.sentences(code, approved_only=False) == []


def test_check_sentence_strips_and_refuses_as_add_sentence_does():
    assert live.check_sentence("  A cat.\n") == "A cat."
    for text in (None, "", " \n ", "x" * (live.MAX_SENTENCE + 1)):
        with pytest.raises(SentenceRefused) as raised:
            live.check_sentence(text)
        one_sentence(raised.value)


# a room of 200


def test_200_phones_answering_at_once_lose_no_answer_and_count_none_twice(store):
    phones = 200
    code = store.open_room(now=T0)
    start = threading.Barrier(phones, timeout=FUTURE)

    def join(_):
        start.wait()
        return store.join(code, now=T0)

    with ThreadPoolExecutor(max_workers=phones) as pool:
        tokens = list(pool.map(join, range(phones), timeout=FUTURE * 3))
    assert len(set(tokens)) == phones and store.room(code).participants == phones
    asked = store.ask(code, "next_token", PICKED, now=T0)
    first = {token: "the" for token in tokens}
    last = {token: "sat" if i % 4 else "cat" for i, token in enumerate(tokens)}  # every phone changes its mind
    go = threading.Barrier(phones, timeout=FUTURE)

    def answer(token):
        go.wait()
        store.answer(asked.id, token, first[token], now=T0 + 1)
        store.answer(asked.id, token, last[token], now=T0 + 2)

    with ThreadPoolExecutor(max_workers=phones) as pool:
        for done in [pool.submit(answer, token) for token in tokens]:
            done.result(timeout=FUTURE * 6)
    result = store.aggregate(asked.id)
    assert result.answered == phones == stored_answers(store)
    assert [(c.answer, c.count, c.right) for c in result.counts] == [("the", 0, 0), ("cat", 50, 50), ("sat", 150, 0)]
    assert all(store.my_answer(asked.id, token) == last[token] for token in tokens)


# settings


def test_the_default_database_is_a_file_in_lmvizs_cache_folder(monkeypatch, tmp_path):
    from lmviz.models.bundled import cache_root

    monkeypatch.delenv("LMVIZ_LIVE_DB", raising=False)
    for cache in (None, str(tmp_path)):
        if cache is None:
            monkeypatch.delenv("LMVIZ_CACHE", raising=False)
        else:
            monkeypatch.setenv("LMVIZ_CACHE", cache)
        assert live.cache_root() == cache_root()
        assert live.store_url() == f"sqlite:///{cache_root() / 'live.sqlite3'}"
    with Store() as default:
        assert default.backend == "sqlite" and (tmp_path / "live.sqlite3").is_file()
    monkeypatch.setenv("LMVIZ_LIVE_DB", f"sqlite:///{tmp_path / 'other.db'}")
    assert live.store_url() == f"sqlite:///{tmp_path / 'other.db'}"


def test_a_relative_sqlite_url_is_relative_to_the_working_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with Store("sqlite:///here.sqlite3"):
        assert (tmp_path / "here.sqlite3").is_file()


@pytest.mark.parametrize("url", ["mysql://host/db", "sqlite:///:memory:", "sqlite://"])
def test_a_database_setting_lmviz_cannot_use_gives_a_sentence(url):
    with pytest.raises(StoreUnavailable) as raised:
        Store(url)
    assert "LMVIZ_LIVE_DB" in one_sentence(raised.value)


def test_an_unreachable_postgresql_gives_a_sentence_without_the_password(monkeypatch, tmp_path):
    pytest.importorskip("psycopg_pool")
    monkeypatch.setattr(live, "POOL_WAIT_S", 1)
    with pytest.raises(StoreUnavailable) as raised:
        Store(f"postgresql://teacher:s3cret@/lmviz?host={tmp_path}")
    text = one_sentence(raised.value)
    assert "s3cret" not in text and "lmviz" in text


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_keep_time_that_is_not_hours_gives_a_sentence(monkeypatch, tmp_path, value):
    monkeypatch.setenv("LMVIZ_LIVE_KEEP_HOURS", value)
    with pytest.raises(StoreUnavailable) as raised:
        Store(f"sqlite:///{tmp_path / 'live.sqlite3'}")
    assert "LMVIZ_LIVE_KEEP_HOURS" in one_sentence(raised.value)


def test_the_keep_time_is_read_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LMVIZ_LIVE_KEEP_HOURS", "2.5")
    with Store(f"sqlite:///{tmp_path / 'live.sqlite3'}") as kept:
        assert kept.keep_hours == 2.5


def test_the_store_imports_neither_torch_nor_streamlit_nor_a_database_driver_it_does_not_use():
    code = ("import sys, lmviz.live.store, lmviz.live.codes; "
            "print(sorted({'torch', 'streamlit', 'transformers', 'psycopg', 'psycopg_pool'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
