"""A live class measured with its phones: the real server (scripts/serve), a real projector, and real phone sessions.

    python -m benchmarks.live_phones [--quick] [--phones 200] [--browsers 30] [--wait 20] [--window 10]

benchmarks/live.py measures the store and the projector's read; this measures what a room of phones costs the
server that lmviz starts. One server (SQLite), one projector (a Chromium tab at 1280×720 in presentation mode on
the Live class page, whose room it opens), and ``--phones`` phones joining by the QR code's link: ``--browsers``
of them real Chromium tabs at 390×844, each in a browser context of its own, and the rest clients that speak to
the server exactly as the join page does (Streamlit's WebSocket, /_stcore/stream, with the same messages a
browser sends: the page's run with its link, then the answer form's widgets and its Send, in the phone's
fragment; tests/test_live_phones_benchmark.py compares them with a real browser's).

Measured: the server process's CPU while only the projector is open, then while every phone waits too (per
waiting phone: the difference, divided by the phones); each phone's join time (the link opened to "You are in the
class" drawn); the time from the teacher's question to each phone showing it; then every phone answers at a
random moment of ``--window`` s, and the projector's "N of M answered" is read off the projector's screen every
0.1 s: a tap is counted when the projector first shows at least as many answers as had been stored by the time
it was (the store's own commit time), so tap→count p50/p95 is what the teacher sees. Last, with every phone still
waiting, a new phone's first paint of the join page. Every answer is checked against the database: each phone's
one answer, stored once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil

from benchmarks.live import percentile
from lmviz.course.quiz import Question
from lmviz.live.store import Store
from scripts.live_server import CHROMIUM_FLAGS, environment_set, running_server

QUESTION = Question(key="which", ask="Which token did the model find most surprising?", answer="cat",
                    reason="Its -log p is the highest.", hint="Read the table.", choices=("the", "cat", "sat"))
PROJECTOR = {"width": 1280, "height": 720}
PHONE = {"width": 390, "height": 844}
ANSWERED = re.compile(r"(\d+) of (\d+) answered")
JOINED = "You are in the class"


class StreamlitPhone:
    """A phone as the join page is to the server: one WebSocket, the page's run with the join link's query, then
    whatever the server pushes; answering sends the form's widgets, its Send's trigger, and the fragment's id, as
    the browser does (recorded from Chromium: tests/test_live_phones_benchmark.py)."""

    def __init__(self, server: str, query: str):
        self.server, self.query = server, query
        self.page_hash = ""
        self.fragment = ""
        self.radio: str | None = None  # the current question's radio's widget id
        self.send_id: str | None = None  # its form's Send
        self.texts: list[str] = []  # the text of the last run's elements
        self.boxes: set[str] = set()  # the page's text boxes' widget ids, whose values the browser sends too
        self._drawing: list[str] = []  # the text of the run being drawn
        self.sent = None  # the last message sent
        self.socket = None

    async def open(self) -> None:
        import websockets

        url = self.server.replace("http://", "ws://") + "/_stcore/stream"
        self.socket = await websockets.connect(url, subprotocols=["streamlit"], origin=self.server,
                                               max_size=2**24, ping_interval=None)
        self._reader = asyncio.create_task(self._read())
        await self._rerun([], fragment="")

    def _client_state(self, widgets: list, fragment: str):
        from streamlit.proto.BackMsg_pb2 import BackMsg

        message = BackMsg()
        state = message.rerun_script
        state.query_string, state.page_name = self.query, "join"
        state.page_script_hash, state.fragment_id = self.page_hash, fragment
        for widget_id, kind, value in widgets:
            setattr(state.widget_states.widgets.add(id=widget_id), kind, value)
        info = state.context_info
        info.timezone, info.locale, info.url, info.color_scheme = "UTC", "en-US", f"{self.server}/join", "light"
        return message

    async def _rerun(self, widgets: list, fragment: str) -> None:
        self.sent = self._client_state(widgets, fragment)
        await self.socket.send(self.sent.SerializeToString())

    async def answer(self, choice: str) -> None:
        boxes = [(box, "string_value", "") for box in sorted(self.boxes)]
        await self._rerun([*boxes, (self.radio, "string_value", choice), (self.send_id, "trigger_value", True)],
                          self.fragment)

    async def _read(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        with contextlib.suppress(Exception):
            async for raw in self.socket:
                message = ForwardMsg()
                message.ParseFromString(raw)
                self._take(message)

    def _take(self, message) -> None:
        kind = message.WhichOneof("type")
        if kind == "new_session":
            self.page_hash = message.new_session.page_script_hash or self.page_hash
            self._drawing = []
        elif kind == "page_info_changed":
            self.query = message.page_info_changed.query_string
        elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            element = message.delta.new_element
            name = element.WhichOneof("type")
            inner = getattr(element, name)
            if name == "radio":
                self.radio, self.fragment = inner.id, message.delta.fragment_id
            elif name == "button" and inner.label == "Send":
                self.send_id = inner.id
            elif name == "text_area":
                self.boxes.add(inner.id)
            body = getattr(inner, "body", None)
            if isinstance(body, str):
                self._drawing.append(body)
        elif kind == "script_finished":
            self.texts = self._drawing
            self._drawing = []

    def shows(self, text: str) -> bool:
        return any(text in t for t in self.texts)

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()


async def until(condition, timeout_s: float, every_s: float = 0.05) -> None:
    """Wait until ``condition()`` holds, or TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s:g} s")
        await asyncio.sleep(every_s)


