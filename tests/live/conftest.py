"""The live class's store on both of its back ends: an SQLite file per test, and a real PostgreSQL server started
once for the session from Debian's binaries, with a fresh database per test.

The server runs as the `postgres` user when the tests run as root (initdb refuses root), keeps its data and its
socket in a temporary folder, and listens on no network address. Where PostgreSQL is not installed its tests are
skipped with a sentence, unless LMVIZ_REQUIRE_POSTGRES is set (as .ci/run does): then they fail, as the browser
tests do without a browser.

No test may hang the run: a blocking call has its own timeout, and every test here is stopped after
TEST_LIMIT_S seconds whatever it waits on."""

from __future__ import annotations

import os
import signal

import pytest

from lmviz.live.store import Store
from scripts.postgres import postgres_bin, running_postgres

TEST_LIMIT_S = 120


@pytest.fixture(autouse=True)
def bounded_in_time():
    def too_long(signum, frame):
        raise TimeoutError(f"this test ran for more than {TEST_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(TEST_LIMIT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def postgres_server():
    bin_dir = postgres_bin()
    if bin_dir is None:
        if os.environ.get("LMVIZ_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is not installed (apt-get install postgresql); CI requires the live class's "
                        "tests on it.")
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql to test the live class's store on it")
    with running_postgres(bin_dir) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The URL of an empty database on each back end."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'live.sqlite3'}"
        return
    server = request.getfixturevalue("postgres_server")
    name = server.fresh_database()
    yield server.url(name)
    server.drop_database(name)


@pytest.fixture
def store(store_url):
    with Store(store_url, keep_hours_after_closing=24) as opened:
        yield opened
