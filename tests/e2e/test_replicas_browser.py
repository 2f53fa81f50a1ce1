"""Two lmviz replicas behind HAProxy (scripts/replicas.py), and real browsers through it.

A Streamlit session lives in the memory of the replica its WebSocket reached: the files its download buttons serve
(/media/), the files it is sent (/_stcore/upload_file/), its st.session_state. So each browser's plain HTTP requests
must reach that same replica (HAProxy's affinity cookie), and without affinity they fail. When a replica is lost,
its browsers reconnect through HAProxy to another, where a new session starts. Streamlit's client does not run the
page again on its own there (it reruns after a reconnection only if a run was under way), so the tab keeps showing
the lost replica's drawing, whose download button now fails, until the learner reloads it. Then what the page keeps
in its link (Your sentence's text, its switches) comes back, the same numbers; what lived only in the lost replica's
session is gone: check-yourself progress made on the open page (a link carries ?answered= only from the next lesson
link on), a model trained on the Train page, a file uploaded there.

Which replica answered a request is read from HAProxy's log (a line per request, written when it ends), and, for
the WebSocket, which stays open, from the X-Lmviz-Replica header HAProxy adds to every response, its 101 included,
through the Chrome DevTools Protocol: Playwright's own events report neither a WebSocket's headers nor the
response to a download.
"""

import csv
import math
import re
import time
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from lmviz.core.corpus import corpus_from_text
from lmviz.core.numbers import fmt
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.lessons.training import corpus_tokenizer
from scripts.live_server import LOSS_METRIC, ROOT, SETTLED
from scripts.replicas import COOKIE, running_replicas
from tests.e2e.helpers import assert_no_error, metric, settle

HEADER = "x-lmviz-replica"
TEXTS = ["The capital of France is Paris.", "Our teacher explains the loss of a language model."]


def replicas_for(request, affinity: bool):
    return running_replicas(2, ROOT / "artifacts" / "replicas" / request.node.name, affinity=affinity)


@dataclass
class Response:
    path: str
    status: int
    replica: str


# HAProxy's line (deploy/haproxy/haproxy.cfg.template's log-format: no client address, the path without its query):
# ... lmviz replicas/r2 0/0/0/1/1 404 154 - - ---- 1/1/0/0/0 0/0 GET /media/735a56cd.csv
LOG_LINE = re.compile(r' replicas/(\S+) \S+ (\d{3}) .* [A-Z]+ (/\S*)$')


def served(log, start: int, path_start: str) -> list[Response]:
    """The requests for paths starting with ``path_start`` that HAProxy's log records after its line ``start``."""
    found = [LOG_LINE.search(line) for line in log.read_text().splitlines()[start:]]
    return [Response(m[3], int(m[2]), m[1]) for m in found if m and m[3].startswith(path_start)]


class WatchedTab:
    """A tab of its own browser context (its own cookies: its own Streamlit session), every HTTP response and
    WebSocket handshake of which is recorded with the replica that sent it; its requests' lines in HAProxy's log
    are read from ``log``."""

    def __init__(self, browser, log, cookies: list[dict] = ()):
        self.log = log
        self.context = browser.new_context(viewport={"width": 1280, "height": 720})
        self.context.add_cookies(list(cookies))
        self.tab = self.context.new_page()
        self.responses: list[Response] = []
        self.sockets: list[str] = []  # the replica of each WebSocket opened, in order
        devtools = self.context.new_cdp_session(self.tab)
        devtools.send("Network.enable")
        devtools.on("Network.responseReceived", self._record)
        devtools.on("Network.webSocketHandshakeResponseReceived",
                    lambda event: self.sockets.append(self._response(event).replica))

    def _record(self, event) -> None:
        if event["response"]["url"].startswith("http"):  # not the page's own data: and blob: URLs
            self.responses.append(self._response(event))

    @staticmethod
    def _response(event) -> Response:
        response = event["response"]
        headers = {name.lower(): value for name, value in response["headers"].items()}
        return Response(urlsplit(response.get("url", "")).path, response["status"], headers.get(HEADER, ""))

    def wait_for(self, condition, what: str, seconds: float = 60):
        """Wait, letting the browser's events arrive, until ``condition()`` is true; its value."""
        deadline = time.monotonic() + seconds
        while not (value := condition()):
            assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s"
            self.tab.wait_for_timeout(100)
        return value

    def served(self, action, path_start: str) -> Response:
        """Do ``action``; HAProxy's record of the request for ``path_start`` it led to (the last, if several)."""
        start = len(self.log.read_text().splitlines())
        action()
        return self.wait_for(lambda: served(self.log, start, path_start), f"request for {path_start}")[-1]

    def open(self, url: str) -> None:
        self.tab.goto(url)
        settle(self.tab, timeout=300_000)
        assert_no_error(self.tab)

    def download_table(self):
        """Press the key table's "Download the table (CSV)"; the /media/ response and the download."""
        with self.tab.expect_download(timeout=60_000) as download:
            media = self.served(self.tab.get_by_role("button", name="Download the table (CSV)").click, "/media/")
        return media, download.value

    def upload(self, path) -> Response:
        """Send ``path`` through the Train page's file uploader; the /_stcore/upload_file/ response."""
        sent = self.served(lambda: self.tab.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
            path), "/_stcore/upload_file/")
        self.tab.wait_for_function(SETTLED, timeout=300_000)
        return sent