@dataclass
class Phone:
    kind: str  # "browser" or "protocol"
    token: str = ""  # its participant token, from its link (?p=) once joined
    joined_s: float = 0.0
    question_s: float = 0.0
    tapped_at: float = 0.0
    client: object = field(default=None, repr=False)
    tab: object = field(default=None, repr=False)
    sent: list = field(default_factory=list, repr=False)  # a browser's messages to the server, as sent


def server_process(url: str) -> psutil.Process:
    """The Streamlit server listening on the URL's port."""
    port = int(url.rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
               and c.status == psutil.CONN_LISTEN)
    return psutil.Process(pid)


async def cpu_share(process: psutil.Process, seconds: float) -> float:
    """The process's CPU over ``seconds``, in cores."""
    before, start = process.cpu_times(), time.monotonic()
    await asyncio.sleep(seconds)
    after = process.cpu_times()
    return (after.user + after.system - before.user - before.system) / (time.monotonic() - start)


async def join_browser(browser, server: str, link: str) -> Phone:
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    tab = await context.new_page()
    sent = []
    tab.on("websocket", lambda socket: socket.on("framesent", lambda frame: sent.append(frame)))
    start = time.time()
    await tab.goto(link)
    await tab.get_by_text(JOINED, exact=False).wait_for(timeout=180_000)
    joined = time.time() - start
    await tab.wait_for_url(re.compile(r"[?&]p="), timeout=60_000)
    return Phone("browser", parse_qs(urlsplit(tab.url).query)["p"][0], joined, tab=tab, sent=sent)


async def join_protocol(server: str, query: str) -> Phone:
    start = time.time()
    client = StreamlitPhone(server, query)
    await client.open()
    await until(lambda: client.shows(JOINED), 180)
    return Phone("protocol", parse_qs(client.query)["p"][0], time.time() - start, client=client)


async def answer(phone: Phone, at: float, choice: str) -> None:
    await asyncio.sleep(max(0.0, at - time.time()))
    phone.tapped_at = time.time()
    if phone.client is not None:
        await phone.client.answer(choice)
    else:
        await phone.tab.get_by_text(choice, exact=True).click()
        await phone.tab.get_by_role("button", name="Send", exact=True).click()


