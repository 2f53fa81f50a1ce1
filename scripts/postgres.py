"""A PostgreSQL server of its own, for the live class's tests and benchmark: started from Debian's binaries, its data
and its socket in a temporary folder, listening on no network address, stopped and removed at the end.

    with running_postgres() as server:
        url = server.url(server.fresh_database())

It runs as the `postgres` user when started by root (initdb refuses root). Durability is off (no fsync): what it
holds is thrown away."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

SERVER_LIMIT_S = 60  # initdb, start and stop, each


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


@contextlib.contextmanager
def running_postgres(bin_dir: Path | None = None) -> Iterator[PostgresServer]:
    """A started server; RuntimeError where PostgreSQL is not installed."""
    bin_dir = bin_dir or postgres_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