def other(replica: str) -> str:
    return {"r1": "r2", "r2": "r1"}[replica]


def token_losses(path) -> list[str]:
    with open(path, encoding="utf-8-sig") as file:
        return [row["-log p(label)"] for row in csv.DictReader(file)]


def training_text(path):
    """Write a .txt file the Train page can train on (at least 40 sentences); the V its tokenizer would have."""
    text = "\n".join(f"The cat number {i} sat on the mat and looked at the dog." for i in range(45))
    path.write_text(text)
    return len(corpus_tokenizer(corpus_from_text(text)))


def test_with_affinity_a_sessions_requests_all_reach_its_replica(haproxy, browser, bundled, request, tmp_path):
    """Every response a browser gets (the page, its scripts, the WebSocket, the table's download, the upload)
    comes from one replica, the one HAProxy's cookie names; the download holds this page's numbers and the
    uploaded text is the one the page builds its model for."""
    story = tmp_path / "story.txt"
    vocabulary = training_text(story)
    with replicas_for(request, affinity=True) as replicas:
        watched = WatchedTab(browser, replicas.haproxy_log)
        watched.open(f"{replicas.url}/sentence?text={quote(TEXTS[0])}")
        replica = watched.sockets[-1]
        media, download = watched.download_table()
        assert (media.status, media.replica) == (200, replica)
        assert download.failure() is None and download.suggested_filename == "lmviz_tokens.csv"
        assert token_losses(download.path()) == [fmt(row.nll) for row in analyse_clm(bundled, TEXTS[0]).rows]

        watched.open(f"{replicas.url}/train")
        watched.tab.get_by_text("upload a .txt file").click()
        watched.tab.wait_for_function(SETTLED, timeout=120_000)
        sent = watched.upload(story)
        assert (sent.status, sent.replica) == (204, replica)
        assert metric(watched.tab, f"Uniform guess: ln V = ln {vocabulary}").inner_text() == fmt(math.log(vocabulary))
        assert_no_error(watched.tab)

        assert watched.sockets == [replica, replica]  # one per page opened
        assert {r.replica for r in watched.responses} == {replica}, watched.responses
        cookie = {c["name"]: c["value"] for c in watched.context.cookies()}[COOKIE]
        assert cookie == replica
        watched.context.close()


def next_request_to(front: str, replica: str) -> None:
    """Round-robin over two replicas, no affinity: plain requests until one is answered by the other replica,
    so that the next request HAProxy balances goes to ``replica``."""
    for _ in range(2):
        with urllib.request.urlopen(f"{front}/_stcore/health", timeout=10) as response:
            if response.headers[HEADER] == other(replica):
                return
    raise AssertionError(f"two requests in a row went to {replica}: not round-robin")