async def run(args, server: str, store: Store) -> dict:
    from playwright.async_api import async_playwright

    rng = random.Random(0)
    process = server_process(server)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_FLAGS)
        projector = await (await browser.new_context(viewport=PROJECTOR)).new_page()
        await projector.goto(f"{server}/live-class?present=1")
        await projector.get_by_role("button", name="Open a room").click()
        await projector.locator(".lmviz-code").first.wait_for(timeout=120_000)
        code = (await projector.locator(".lmviz-code").first.inner_text()).strip()
        link, query = f"{server}/join?room={code}", f"room={code}"
        await asyncio.sleep(2)
        projector_cores = await cpu_share(process, args.wait)

        # the class joins: the browsers a few at a time, the protocol clients in waves, as phones scan the code
        started = time.monotonic()
        phones = []
        for first in range(0, args.browsers, 5):
            phones += await asyncio.gather(*[join_browser(browser, server, link)
                                             for _ in range(first, min(args.browsers, first + 5))])
        for first in range(0, args.phones - args.browsers, 20):
            phones += await asyncio.gather(*[join_protocol(server, query)
                                             for _ in range(first, min(args.phones - args.browsers, first + 20))])
        joining_s = time.monotonic() - started
        assert store.room(code).participants == args.phones, store.room(code)
        await asyncio.sleep(3)  # the joins' runs over
        waiting_cores = await cpu_share(process, args.wait)
        first_paint = await fresh_first_paint(browser, link)

        # the teacher asks; each phone shows it (pushed), then every phone answers within the window
        asked_at, cpu_before = time.time(), process.cpu_times()
        asked = store.ask(code, "next_token", QUESTION, {})

        async def sees_question(phone: Phone) -> None:
            if phone.client is not None:
                await until(lambda: phone.client.shows(QUESTION.ask) and phone.client.send_id, 60)
            else:
                await phone.tab.get_by_text(QUESTION.ask).wait_for(timeout=60_000)
            phone.question_s = time.time() - asked_at

        await asyncio.gather(*[sees_question(phone) for phone in phones])
        cpu_after = process.cpu_times()
        telling_cpu = cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system
        seen: list[tuple[float, int]] = []

        async def watch_projector():
            while True:
                text = await projector.locator("body").inner_text()
                match = ANSWERED.search(text)
                if match:
                    seen.append((time.time(), int(match.group(1))))
                    if int(match.group(1)) >= len(phones):
                        return
                await asyncio.sleep(0.1)

        watcher = asyncio.create_task(watch_projector())
        start = time.time() + 1
        choices = [rng.choice(QUESTION.choices) for _ in phones]
        await asyncio.gather(*[answer(phone, start + rng.uniform(0, args.window), choice)
                               for phone, choice in zip(phones, choices)])
        await asyncio.wait_for(watcher, timeout=120)

        with store._db.transaction(write=False) as tx:
            stored = sorted(tx.all("SELECT participant, given, updated_at FROM live_answers WHERE question_id = ?",
                                   (asked.id,)), key=lambda row: row[2])
        # the answer stored rank-th is counted once the projector shows rank answers, after it was stored
        tapped = {phone.token: phone.tapped_at for phone in phones}
        to_count = [next(t for t, answered in seen if t >= at and answered >= rank) - tapped[token]
                    for rank, (token, _, at) in enumerate(stored, start=1)]
        same = same_answer_message([p for p in phones if p.kind == "browser"],
                                   [p for p in phones if p.kind == "protocol"])
        by_kind = {kind: [p.question_s for p in phones if p.kind == kind] for kind in ("browser", "protocol")}
        result = {
            "same messages": same, "telling cpu": telling_cpu,
            **{f"question {kind}": (statistics.median(times), percentile(times, 0.95)) if times else None
               for kind, times in by_kind.items()},
            "phones": args.phones, "browsers": args.browsers, "projector cores": projector_cores,
            "waiting cores": waiting_cores, "per phone": (waiting_cores - projector_cores) / args.phones,
            "join p50": statistics.median(p.joined_s for p in phones),
            "join p95": percentile([p.joined_s for p in phones], 0.95), "joining s": joining_s,
            "question p50": statistics.median(p.question_s for p in phones),
            "question p95": percentile([p.question_s for p in phones], 0.95),
            "count p50": statistics.median(to_count), "count p95": percentile(to_count, 0.95),
            "first paint": first_paint, "stored": len(stored), "distinct": len({row[0] for row in stored}),
            "projector shows": seen[-1][1], "rss MiB": process.memory_info().rss / 2**20,
        }
        for phone in phones:
            if phone.client is not None:
                await phone.client.close()
        await browser.close()
    return result


