"""The live class's store on both of its back ends: an SQLite file per test, and a real PostgreSQL server started
once for the session from Debian's binaries, with a fresh database per test.

The server runs as the `postgres` user when the tests run as root (initdb refuses root), keeps its data and its
socket in a temporary folder, and listens on no network address. Where PostgreSQL is not installed its tests are
skipped with a sentence, unless LMVIZ_REQUIRE_POSTGRES is set (as .ci/run does): then they fail, as the browser
tests do without a browser.

No test may hang the run: a blocking call has its own timeout, and every test here is stopped after
TEST_LIMIT_S seconds whatever it waits on."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from lmviz.live.store import Store

TEST_LIMIT_S = 120
SERVER_LIMIT_S = 60  # initdb, start and stop, each


@pytest.fixture(autouse=True)
def bounded_in_time():
    def too_long(signum, frame):
        raise TimeoutError(f"this test ran for more than {TEST_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(TEST_LIMIT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL's programs (/usr/lib/postgresql/<version>/bin), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


class PostgresServer:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="lmviz-pg-"))
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.folder, user="postgres")
        self.data = self.folder / "data"
        self.names = (f"lmviz_test_{n}" for n in itertools.count())

    def _as_owner(self, *command: str) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=SERVER_LIMIT_S)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done

    def start(self):
        self._as_owner(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                       "-E", "UTF8", "--no-sync")
        # no TCP at all (listen_addresses ''), the socket in our folder, and no fsync: a test's data may be lost
        self._as_owner(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
                       "-w", "-t", str(SERVER_LIMIT_S), "-o",
                       f"-c listen_addresses='' -k {self.folder} -c fsync=off -c max_connections=200", "start")

    def stop(self):
        try:
            self._as_owner(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                           "-t", str(SERVER_LIMIT_S), "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql:///{database}?host={self.folder}&user=postgres"

    def _admin(self, statement: str):
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=10) as connection:
            connection.execute(statement)

    def fresh_database(self) -> str:
        name = next(self.names)
        self._admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str):
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_server():
    bin_dir = postgres_bin()
    if bin_dir is None:
        if os.environ.get("LMVIZ_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is not installed (apt-get install postgresql); CI requires the live class's "
                        "tests on it.")
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql to test the live class's store on it")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


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