def test_without_affinity_a_download_and_an_upload_fail_on_the_other_replica(haproxy, browser, request,
                                                                             tmp_path):
    """The failure affinity prevents (streamlit#4173, #6224): HAProxy sends each request to the next replica,
    and a request that lands on the replica without the session gets a 404 for the table's file and a 400
    ("Invalid session_id") for the upload; the same request on the session's replica works. Which replica each
    lands on is set by plain requests sent before it (round-robin); the browser may load a script of its own on
    the first try, so each action is tried until it has landed on each replica once, at most 4 times."""
    with replicas_for(request, affinity=False) as replicas:
        watched = WatchedTab(browser, replicas.haproxy_log)
        watched.open(f"{replicas.url}/sentence?text={quote(TEXTS[0])}")
        session = watched.sockets[-1]
        landed = {}
        for target in [other(session), session] * 2:
            if target in landed:
                continue
            next_request_to(replicas.url, target)
            media, download = watched.download_table()
            landed.setdefault(media.replica, (media.status, download.failure()))
        assert landed == {other(session): (404, "canceled"), session: (200, None)}

        watched.open(f"{replicas.url}/train")
        watched.tab.get_by_text("upload a .txt file").click()
        watched.tab.wait_for_function(SETTLED, timeout=120_000)
        session = watched.sockets[-1]
        landed = {}
        for attempt, target in enumerate([other(session), session] * 2):
            if target in landed:
                continue
            story = tmp_path / f"story-{attempt}.txt"  # a new file each time: the same one again sends nothing
            training_text(story)
            next_request_to(replicas.url, target)
            sent = watched.upload(story)
            shown = watched.tab.locator("[data-testid='stFileUploader']").inner_text()
            landed.setdefault(sent.replica, (sent.status, "Request failed with status code 400" in shown))
            watched.tab.get_by_role("button", name=f"Remove {story.name}").click()
            watched.tab.wait_for_function(SETTLED, timeout=120_000)
        assert landed == {other(session): (400, True), session: (204, False)}  # the uploader says it failed
        watched.context.close()


def test_a_lost_replicas_sessions_reconnect_to_the_other_with_the_same_result(haproxy, browser, bundled, request):
    """Two learners on Your sentence, each with their own text in the link, one on each replica (their affinity
    cookies set as HAProxy would have). r1 stops: its learner's tab reconnects its WebSocket by itself, through
    HAProxy, to r2; reloaded, the page runs on r2 from its link: the same text, the same loss, its download served
    by r2. The other learner's page never notices."""
    with replicas_for(request, affinity=True) as replicas:
        learners = [WatchedTab(browser, replicas.haproxy_log, [{"name": COOKIE, "value": name, "url": replicas.url}])
                    for name in ("r1", "r2")]
        expected = [fmt(analyse_clm(bundled, text).loss) for text in TEXTS]
        tables = []
        for learner, text, loss in zip(learners, TEXTS, expected):
            learner.open(f"{replicas.url}/sentence?text={quote(text)}")
            assert learner.tab.inner_text(LOSS_METRIC).strip() == loss
            media, _ = learner.download_table()
            tables.append(media.path)  # named by its content's hash: the same numbers, the same name
        assert [learner.sockets for learner in learners] == [["r1"], ["r2"]]
        lost, kept = learners

        start = time.perf_counter()
        replicas.stop("r1")
        stopped = time.perf_counter() - start
        lost.wait_for(lambda: lost.sockets[1:] == ["r2"], "WebSocket to r2", seconds=120)
        reconnected = time.perf_counter() - start
        # Streamlit's client reruns the page after a reconnection only where a run was under way: until then the
        # tab shows what r1 drew, and r2 holds none of it (its table's file). The learner reloads the page.
        lost.open(lost.tab.url)
        print(f"r1 stopped in {stopped:.1f} s; the WebSocket was on r2 {reconnected:.1f} s and the page's result "
              f"back, from r2, {time.perf_counter() - start:.1f} s after the stop began")
        assert lost.sockets[1:] == ["r2", "r2"]
        assert replicas.wait_until({"r1": "DOWN", "r2": "UP"}, 30)
        assert lost.tab.get_by_label("Your text").input_value() == TEXTS[0]
        assert lost.tab.inner_text(LOSS_METRIC).strip() == expected[0]
        media, download = lost.download_table()
        assert (media.status, media.replica) == (200, "r2")
        assert token_losses(download.path()) == [fmt(row.nll) for row in analyse_clm(bundled, TEXTS[0]).rows]
        assert_no_error(lost.tab)

        assert kept.sockets == ["r2"]  # never reconnected
        assert kept.tab.inner_text(LOSS_METRIC).strip() == expected[1]
        media, download = kept.download_table()
        assert (media.status, media.path, media.replica) == (200, tables[1], "r2")
        for learner in learners:
            learner.context.close()

