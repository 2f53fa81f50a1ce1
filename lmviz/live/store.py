"""Where a live class is kept: its room, the phones in it, the questions asked, the answers and the sentences sent.

A projector and up to a few hundred phones read and write one room at once, from many threads (Streamlit runs
every script run, and every poll of a fragment, in a thread of its own), and with replicas from several
processes on several hosts. So the store is a real database, with two back ends behind one small class and the
same SQL (written with ``?`` and turned into ``%s`` for psycopg):

- SQLite, embedded, when one process serves the class (the default: a file in lmviz's cache folder, or
  ``LMVIZ_LIVE_DB=sqlite:///path``). Write-ahead logging lets the projector read while phones write, and the
  busy timeout makes a writer wait its turn instead of failing; every write takes the lock at its start
  (``BEGIN IMMEDIATE``) so that two transactions never deadlock upgrading a read lock. A connection per thread,
  because a sqlite3 connection is not to be shared between threads at once.
- PostgreSQL (psycopg 3), when ``LMVIZ_LIVE_DB=postgresql://…``: replicas need it, since WAL works only within
  one host. A small pool of connections, because a connection per Streamlit thread would open a server process
  per script run.

Every transaction is short, and nothing read here is cached: the projector must see the answer sent a second
ago. The clock is an argument (``now``, seconds since the epoch) of everything that depends on it, so tests set it.

Nothing personal is kept: no IP address, user agent, name or e-mail, in any table; a participant is a random
token. A room's sentences go when it closes, and a room nobody has used for IDLE_HOURS is closed; rooms, questions
and answers go LMVIZ_LIVE_KEEP_HOURS (24) after they close. ``sweep`` does both, on its own schedule in every
serving process (lmviz.live.sweeper) and from ``python -m lmviz live sweep``. What "deleted" means: SQLite
overwrites a deleted row's bytes with zeros (``secure_delete``) and the sweep then empties the write-ahead log
into the file (a checkpoint), so that no earlier copy of a page is left in either; PostgreSQL keeps a deleted
row's bytes in the table's file until its space is reused after a vacuum (autovacuum runs on its own). No limit
is by IP address, since a whole school shares one.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import math
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from lmviz.core.numbers import fmt
from lmviz.core.text import spreadsheet_safe
from lmviz.course.quiz import Question, Verdict, check, read_number
from lmviz.live.codes import LiveProblem, WrongCode, is_token, new_code, new_token, normalise_code

MIN_SHOWN = 5  # fewer answers than this show only their count: in a small class a bar can name a student
MAX_PARTICIPANTS = 300  # phones in one room
MAX_OPEN_ROOMS = 50  # open rooms in one store (one process with SQLite; every replica together with PostgreSQL)
IDLE_HOURS = 3  # a room nobody has used for this long is closed by the sweep
KEEP_HOURS = 24  # default of LMVIZ_LIVE_KEEP_HOURS: how long a closed room, question or answer is kept
MAX_SENTENCE = 200  # characters of a student's sentence
SENTENCE_PAUSE_S = 30  # between two sentences of one phone: the projector's queue is for sentences, not floods
SURPRISING = 10  # the room's most surprising tokens the projector lists
BUSY_TIMEOUT_S = 10  # how long an SQLite writer waits for the lock, and a PostgreSQL statement may run
POOL_SIZE = 10  # PostgreSQL connections of one process: a replica's threads take turns on them
POOL_WAIT_S = 15  # how long a thread waits for one of them
ACTIVE_EVERY_S = 60  # an answer marks its room active at most this often, so answers do not queue on the room's row
DEFAULT_FILE = "live.sqlite3"


class RoomClosed(LiveProblem):
    """The room of a code has ended."""


class RoomFull(LiveProblem):
    """A room has MAX_PARTICIPANTS phones."""


class TooManyRooms(LiveProblem):
    """The store has MAX_OPEN_ROOMS open rooms."""


class QuestionClosed(LiveProblem):
    """The question answered is closed, or gone."""


class NotAnAnswer(LiveProblem, ValueError):
    """What was sent is not an answer to the question (not a number, not one of its choices); not stored."""


class NotInRoom(LiveProblem):
    """A participant token the room does not know."""


class SentenceRefused(LiveProblem, ValueError):
    """A sentence that is empty, too long, or sent too soon after the last one."""


class StoreUnavailable(LiveProblem, RuntimeError):
    """The database cannot be used; the message says which setting to change."""


@dataclass(frozen=True)
class Room:
    code: str
    opened_at: float
    closed_at: float | None
    last_active: float
    participants: int

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class Asked:
    """A question as it was asked: frozen, with the page's inputs (its URL state) that produced its numbers."""

    id: int
    room: str
    number: int  # 1, 2, … in the room; both votes of a question share it
    vote: int  # 1, or 2 for the second vote (peer instruction)
    lesson: str
    question: Question
    url_state: dict
    opened_at: float
    closed_at: float | None
    revealed: bool

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class Count:
    answer: str  # a choice, or a typed number written at the question's digits
    count: int
    right: int  # how many of them are right (a bin of typed numbers may straddle the tolerance's edge)


