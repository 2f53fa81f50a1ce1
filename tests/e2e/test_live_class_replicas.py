"""A live class across two replicas behind HAProxy, on PostgreSQL (scripts/replicas.py, scripts/postgres.py): the
projector's browser is kept on one replica and a phone's on the other by HAProxy's affinity cookie, and both see
the same room, live, because both replicas use the one database LMVIZ_LIVE_DB names. Through HAProxy the server
is public to lmviz, so the room takes the teacher key (LMVIZ_LIVE_KEY), which leaves the address bar at once; and a
phone that opens the teacher's link with the room's code, through HAProxy or straight at a replica on loopback,
gets no teacher control of any kind."""

import os
import re
import time
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from lmviz.app.live_access import KEY_PARAM
from lmviz.live.store import Store
from scripts.live_server import ROOT, environment_set
from scripts.postgres import postgres_bin, running_postgres
from scripts.replicas import COOKIE, running_replicas
from tests.e2e.helpers import assert_no_error, settle
from tests.e2e.test_live_class import PHONE, POLL_MS, PROJECTOR, answered, send

TEACHER_KEY = "a-key-for-the-test"
# HAProxy's line for a request (deploy/haproxy/haproxy.cfg.template): ... replicas/r2 ... GET /_stcore/stream
STREAM = re.compile(r" replicas/(\S+) .* GET /_stcore/stream$")


@pytest.fixture()
def replicas_on_postgres(haproxy, request):
    if postgres_bin() is None:
        if os.environ.get("LMVIZ_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is not installed (apt-get install postgresql); CI requires this test.")
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql to run this test")
    with running_postgres() as database:
        url = database.url(database.fresh_database())
        # no LMVIZ_PUBLIC_URL here: scripts/replicas.py sets it to HAProxy's address, as a host running it gets
        settings = {"LMVIZ_LIVE_DB": url, "LMVIZ_LIVE_KEY": TEACHER_KEY, "LMVIZ_WARM_START": "0"}
        assert "LMVIZ_PUBLIC_URL" not in os.environ
        logs = ROOT / "artifacts" / "replicas" / request.node.name
        with environment_set(settings), running_replicas(2, logs) as replicas, Store(url) as store:
            yield replicas, store


def pinned_tab(new_tab, replicas, replica: str, viewport: dict, **options):
    """A browser of its own whose every request HAProxy sends to ``replica`` (its affinity cookie set first)."""
    context, tab = new_tab(viewport, **options)
    context.add_cookies([{"name": COOKIE, "value": replica, "url": replicas.url}])
    return context, tab


def test_a_phone_on_one_replica_and_the_projector_on_the_other_share_the_room(new_tab, replicas_on_postgres):
    replicas, store = replicas_on_postgres
    projector_context, projector = pinned_tab(new_tab, replicas, "r1", PROJECTOR)
    projector.goto(f"{replicas.url}/live-class?present=1&{KEY_PARAM}={TEACHER_KEY}")
    settle(projector, timeout=300_000)
    assert KEY_PARAM not in urlsplit(projector.url).query  # the teacher key leaves the address bar at once
    projector.get_by_role("button", name="Open a room").click()
    code_box = projector.locator(".lmviz-code").first
    expect(code_box).to_be_visible(timeout=POLL_MS)
    code = code_box.inner_text().strip()
    assert store.room(code).is_open  # in PostgreSQL, where the other replica reads it
    link = re.search(r"open (\S+) and the code", projector.get_by_text("Scan the QR code").inner_text()).group(1)
    assert link == f"{replicas.url}/join?room={code}"  # LMVIZ_PUBLIC_URL: HAProxy's address, not a replica's

    phone_context, phone = pinned_tab(new_tab, replicas, "r2", PHONE, is_mobile=True, has_touch=True)
    phone.goto(link)
    expect(phone.get_by_text(f"You are in the class {code}.")).to_be_visible(timeout=120_000)
    expect(projector.get_by_text("1 phone has joined", exact=False).first).to_be_visible(timeout=POLL_MS)

    # the teacher asks Toy example's first question from its page, on r1; the phone, on r2, answers it
    projector.locator("[data-testid='stExpandSidebarButton']").click()
    projector.locator("[data-testid='stSidebarNav']").get_by_role("link", name="Toy example").click()
    settle(projector, timeout=300_000)
    projector.locator("[data-testid='stSidebarCollapseButton'] button").click()
    ask = projector.get_by_role("button", name="Ask the room").first
    ask.scroll_into_view_if_needed()
    ask.click()
    expect(projector.get_by_text("0 of 1 answered")).to_be_visible(timeout=POLL_MS)
    asked = store.current(code)
    send(phone, f"{asked.question.answer:.5f}", asked)
    expect(projector.get_by_text("1 of 1 answered")).to_be_visible(timeout=POLL_MS)
    assert answered(projector) == f"{store.aggregate(asked.id).answered} of {store.room(code).participants} answered"
    for tab in (projector, phone):
        assert_no_error(tab)

    # the teacher's own link, with the room's code off the projector, typed on a phone: through HAProxy (on either
    # replica) and straight at a replica's port on loopback, no page offers a teacher control
    _, intruder = new_tab(PHONE, is_mobile=True, has_touch=True)
    for base in (replicas.url, *replicas.replica_urls.values()):
        for path in ("live-class", "toy"):
            intruder.goto(f"{base}/{path}?teaching={code}")
            settle(intruder, timeout=300_000)
            assert_no_teacher_control(intruder)
    assert store.room(code).is_open and store.current(code).id == asked.id  # nothing the intruder could change

    # HAProxy's log: the two browsers' WebSockets (logged when they close) went one to each replica
    projector_context.close()
    phone_context.close()

    def streams() -> set[str]:
        return {m[1] for m in map(STREAM.search, replicas.haproxy_log.read_text().splitlines()) if m}

    deadline = time.monotonic() + 30
    while streams() != {"r1", "r2"} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert streams() == {"r1", "r2"}


TEACHER_CONTROLS = ("Open a room", "End the class", "Ask the room", "Reveal", "Ask again", "Close", "Approve",
                    "Remove", "Download the results (CSV)")


def assert_no_teacher_control(tab) -> None:
    expect(tab.locator("[data-testid='stMain']")).to_be_visible()
    shown = [name for name in TEACHER_CONTROLS if tab.get_by_role("button", name=name, exact=True).count()]
    assert not shown, f"{tab.url} offers {shown}"
    assert tab.get_by_text("Run this class from another device", exact=False).count() == 0
