"""A live class answering one question: from a phone's answer to the projector's count, on both store back ends.

    python -m benchmarks.live [--quick] [--window 10] [--page]

For 30, 100 and 200 participants in one room (--quick: 30), on SQLite (a file, WAL) and on PostgreSQL (a server
of its own, scripts/postgres.py; left out with a sentence where PostgreSQL is not installed): every participant
joins, the teacher asks a typed question, and each participant sends one answer at a random moment of a
``--window`` of seconds (a class answering), from a pool of threads as Streamlit's script runs are. Meanwhile the
projector reads the vote every PROJECTOR_REFRESH_S, as the Live class page's fragment does (Store.aggregate).
With ``--page`` the projector is the Live class page itself, run by Streamlit's AppTest in this process (every
read and every element the page draws, the chart and the room's sentences included: each participant also sends
a sentence, and a fifth of them are approved), and its count is read from what the page writes, "N of M answered".

Per back end and class size: the phone's wait for its answer to be taken (p50, p95); the time from a phone's
send to the first projector read that counts it (p50, p95: an answer is counted by the first read that started
after it was committed); the projector's CPU per refresh (this process's, the database server's own is not in
it; with --page, the whole process's CPU during a run of the page, the senders' share included: an upper bound);
and the process's memory (RSS) after the class. The target of issue 37: p95 from send to count <= 3 s at 200
participants on 2 cores. What is measured ends where the server has drawn the page: the browser's paint of the
elements it is sent comes on top. A phone's own session, its page and its WebSocket, is not in it:
benchmarks/live_phones.py measures a room of phones as they are, on the real server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from lmviz.course.quiz import Question
from lmviz.live.codes import new_token
from lmviz.live.store import Store
from scripts.postgres import postgres_bin, running_postgres

PROJECTOR_REFRESH_S = 2.0  # how often the projector reads the room
SIZES = (30, 100, 200)
WORKER_THREADS = 32  # answers sent at once, as a server's script runs are
QUESTION = Question(key="loss", ask="What is the loss of this token?", answer=0.69315, reason="-log 0.5.",
                    hint="Read the table.")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class StoreRead:
    """The projector as the store's one read of the vote: Store.aggregate. CPU: this thread's."""

    def __init__(self, store: Store, code: str, question_id: int, teacher_secret: str):
        self.store, self.question_id = store, question_id

    def read(self) -> tuple[int, float]:
        cpu = time.thread_time()
        answered = self.store.aggregate(self.question_id).answered
        return answered, time.thread_time() - cpu


class PageRead:
    """The projector as the Live class page of a teacher running the room, run whole by AppTest; its count read
    from the page. CPU: the whole process's during the run (AppTest runs the page in a thread of its own)."""

    ANSWERED = re.compile(r"^(\d+) of \d+ answered$")

    def __init__(self, store: Store, code: str, question_id: int, teacher_secret: str):
        from streamlit.testing.v1 import AppTest

        from lmviz.app.live import TEACHING_PARAM
        from lmviz.app.live_access import SECRETS_KEY

        os.environ["LMVIZ_LIVE_DB"], os.environ["LMVIZ_WARM_START"] = store.url, "0"  # no model loads
        self.app = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=60)
        # the teacher's link and the room's secret (a copied teacher link brings both): the page adopts the room
        self.app.query_params[TEACHING_PARAM] = code
        self.app.session_state[SECRETS_KEY] = {code: teacher_secret}
        self.app.run()
        self.app.switch_page("app_pages/live_class.py").run()  # its first run, imports and all, is not a refresh

    def read(self) -> tuple[int, float]:
        cpu = sum(psutil.Process().cpu_times()[:2])
        self.app.run()
        used = sum(psutil.Process().cpu_times()[:2]) - cpu
        if self.app.exception:
            raise RuntimeError(f"the Live class page failed: {self.app.exception[0].message}")
        (answered,) = [int(m.group(1)) for h in self.app.subheader if (m := self.ANSWERED.match(h.value))]
        return answered, used