def answer_message(message) -> tuple:
    """What an answer's message says, without what differs between two phones by right (the token in the link,
    the choice, the browser's own context): its page, fragment, widgets and the kind of each widget's value."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    if isinstance(message, (bytes, str)):
        raw, message = message, BackMsg()
        message.ParseFromString(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
    state = message.rerun_script
    return (message.WhichOneof("type"), sorted(parse_qs(state.query_string)), state.page_name or "join",
            state.page_script_hash, state.fragment_id,
            sorted((w.id, w.WhichOneof("value")) for w in state.widget_states.widgets))


def same_answer_message(browsers: list[Phone], clients: list[Phone]) -> bool | None:
    """Whether a protocol client's answer said to the server what a real browser's did (None: no pair to compare).
    The browser's answer is its last message that carries a trigger (Send)."""
    if not browsers or not clients:
        return None
    sent = [answer_message(m) for m in browsers[0].sent]
    answers = [m for m in sent if any(kind == "trigger_value" for _, kind in m[-1])]
    return bool(answers) and answers[-1] == answer_message(clients[0].client.sent)


async def fresh_first_paint(browser, link: str) -> float:
    """A new phone opening the join page while the others wait: seconds to its first contentful paint."""
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    tab = await context.new_page()
    await tab.goto(link)
    # joined, or, in a room at its limit of phones, told so in a sentence: either is the page drawn
    await tab.get_by_text(re.compile(f"{JOINED}|phones in it")).first.wait_for(timeout=120_000)
    paint = await tab.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN")
    await context.close()
    return paint / 1000


def print_table(r: dict) -> None:
    print("| measure | value |")
    print("|---|---:|")
    rows = [
        ("phones joined and waiting (real browsers + protocol clients)",
         f"{r['phones']} ({r['browsers']} + {r['phones'] - r['browsers']})"),
        ("server CPU, the projector alone (cores)", f"{r['projector cores']:.3f}"),
        ("server CPU, the projector and every phone waiting (cores)", f"{r['waiting cores']:.3f}"),
        ("server CPU per waiting phone (cores)", f"{r['per phone']:.5f}"),
        ("join time p50 / p95 (s)", f"{r['join p50']:.2f} / {r['join p95']:.2f}"),
        ("the whole class joined in (s)", f"{r['joining s']:.1f}"),
        ("join page first paint with every phone waiting (s)", f"{r['first paint']:.2f}"),
        ("question asked → on each phone p50 / p95 (s)", f"{r['question p50']:.2f} / {r['question p95']:.2f}"),
        *[(f"question asked → on the {kind} phones p50 / p95 (s)", f"{r[key][0]:.2f} / {r[key][1]:.2f}")
          for kind, key in (("browser", "question browser"), ("protocol client", "question protocol")) if r[key]],
        ("server CPU to tell every phone of the question (core-seconds)", f"{r['telling cpu']:.2f}"),
        ("tap → counted on the projector p50 / p95 (s)", f"{r['count p50']:.2f} / {r['count p95']:.2f}"),
        ("answers stored / distinct phones / the projector's count",
         f"{r['stored']} / {r['distinct']} / {r['projector shows']}"),
        ("a protocol client's answer says what a browser's does", {True: "yes", False: "NO", None: "–"}[
            r["same messages"]]),
        ("server memory (RSS, MiB)", f"{r['rss MiB']:.0f}"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.live_phones", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 phones (2 browsers), 3 s waits (for CI)")
    parser.add_argument("--phones", type=int, default=200, help="phones in the room (default 200)")
    parser.add_argument("--browsers", type=int, default=30, help="of them real Chromium tabs (default 30)")
    parser.add_argument("--wait", type=float, default=20.0, help="seconds each CPU share is measured over")
    parser.add_argument("--window", type=float, default=10.0, help="seconds over which the class answers")
    args = parser.parse_args(argv)
    if args.quick:
        args.phones, args.browsers, args.wait, args.window = 6, 2, 3.0, 2.0
    if not 0 <= args.browsers <= args.phones:
        parser.error("--browsers must be between 0 and --phones")
    if shutil.which("chromium") is None:
        sys.exit("This benchmark needs Debian's chromium (apt-get install chromium).")
    print(f"One server (scripts/serve, SQLite), {psutil.cpu_count()} cores; the benchmark's browsers and clients "
          "run on the same machine, and the CPU figures are the server process's alone.")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'live.sqlite3'}"
        with environment_set({"LMVIZ_LIVE_DB": url, "LMVIZ_WARM_START": "0"}), \
                running_server(Path(folder) / "server.log") as server, Store(url) as store:
            result = asyncio.run(run(args, server, store))
    print_table(result)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