@dataclass(frozen=True)
class Aggregate:
    """What the projector may show of one vote. Under MIN_SHOWN answers only ``answered`` is given."""

    asked: Asked
    answered: int
    shown: bool
    counts: tuple[Count, ...]  # every choice in order, or the typed numbers' bins in increasing order
    share_right: float | None


@dataclass(frozen=True)
class Swept:
    """What one sweep did: rooms closed for being idle, their sentences deleted, closed rooms deleted."""

    closed: int
    sentences: int
    deleted: int


@dataclass(frozen=True)
class Sentence:
    id: int
    sentence: str
    loss: float | None
    approved: bool
    submitted_at: float


@dataclass(frozen=True)
class SentenceNumbers:
    """The room's sentences as numbers, whatever their text and whether approved or not: how many were sent, and
    over those with a loss (a mean -log p per token each), the mean, the standard deviation (of these sentences:
    divided by their number) and the range. Under MIN_SHOWN sentences with a loss only the counts are given: in a
    small class a mean of two would tell each of them the other's loss."""

    sent: int
    scored: int  # of them with a loss
    mean: float | None = None
    spread: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def shown(self) -> bool:
        return self.mean is not None


@dataclass(frozen=True)
class Surprise:
    """A token of the room's approved sentences: the highest -log p it had in one, and in how many it came."""

    token: str
    loss: float
    sentences: int


def freeze(question: Question) -> dict:
    """The question as data: what a phone shows and the server checks, whatever the page computes later."""
    # a page may compute its answer as a NumPy number, which JSON does not write
    answer = question.answer if question.choices else int(question.answer) if question.is_count \
        else float(question.answer)
    return {"key": question.key, "ask": question.ask, "choices": list(question.choices), "answer": answer,
            "tolerance": float(question.tolerance), "digits": int(question.digits), "reason": question.reason,
            "hint": question.hint, "table": [[str(cell) for cell in row] for row in question.table]}


def thaw(frozen: dict) -> Question:
    return Question(key=frozen["key"], ask=frozen["ask"], answer=frozen["answer"], reason=frozen["reason"],
                    hint=frozen["hint"], choices=tuple(frozen["choices"]), digits=frozen["digits"],
                    table=tuple(tuple(row) for row in frozen.get("table", ())))  # a question asked before tables