def run_class(store: Store, participants: int, window_s: float, seed: int = 0, page: bool = False) -> dict:
    rng = random.Random(seed)
    secret = new_token()
    code = store.open_room(teacher_secret=secret)
    tokens = [store.join(code) for _ in range(participants)]
    asked = store.ask(code, "toy", QUESTION)
    projector_read = (PageRead if page else StoreRead)(store, code, asked.id, secret)
    approved = set(tokens[::5])
    committed: list[tuple[float, float]] = []  # (sent, committed) per answer
    reads: list[tuple[float, int]] = []  # (started, answered) per projector read
    cpu_per_read: list[float] = []
    lock, done = threading.Lock(), threading.Event()

    def projector():
        while True:
            started = time.monotonic()
            answered, cpu = projector_read.read()
            cpu_per_read.append(cpu)
            reads.append((started, answered))
            if done.is_set() and answered >= len(committed):
                return
            time.sleep(max(0.0, PROJECTOR_REFRESH_S - (time.monotonic() - started)))

    def send(token: str, at: float, given: str, start: float):
        time.sleep(max(0.0, start + at - time.monotonic()))
        sent = time.monotonic()
        store.answer(asked.id, token, given)
        with lock:
            committed.append((sent, time.monotonic()))
        if page:  # and a sentence, which the page's numbers, tables and queue show; a fifth of them approved
            sentence = store.add_sentence(code, token, f"Sentence {given} of the room.", float(given) * 5,
                                          tokens=[(f"␣word{n}", float(given) * n) for n in range(1, 6)])
            if token in approved:
                store.approve_sentence(sentence)

    watcher = threading.Thread(target=projector)
    start = time.monotonic()
    watcher.start()
    with ThreadPoolExecutor(WORKER_THREADS) as pool:
        moments = sorted(rng.uniform(0, window_s) for _ in tokens)
        givens = [f"{rng.uniform(0.5, 0.9):.2f}" for _ in tokens]
        list(pool.map(lambda sent: send(*sent, start), zip(tokens, moments, givens)))
    done.set()
    watcher.join(timeout=60)
    # the k-th answer to be committed is counted by the first read started after its commit that sees >= k
    to_count = []
    for rank, (sent, at) in enumerate(sorted(committed, key=lambda c: c[1]), start=1):
        seen = next(started for started, answered in reads if started >= at and answered >= rank)
        to_count.append(seen - sent)
    store.close_room(code)
    waits = [at - sent for sent, at in committed]
    return {"participants": participants, "answers": len(committed), "counted": reads[-1][1],
            "wait p50": statistics.median(waits), "wait p95": percentile(waits, 0.95),
            "to count p50": statistics.median(to_count), "to count p95": percentile(to_count, 0.95),
            "cpu ms/read": 1000 * statistics.mean(cpu_per_read),
            "rss MiB": psutil.Process().memory_info().rss / 2**20}


def print_table(rows: list[dict]) -> None:
    header = ["back end", "participants", "answers counted", "send wait p50 / p95 (s)",
              "send to projector p50 / p95 (s)", "projector CPU per read (ms)", "RSS (MiB)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for r in rows:
        print(f"| {r['back end']} | {r['participants']} | {r['counted']} of {r['answers']} | "
              f"{r['wait p50']:.3f} / {r['wait p95']:.3f} | {r['to count p50']:.2f} / {r['to count p95']:.2f} | "
              f"{r['cpu ms/read']:.2f} | {r['rss MiB']:.0f} |")


@contextlib.contextmanager
def store_urls():
    """Each back end's empty database: an SQLite file, and where PostgreSQL is installed a server's database."""
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        urls = {"SQLite (WAL)": f"sqlite:///{Path(folder) / 'live.sqlite3'}"}
        if postgres_bin() is None:
            print("PostgreSQL is not installed (apt-get install postgresql): measured on SQLite only.")
        else:
            server = stack.enter_context(running_postgres())
            urls["PostgreSQL"] = server.url(server.fresh_database())
        yield urls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 participants, a 3 s window (for CI)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds over which the class answers")
    parser.add_argument("--page", action="store_true",
                        help="the projector is the Live class page (AppTest), and every participant sends a sentence")
    args = parser.parse_args()
    sizes, window = ((30,), 3.0) if args.quick else (SIZES, args.window)
    print(f"One room, one typed question, answers spread over {window:g} s, the projector reading every "
          f"{PROJECTOR_REFRESH_S:g} s ({'the Live class page, run whole' if args.page else 'the store'}); "
          f"{WORKER_THREADS} sending threads; {psutil.cpu_count()} cores.")
    rows = []
    with store_urls() as urls:
        for name, url in urls.items():
            with Store(url) as store:
                for size in sizes:
                    rows.append({"back end": name, **run_class(store, size, window, page=args.page)})
    print_table(rows)


if __name__ == "__main__":
    main()