def cache_root() -> Path:
    """lmviz's cache folder, by lmviz.models.bundled.cache_root's rule (that module loads torch; this one may not):
    $LMVIZ_CACHE, else the user's cache folder."""
    if os.environ.get("LMVIZ_CACHE"):
        return Path(os.environ["LMVIZ_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lmviz"


def store_url() -> str:
    return os.environ.get("LMVIZ_LIVE_DB") or f"sqlite:///{cache_root() / DEFAULT_FILE}"


def keep_hours() -> float:
    text = os.environ.get("LMVIZ_LIVE_KEEP_HOURS", "").strip()
    if not text:
        return KEEP_HOURS
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours) or hours < 0:
        raise StoreUnavailable(f"LMVIZ_LIVE_KEEP_HOURS is “{text[:20]}”: set it to a number of hours, "
                               f"0 or more (the default is {KEEP_HOURS}).")
    return hours


def _now(now: float | None) -> float:
    return time.time() if now is None else now


SCHEMA = (
    """CREATE TABLE IF NOT EXISTS live_rooms (
        code TEXT PRIMARY KEY,
        opened_at DOUBLE PRECISION NOT NULL,
        closed_at DOUBLE PRECISION,
        last_active DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS live_participants (
        room TEXT NOT NULL REFERENCES live_rooms (code) ON DELETE CASCADE,
        token TEXT NOT NULL,
        joined_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (room, token))""",
    """CREATE TABLE IF NOT EXISTS live_questions (
        id {identity},
        room TEXT NOT NULL REFERENCES live_rooms (code) ON DELETE CASCADE,
        number INTEGER NOT NULL,
        vote INTEGER NOT NULL CHECK (vote IN (1, 2)),
        lesson TEXT NOT NULL,
        question_key TEXT NOT NULL,
        question TEXT NOT NULL,
        url_state TEXT NOT NULL,
        opened_at DOUBLE PRECISION NOT NULL,
        closed_at DOUBLE PRECISION,
        revealed BOOLEAN NOT NULL DEFAULT FALSE,
        UNIQUE (room, number, vote))""",
    """CREATE TABLE IF NOT EXISTS live_answers (
        question_id BIGINT NOT NULL REFERENCES live_questions (id) ON DELETE CASCADE,
        participant TEXT NOT NULL,
        given TEXT NOT NULL,
        is_right BOOLEAN NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        UNIQUE (question_id, participant))""",
    f"""CREATE TABLE IF NOT EXISTS live_sentences (
        id {{identity}},
        room TEXT NOT NULL REFERENCES live_rooms (code) ON DELETE CASCADE,
        participant TEXT NOT NULL,
        sentence TEXT NOT NULL CHECK (length(sentence) <= {MAX_SENTENCE}),
        loss DOUBLE PRECISION,
        approved BOOLEAN NOT NULL DEFAULT FALSE,
        submitted_at DOUBLE PRECISION NOT NULL)""",
    # each predicted token of a sentence and its -log p, for the room's most surprising tokens; its own table (not
    # a column of live_sentences) so that a database made before it gains it with CREATE TABLE IF NOT EXISTS
    """CREATE TABLE IF NOT EXISTS live_sentence_tokens (
        sentence_id BIGINT NOT NULL REFERENCES live_sentences (id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        loss DOUBLE PRECISION NOT NULL)""",
    # the hash of the secret that makes a browser a room's teacher (lmviz.app.live_access): never the secret, so
    # that the database alone runs no room; its own table, so that a database made before it gains it
    """CREATE TABLE IF NOT EXISTS live_teachers (
        room TEXT PRIMARY KEY REFERENCES live_rooms (code) ON DELETE CASCADE,
        secret_hash TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS live_questions_room ON live_questions (room, number)",
    "CREATE INDEX IF NOT EXISTS live_sentence_tokens_sentence ON live_sentence_tokens (sentence_id)",
    "CREATE INDEX IF NOT EXISTS live_sentences_room ON live_sentences (room, participant)",
)
QUESTION_COLUMNS = "id, room, number, vote, lesson, question, url_state, opened_at, closed_at, revealed"


class _Tx:
    """One transaction's statements, written with ``?`` placeholders whatever the back end."""

    def __init__(self, cursor, placeholder: str):
        self.cursor = cursor
        self.placeholder = placeholder

    def run(self, sql: str, params: tuple = ()):
        if self.placeholder != "?":
            sql = sql.replace("%", "%%").replace("?", self.placeholder)
        self.cursor.execute(sql, params)
        return self.cursor

    def many(self, sql: str, rows: list[tuple]):
        if rows:
            if self.placeholder != "?":
                sql = sql.replace("%", "%%").replace("?", self.placeholder)
            self.cursor.executemany(sql, rows)

    def one(self, sql: str, params: tuple = ()):
        return self.run(sql, params).fetchone()

    def all(self, sql: str, params: tuple = ()) -> list:
        return self.run(sql, params).fetchall()


class _SQLite:
    name = "sqlite"
    identity = "INTEGER PRIMARY KEY"
    serialise = None  # BEGIN IMMEDIATE already lets one writer in at a time

    def __init__(self, path: Path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreUnavailable(f"lmviz could not make the folder of the live class's database, {path.parent} "
                                   f"({error.strerror or error}): set LMVIZ_LIVE_DB=sqlite:///a/writable/file.") \
                from None
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        # thread -> its connection, so that close() reaches them all and a finished thread's is closed at once
        self._connections: dict[threading.Thread, sqlite3.Connection] = {}

    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            return connection
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                         check_same_thread=False)
            mode = connection.execute("PRAGMA journal_mode=wal").fetchone()[0]
        except sqlite3.Error as error:
            raise StoreUnavailable(f"lmviz could not open the live class's database {self.path} ({error}): "
                                   "set LMVIZ_LIVE_DB=sqlite:///a/writable/file.") from None
        if mode.lower() != "wal":
            connection.close()
            raise StoreUnavailable(f"The live class's database {self.path} cannot use write-ahead logging (its "
                                   f"journal mode stays {mode}): put it on a local disk with LMVIZ_LIVE_DB, or use "
                                   "PostgreSQL.")
        connection.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        connection.execute("PRAGMA foreign_keys=ON")
        # a deleted row's bytes are overwritten with zeros, not left in the file's free pages: "deleted" is deleted
        connection.execute("PRAGMA secure_delete=ON")
        # With WAL, NORMAL syncs at checkpoints, not at every commit: a power cut may lose the last answers but
        # never corrupts the file, and a room of phones answering at once is not held up by the disk.
        connection.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            for thread in [t for t in self._connections if not t.is_alive()]:
                self._connections.pop(thread).close()
            self._connections[threading.current_thread()] = connection
        self._local.connection = connection
        return connection

    @contextmanager
    def transaction(self, write: bool) -> Iterator[_Tx]:
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield _Tx(connection.cursor(), "?")
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:  # else the thread's next BEGIN would fail
                connection.execute("ROLLBACK")
            raise

    def journal_mode(self) -> str:
        return self._connection().execute("PRAGMA journal_mode").fetchone()[0]

    def checkpoint(self) -> None:
        """The write-ahead log copied into the database file and emptied, so that it keeps no earlier page image
        of a deleted row. A reader in the middle of a transaction can hold part of it back till the next one."""
        self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self):
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
        self._local = threading.local()


class _Postgres:
    name = "postgresql"
    identity = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
    # a transaction-scoped lock for what two replicas must not do at once: make the tables, count the open rooms
    serialise = "SELECT pg_advisory_xact_lock(7405182)"

    def __init__(self, url: str):
        # imported here: the default SQLite store, and the join page, need no PostgreSQL driver
        import psycopg
        import psycopg_pool

        def configure(connection):
            connection.execute(f"SET statement_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

        self.pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=POOL_SIZE, timeout=POOL_WAIT_S, open=False, name="lmviz-live",
            kwargs={"autocommit": True, "connect_timeout": 10}, configure=configure,
            check=psycopg_pool.ConnectionPool.check_connection)
        try:
            self.pool.open(wait=True, timeout=POOL_WAIT_S)
        except (psycopg_pool.PoolTimeout, psycopg.Error):
            self.pool.close()
            raise StoreUnavailable(f"lmviz could not reach the live class's PostgreSQL database ({_where(url)}) "
                                   f"within {POOL_WAIT_S} s: check LMVIZ_LIVE_DB and that the database is "
                                   "running.") from None

    @contextmanager
    def transaction(self, write: bool) -> Iterator[_Tx]:
        with self.pool.connection() as connection, connection.transaction(), connection.cursor() as cursor:
            yield _Tx(cursor, "%s")

    def journal_mode(self) -> None:
        return None

    def checkpoint(self) -> None:
        """Nothing: PostgreSQL reuses a deleted row's space after a vacuum, which autovacuum runs."""

    def close(self):
        self.pool.close()


def _where(url: str) -> str:
    """The host and database of a URL, without its user or password (an error sentence may be shown)."""
    parts = urlsplit(url)
    host = parts.hostname or parse_qs(parts.query).get("host", ["the local socket"])[0]
    return f"database {parts.path.lstrip('/') or '(default)'} on {host}"


def _backend(url: str):
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme == "sqlite":
        # SQLAlchemy's (and st.connection's) form: sqlite:///relative/file, sqlite:////absolute/file
        path = rest[1:] if rest.startswith("/") else rest
        if path in ("", ":memory:"):
            raise StoreUnavailable("LMVIZ_LIVE_DB names an SQLite database in memory, which every thread would see "
                                   "empty of the others' data: give it a file, as in sqlite:///live.sqlite3.")
        return _SQLite(Path(path))
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return _Postgres("postgresql://" + rest)
    raise StoreUnavailable(f"LMVIZ_LIVE_DB starts with “{scheme[:20]}”: give sqlite:///a/file or "
                           "postgresql://user:password@host/database.")


class Store:
    """The live class's database. Every method is one short transaction (two for an answer: read the question,
    then write) and may be called from any thread."""

    def __init__(self, url: str | None = None, *, keep_hours_after_closing: float | None = None):
        self.url = url or store_url()
        self.keep_hours = keep_hours() if keep_hours_after_closing is None else keep_hours_after_closing
        self._db = _backend(self.url)
        try:
            with self._db.transaction(write=True) as tx:
                self._serialise(tx)
                for statement in SCHEMA:
                    tx.run(statement.replace("{identity}", self._db.identity))
        except BaseException:
            self._db.close()
            raise

    @property
    def backend(self) -> str:
        return self._db.name

    def journal_mode(self) -> str | None:
        """SQLite's journal mode ('wal'); None for PostgreSQL."""
        return self._db.journal_mode()

    def close(self):
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _serialise(self, tx: _Tx):
        if self._db.serialise:
            tx.run(self._db.serialise)

    # rooms

    def open_room(self, now: float | None = None, teacher_secret: str | None = None) -> str:
        """A new room's join code. The sweep runs first, so that rooms left idle do not count against the limit.
        ``teacher_secret``: what makes a browser this room's teacher (``is_teacher``); its hash is kept."""
        now = _now(now)
        with self._db.transaction(write=True) as tx:
            self._serialise(tx)
            self._sweep(tx, now)
            (open_rooms,) = tx.one("SELECT COUNT(*) FROM live_rooms WHERE closed_at IS NULL")
            if open_rooms >= MAX_OPEN_ROOMS:
                raise TooManyRooms(f"{MAX_OPEN_ROOMS} classes are open on this server already, the most it "
                                   f"takes: close one, or wait until one idle for {IDLE_HOURS} hours is closed.")
            while True:  # 31^5 codes for at most 50 open rooms: a second draw is rare, a third rarer still
                code = new_code()
                if tx.one("SELECT 1 FROM live_rooms WHERE code = ?", (code,)) is None:
                    tx.run("INSERT INTO live_rooms (code, opened_at, last_active) VALUES (?, ?, ?)",
                           (code, now, now))
                    if teacher_secret is not None:
                        tx.run("INSERT INTO live_teachers (room, secret_hash) VALUES (?, ?)",
                               (code, _secret_hash(teacher_secret)))
                    return code

    def is_teacher(self, code: str, secret: str | None) -> bool:
        """Whether ``secret`` is the one the open room ``code`` was opened with."""
        if not secret or not code:
            return False
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT t.secret_hash FROM live_teachers t JOIN live_rooms r ON r.code = t.room "
                         "WHERE t.room = ? AND r.closed_at IS NULL", (code,))
        return row is not None and hmac.compare_digest(row[0], _secret_hash(secret))

    def room_states(self, codes: Sequence[str]) -> dict[str, tuple]:
        """For each of the rooms ``codes`` still kept, in one read: whether it is open, and its current question's
        id and whether that is open. What a phone shows changes only when this does (lmviz.app.live_push)."""
        if not codes:
            return {}
        marks = ", ".join("?" * len(codes))
        with self._db.transaction(write=False) as tx:
            rows = tx.all("SELECT r.code, r.closed_at IS NULL, q.id, q.closed_at IS NULL FROM live_rooms r "
                          "LEFT JOIN live_questions q "
                          "ON q.id = (SELECT MAX(id) FROM live_questions WHERE room = r.code) "
                          f"WHERE r.code IN ({marks})", tuple(codes))
        return {code: (bool(open_), question, None if question is None else bool(asked_open))
                for code, open_, question, asked_open in rows}

    def room(self, code: str) -> Room | None:
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT code, opened_at, closed_at, last_active, "
                         "(SELECT COUNT(*) FROM live_participants p WHERE p.room = r.code) "
                         "FROM live_rooms r WHERE code = ?", (code,))
        return Room(*row) if row else None

    def close_room(self, code: str, now: float | None = None):
        """End a room: its questions close, and its students' sentences are deleted at once."""
        with self._db.transaction(write=True) as tx:
            tx.run("UPDATE live_rooms SET closed_at = ? WHERE code = ? AND closed_at IS NULL", (_now(now), code))
            deleted = self._close_rooms(tx, [code], _now(now))
        if deleted:
            self._db.checkpoint()

    def _close_rooms(self, tx: _Tx, codes: list[str], now: float) -> int:
        """The rooms' questions closed and their sentences deleted (the rooms themselves are closed by the caller);
        how many sentences were deleted."""
        deleted = 0
        for code in codes:
            tx.run("UPDATE live_questions SET closed_at = ? WHERE room = ? AND closed_at IS NULL", (now, code))
            deleted += tx.run("DELETE FROM live_sentences WHERE room = ?", (code,)).rowcount
        return deleted

    def _touch(self, tx: _Tx, code: str, now: float):
        """Mark an open room active; a sentence if the code is no room's, or its room has ended."""
        if tx.run("UPDATE live_rooms SET last_active = ? WHERE code = ? AND closed_at IS NULL",
                  (now, code)).rowcount:
            return
        if tx.one("SELECT 1 FROM live_rooms WHERE code = ?", (code,)) is None:
            raise WrongCode(f"No class is open with the code {code}: check the code on the projector.")
        raise RoomClosed(f"The class with the code {code} has ended: ask your teacher for the new code.")

    def sweep(self, now: float | None = None) -> Swept:
        """Close the rooms idle for IDLE_HOURS (their sentences deleted), and delete what was closed more than
        keep_hours ago. Serialised across processes (with PostgreSQL, every replica sweeps on its own schedule)."""
        with self._db.transaction(write=True) as tx:
            self._serialise(tx)
            swept = self._sweep(tx, _now(now))
        if swept != Swept(0, 0, 0):  # what was deleted leaves the log too; a sweep that did nothing writes nothing
            self._db.checkpoint()
        return swept

    def _sweep(self, tx: _Tx, now: float) -> Swept:
        # closed in the statement that finds them: a room that an answer makes active meanwhile is not idle
        idle = [code for (code,) in tx.all("UPDATE live_rooms SET closed_at = ? WHERE closed_at IS NULL "
                                           "AND last_active < ? RETURNING code", (now, now - IDLE_HOURS * 3600))]
        sentences = self._close_rooms(tx, idle, now)
        before = now - self.keep_hours * 3600
        rooms = tx.run("DELETE FROM live_rooms WHERE closed_at IS NOT NULL AND closed_at < ?", (before,)).rowcount
        # a room used for longer than the keep time loses its old questions, but never its question of now (its
        # two votes), which its phones and the projector show
        tx.run("DELETE FROM live_questions WHERE closed_at IS NOT NULL AND closed_at < ? "
               "AND (room, number) NOT IN (SELECT room, MAX(number) FROM live_questions GROUP BY room)", (before,))
        return Swept(len(idle), sentences, rooms)

    # participants

    def join(self, code: str, token: str | None = None, now: float | None = None) -> str:
        """The participant token of a phone in the room of ``code`` (as typed): ``token`` again when the room
        knows it (a reload), else a new one (a token is never carried from one room to another)."""
        code, now = normalise_code(code), _now(now)
        with self._db.transaction(write=True) as tx:
            self._touch(tx, code, now)  # also holds the room's row, so two joins count in turn
            if is_token(token) and tx.one("SELECT 1 FROM live_participants WHERE room = ? AND token = ?",
                                          (code, token)):
                return token
            (joined,) = tx.one("SELECT COUNT(*) FROM live_participants WHERE room = ?", (code,))
            if joined >= MAX_PARTICIPANTS:
                raise RoomFull(f"This class has {MAX_PARTICIPANTS} phones in it, the most a class takes: "
                               "answer on a neighbour's phone.")
            token = new_token()
            tx.run("INSERT INTO live_participants (room, token, joined_at) VALUES (?, ?, ?)", (code, token, now))
            return token

    # questions

    def ask(self, code: str, lesson: str, question: Question, url_state: dict | None = None,
            now: float | None = None) -> Asked:
        """Ask the room a course question, frozen with the page's URL state; a question still open closes."""
        now = _now(now)
        frozen, state = json.dumps(freeze(question)), json.dumps(url_state or {}, sort_keys=True)
        with self._db.transaction(write=True) as tx:
            self._touch(tx, code, now)
            tx.run("UPDATE live_questions SET closed_at = ? WHERE room = ? AND closed_at IS NULL", (now, code))
            (number,) = tx.one("SELECT COALESCE(MAX(number), 0) + 1 FROM live_questions WHERE room = ?", (code,))
            return self._insert_question(tx, code, number, 1, lesson, question.key, frozen, state, now)

    def ask_again(self, question_id: int, now: float | None = None) -> Asked:
        """The second vote on an asked question (peer instruction): the same frozen question, counted apart."""
        now = _now(now)
        with self._db.transaction(write=True) as tx:
            row = tx.one("SELECT room, number, vote, lesson, question_key, question, url_state FROM live_questions "
                         "WHERE id = ?", (question_id,))
            if row is None:
                raise QuestionClosed("That question is no longer kept: ask it again from its page.")
            code, number, vote, lesson, key, frozen, state = row
            if vote != 1 or tx.one("SELECT 1 FROM live_questions WHERE room = ? AND number = ? AND vote = 2",
                                   (code, number)):
                raise LiveProblem("This question has had its second vote: ask it anew from its page for a third.")
            self._touch(tx, code, now)
            tx.run("UPDATE live_questions SET closed_at = ? WHERE room = ? AND closed_at IS NULL", (now, code))
            return self._insert_question(tx, code, number, 2, lesson, key, frozen, state, now)

    def _insert_question(self, tx: _Tx, code, number, vote, lesson, key, frozen, state, now) -> Asked:
        (question_id,) = tx.one("INSERT INTO live_questions (room, number, vote, lesson, question_key, question, "
                                "url_state, opened_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                                (code, number, vote, lesson, key, frozen, state, now))
        return Asked(question_id, code, number, vote, lesson, thaw(json.loads(frozen)), json.loads(state), now,
                     None, False)

    def close_question(self, question_id: int, now: float | None = None):
        with self._db.transaction(write=True) as tx:
            tx.run("UPDATE live_questions SET closed_at = ? WHERE id = ? AND closed_at IS NULL",
                   (_now(now), question_id))

    def reveal(self, question_id: int):
        """Let the projector show the vote's distribution (hidden until then: a live histogram sways a vote)."""
        with self._db.transaction(write=True) as tx:
            tx.run("UPDATE live_questions SET revealed = ? WHERE id = ?", (True, question_id))

    def asked(self, question_id: int) -> Asked | None:
        with self._db.transaction(write=False) as tx:
            row = tx.one(f"SELECT {QUESTION_COLUMNS} FROM live_questions WHERE id = ?", (question_id,))
        return _asked(row) if row else None

    def questions(self, code: str) -> list[Asked]:
        """Every question asked in the room, each vote apart, in the order asked."""
        with self._db.transaction(write=False) as tx:
            rows = tx.all(f"SELECT {QUESTION_COLUMNS} FROM live_questions WHERE room = ? ORDER BY number, vote",
                          (code,))
        return [_asked(row) for row in rows]

    def current(self, code: str) -> Asked | None:
        """The question a phone shows: the last one asked, open or not."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(f"SELECT {QUESTION_COLUMNS} FROM live_questions WHERE room = ? ORDER BY id DESC LIMIT 1",
                         (code,))
        return _asked(row) if row else None

    # answers

    def answer(self, question_id: int, token: str, given: str | None, now: float | None = None) -> Verdict:
        """Take a phone's answer, checked here with the quiz's own rule; a later one replaces it. Something that
        is not an answer is refused with the quiz's sentence and not stored."""
        now = _now(now)
        asked = self.asked(question_id)
        if asked is None:
            raise QuestionClosed("That question is no longer asked: wait for the teacher's next one.")
        if not asked.is_open:
            raise QuestionClosed("The teacher has closed this question: answers sent before it closed are counted, "
                                 "and it takes no more.")
        question = asked.question
        if question.choices and given is not None and given not in question.choices:
            raise NotAnAnswer("Pick one of the answers shown.")
        verdict = check(question, given)
        if verdict.right is None:
            raise NotAnAnswer(verdict.message)
        # a typed number is kept as the number read, so that the bins and the CSV read one form of it
        stored = given if question.choices else repr(read_number(given))
        with self._db.transaction(write=True) as tx:
            taken = tx.run(
                "INSERT INTO live_answers (question_id, participant, given, is_right, updated_at) "
                "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM live_questions q JOIN live_participants p "
                "ON p.room = q.room WHERE q.id = ? AND q.closed_at IS NULL AND p.token = ?) "
                "ON CONFLICT (question_id, participant) DO UPDATE SET given = excluded.given, "
                "is_right = excluded.is_right, updated_at = excluded.updated_at",
                (question_id, token, stored, bool(verdict.right), now, question_id, token)).rowcount
            if not taken:
                if tx.one("SELECT 1 FROM live_participants WHERE room = ? AND token = ?", (asked.room, token)):
                    raise QuestionClosed("The teacher has just closed this question: answers sent before it "
                                         "closed are counted, and it takes no more.")
                raise NotInRoom("This phone is not in the class: join it again with the code on the projector.")
            tx.run("UPDATE live_rooms SET last_active = ? WHERE code = ? AND last_active < ?",
                   (now, asked.room, now - ACTIVE_EVERY_S))
        return verdict

    def my_answer(self, question_id: int, token: str) -> str | None:
        """What this phone last sent (a reload shows it again)."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT given FROM live_answers WHERE question_id = ? AND participant = ?",
                         (question_id, token))
        return row[0] if row else None

    def aggregate(self, question_id: int) -> Aggregate | None:
        """How one vote went: the count of answers, and from MIN_SHOWN answers on, the count of each choice or of
        each typed number written at the question's digits, and the share right."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(f"SELECT {QUESTION_COLUMNS} FROM live_questions WHERE id = ?", (question_id,))
            if row is None:
                return None
            rows = tx.all("SELECT given, COUNT(*), SUM(CASE WHEN is_right THEN 1 ELSE 0 END) FROM live_answers "
                          "WHERE question_id = ? GROUP BY given", (question_id,))
        return _aggregate(_asked(row), rows)

    def aggregates(self, code: str) -> list[Aggregate]:
        """Every vote of the room, in the order asked."""
        return [self.aggregate(asked.id) for asked in self.questions(code)]

    def aggregates_csv(self, code: str) -> str:
        """The room's results for the teacher to keep: per question and vote, each answer's count, how many of
        them are right, and the vote's share right. A vote under MIN_SHOWN answers gives its count alone."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["question", "vote", "lesson", "key", "asked", "answer", "count", "right", "answered",
                         "share_right"])
        for result in self.aggregates(code):
            if result is None:  # deleted between the two reads
                continue
            asked = result.asked
            # the question and a choice may quote a token a student typed: a spreadsheet must not run it as a formula
            start = [asked.number, asked.vote, asked.lesson, asked.question.key, spreadsheet_safe(asked.question.ask)]
            share = "" if result.share_right is None else f"{result.share_right:.4f}"
            if not result.shown:
                writer.writerow([*start, f"fewer than {MIN_SHOWN} answers: not shown", "", "", result.answered, ""])
            for count in result.counts:
                writer.writerow([*start, spreadsheet_safe(count.answer), count.count, count.right, result.answered,
                                 share])
        return out.getvalue()

    # sentences

    def add_sentence(self, code: str, token: str, sentence: str, loss: float | None, now: float | None = None,
                     tokens: Sequence[tuple[str, float]] = ()) -> int:
        """A student's sentence and its mean loss per token, kept for the teacher to approve (never shown before);
        ``tokens``: each predicted token and its -log p, for the room's most surprising tokens (from approved
        sentences only)."""
        now, text = _now(now), check_sentence(sentence)
        if loss is not None and not math.isfinite(loss):
            raise ValueError(f"a sentence's loss must be a finite number or None, not {loss}")
        labels = [(str(label), float(nll)) for label, nll in tokens]
        if not all(math.isfinite(nll) for _, nll in labels):
            raise ValueError("a token's -log p must be a finite number")
        with self._db.transaction(write=True) as tx:
            self._touch(tx, code, now)
            if not tx.one("SELECT 1 FROM live_participants WHERE room = ? AND token = ?", (code, token)):
                raise NotInRoom("This phone is not in the class: join it again with the code on the projector.")
            (last,) = tx.one("SELECT MAX(submitted_at) FROM live_sentences WHERE room = ? AND participant = ?",
                             (code, token))
            if last is not None and now - last < SENTENCE_PAUSE_S:
                raise SentenceRefused(f"Wait {math.ceil(SENTENCE_PAUSE_S - (now - last))} s before sending another "
                                      "sentence.")
            (sentence_id,) = tx.one("INSERT INTO live_sentences (room, participant, sentence, loss, submitted_at) "
                                    "VALUES (?, ?, ?, ?, ?) RETURNING id", (code, token, text, loss, now))
            tx.many("INSERT INTO live_sentence_tokens (sentence_id, label, loss) VALUES (?, ?, ?)",
                    [(sentence_id, label, nll) for label, nll in labels])
            return sentence_id

    def approve_sentence(self, sentence_id: int):
        with self._db.transaction(write=True) as tx:
            tx.run("UPDATE live_sentences SET approved = ? WHERE id = ?", (True, sentence_id))

    def remove_sentence(self, sentence_id: int):
        """The teacher's Remove: the sentence, its loss and its tokens deleted, from the numbers too."""
        with self._db.transaction(write=True) as tx:
            tx.run("DELETE FROM live_sentence_tokens WHERE sentence_id = ?", (sentence_id,))
            tx.run("DELETE FROM live_sentences WHERE id = ?", (sentence_id,))
        self._db.checkpoint()

    def sentences(self, code: str, approved_only: bool = True) -> list[Sentence]:
        """The room's sentences in the order sent; only the approved ones unless asked (the teacher's queue)."""
        with self._db.transaction(write=False) as tx:
            rows = tx.all("SELECT id, sentence, loss, approved, submitted_at FROM live_sentences WHERE room = ? "
                          + ("AND approved " if approved_only else "") + "ORDER BY submitted_at, id", (code,))
        return [Sentence(id_, text, loss, bool(approved), at) for id_, text, loss, approved, at in rows]

    def sentence_numbers(self, code: str) -> SentenceNumbers:
        """How many sentences the room sent, and their losses' mean, spread and range (SentenceNumbers)."""
        with self._db.transaction(write=False) as tx:
            rows = tx.all("SELECT loss FROM live_sentences WHERE room = ?", (code,))
        losses = [loss for (loss,) in rows if loss is not None]
        if len(losses) < MIN_SHOWN:
            return SentenceNumbers(len(rows), len(losses))
        return SentenceNumbers(len(rows), len(losses), statistics.fmean(losses), statistics.pstdev(losses),
                               min(losses), max(losses))

    def surprising_tokens(self, code: str, limit: int = SURPRISING) -> list[Surprise]:
        """The tokens of the room's approved sentences with the highest -log p, each token once (its highest):
        a sentence not approved gives none, since its tokens are pieces of its text."""
        with self._db.transaction(write=False) as tx:
            rows = tx.all("SELECT t.label, MAX(t.loss), COUNT(DISTINCT t.sentence_id) FROM live_sentence_tokens t "
                          "JOIN live_sentences s ON s.id = t.sentence_id WHERE s.room = ? AND s.approved "
                          "GROUP BY t.label ORDER BY MAX(t.loss) DESC, t.label LIMIT ?", (code, limit))
        return [Surprise(label, loss, count) for label, loss, count in rows]


def _secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_sentence(sentence: str | None) -> str:
    """A sentence as it is kept (stripped), or SentenceRefused with the sentence that says why not: so that a page
    can refuse an empty or over-long one before it asks a model to score it."""
    text = (sentence or "").strip()
    if not text:
        raise SentenceRefused("Type a sentence first.")
    if len(text) > MAX_SENTENCE:
        raise SentenceRefused(f"A sentence sent to the room has at most {MAX_SENTENCE} characters, and this one "
                              f"has {len(text)}: shorten it.")
    return text


def _asked(row) -> Asked:
    id_, code, number, vote, lesson, frozen, state, opened_at, closed_at, revealed = row
    return Asked(id_, code, number, vote, lesson, thaw(json.loads(frozen)), json.loads(state), opened_at, closed_at,
                 bool(revealed))


def _bin(given: str, digits: int) -> tuple[float, str]:
    """A typed number written at the question's digits, as the answer is revealed (no "-0.00")."""
    label = fmt(float(given), digits)
    value = float(label)
    return (0.0, fmt(0.0, digits)) if value == 0 else (value, label)


def _aggregate(asked: Asked, rows: list) -> Aggregate:
    answered = sum(count for _, count, _ in rows)
    if answered < MIN_SHOWN:
        return Aggregate(asked, answered, False, (), None)
    right = sum(r or 0 for _, _, r in rows)
    question = asked.question
    if question.choices:
        tally = {given: (count, r or 0) for given, count, r in rows}
        counts = tuple(Count(choice, *tally.get(choice, (0, 0))) for choice in question.choices)
    else:
        bins: dict[str, list] = {}
        for given, count, r in rows:
            value, label = _bin(given, question.digits)
            slot = bins.setdefault(label, [value, 0, 0])
            slot[1] += count
            slot[2] += r or 0
        counts = tuple(Count(label, count, r) for label, (_, count, r) in sorted(bins.items(), key=lambda b: b[1][0]))
    return Aggregate(asked, answered, True, counts, right / answered)
