"""lmviz as several replicas behind HAProxy, on loopback: what a host with more than one lmviz process runs.

    python -m scripts.replicas --replicas 2 [--no-affinity] [--port 8080]
    python -m scripts.replicas --write-config deploy/compose/haproxy.cfg --bind :8080 --server app1:8501 ...

The first starts N servers (scripts/serve, each on a free loopback port, each with its own log) and HAProxy in
front, and serves until Ctrl-C; the second writes the HAProxy configuration for servers elsewhere (the compose
file's services) from the same template, deploy/haproxy/haproxy.cfg.template. The browser tests
(tests/e2e/test_replicas_browser.py) use ``running_replicas``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import shutil
import socket
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from lmviz.app.live_access import PUBLIC_URL_VARIABLE
from scripts.live_server import ROOT, environment_set, free_port, running_server

TEMPLATE = ROOT / "deploy" / "haproxy" / "haproxy.cfg.template"
COOKIE = "LMVIZ_REPLICA"  # HAProxy's affinity cookie: the name of the replica a browser's session lives on
STARTUP_SECONDS = 60  # for HAProxy to see every replica up, once each answers its own health check


def render_config(front: str, servers: dict[str, str], stats: str, affinity: bool = True,
                  resolver: str | None = None) -> str:
    """HAProxy's configuration: ``front`` and ``stats`` are bind addresses, ``servers`` maps each replica's name
    (its cookie value too) to its host:port. Without affinity, every request is balanced on its own, round-robin:
    the setup Streamlit's docs warn against, kept for the test that shows how it fails. With a ``resolver``
    (host:port of a DNS server), server names are looked up there while HAProxy runs, not once at its start: a
    container that restarts comes back on a new address."""
    if affinity:
        lines = f"    cookie {COOKIE} insert indirect nocache httponly"
    else:
        lines = "    # no session affinity (scripts/replicas.py --no-affinity): each request goes to the next replica"
    resolvers = f"resolvers dns\n    nameserver dns {resolver}\n    hold valid 10s\n" if resolver else ""
    return Template(TEMPLATE.read_text()).substitute(
        front=front, stats=stats, affinity=lines, resolvers=resolvers,
        resolution=" resolvers dns init-addr last,libc,none" if resolver else "",
        servers="\n".join(f"    server {name} {address}" + (f" cookie {name}" if affinity else "")
                          for name, address in servers.items()))


@dataclass
class Replicas:
    """A running set: HAProxy's front URL, and each replica's own URL by name (r1, r2, ...)."""
    url: str
    replica_urls: dict[str, str]
    stats_url: str
    haproxy_log: Path
    _stops: dict[str, contextlib.ExitStack] = field(repr=False)

    def stop(self, name: str) -> None:
        """Stop one replica as a host losing it would (SIGTERM: Streamlit closes its sessions' WebSockets)."""
        self._stops[name].close()

    def stats(self) -> dict[str, dict[str, str]]:
        """HAProxy's stats page, a row per replica (its status, stot: the connections it was sent, ...)."""
        with urllib.request.urlopen(f"{self.stats_url};csv", timeout=5) as response:
            rows = csv.DictReader(io.StringIO(response.read().decode().lstrip("# ")))
            return {row["svname"]: row for row in rows if row["svname"] in self.replica_urls}

    def states(self) -> dict[str, str]:
        """HAProxy's health-check view of each replica: "UP", "DOWN", or a transition such as "UP 1/2"."""
        return {name: row["status"] for name, row in self.stats().items()}

    def wait_until(self, wanted: dict[str, str], seconds: float) -> dict[str, str]:
        """Poll HAProxy until the named replicas are in the wanted states; their states, or TimeoutError."""
        deadline = time.monotonic() + seconds
        while True:
            states = self.states()
            if all(states.get(name) == state for name, state in wanted.items()):
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(f"HAProxy sees {states}, not {wanted}, after {seconds:.0f} s")
            time.sleep(0.2)  # the checks run every second (the template's default-server line)


def haproxy_path() -> str | None:
    """Debian installs haproxy in /usr/sbin, which is on root's PATH but not on other users'."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")


@contextlib.contextmanager
def running_replicas(count: int, logs: Path, affinity: bool = True, port: int | None = None):
    """``count`` lmviz servers and HAProxy in front of them, all on loopback; yields a Replicas once HAProxy's
    health checks see every replica up. Everything started is stopped on the way out, whatever happened."""
    haproxy = haproxy_path()
    if haproxy is None:
        raise RuntimeError("haproxy is not installed (apt-get install haproxy)")
    logs.mkdir(parents=True, exist_ok=True)
    names = [f"r{i}" for i in range(1, count + 1)]
    # HAProxy's port is chosen first, for the replicas' LMVIZ_PUBLIC_URL, and held by a socket until HAProxy
    # starts, so that no replica's free port can be it
    holder = socket.socket()
    holder.bind(("127.0.0.1", port or 0))
    front, stats = f"127.0.0.1:{holder.getsockname()[1]}", f"127.0.0.1:{free_port()}"
    with contextlib.ExitStack() as stack:
        stack.callback(holder.close)
        stops = {name: stack.enter_context(contextlib.ExitStack()) for name in names}
        # Started side by side: no replica waits for another's start-up. Each is told the address the browsers
        # reach it at, HAProxy's (LMVIZ_PUBLIC_URL): the live class's join link and QR code carry it, and a server
        # with a public address asks for the teacher key (lmviz.app.live_access).
        with ThreadPoolExecutor(count) as pool, environment_set({PUBLIC_URL_VARIABLE: f"http://{front}"}):
            started = [pool.submit(stops[name].enter_context, running_server(logs / f"replica-{name}.log"))
                       for name in names]
            replica_urls = {name: future.result() for name, future in zip(names, started)}
        config = logs / "haproxy.cfg"
        config.write_text(render_config(front, {name: url.removeprefix("http://") for name, url in
                                                replica_urls.items()}, stats, affinity))
        log = stack.enter_context(open(logs / "haproxy.log", "w"))
        holder.close()
        process = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
        stack.callback(stop_process, process)
        replicas = Replicas(f"http://{front}", replica_urls, f"http://{stats}/stats", logs / "haproxy.log", stops)
        wait_for_haproxy(replicas, process)
        replicas.wait_until(dict.fromkeys(names, "UP"), STARTUP_SECONDS)
        yield replicas


def wait_for_haproxy(replicas: Replicas, process: subprocess.Popen, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"haproxy exited with code {process.returncode} (see {replicas.haproxy_log})")
        try:
            replicas.states()
            return
        except OSError:
            time.sleep(0.2)  # not listening yet
    raise RuntimeError(f"haproxy's stats page did not answer within {seconds:.0f} s")


def stop_process(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.replicas", description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2, help="how many lmviz servers (default 2)")
    parser.add_argument("--no-affinity", action="store_true",
                        help="balance every request on its own (shows the failure affinity prevents)")
    parser.add_argument("--port", type=int, help="HAProxy's loopback port (default: a free one)")
    parser.add_argument("--write-config", type=Path, metavar="PATH",
                        help="only write HAProxy's configuration for --server addresses, and exit")
    parser.add_argument("--bind", default=":8080", help="with --write-config: HAProxy's bind address")
    parser.add_argument("--stats", default="127.0.0.1:8404", help="with --write-config: the stats page's address")
    parser.add_argument("--server", action="append", default=[], metavar="HOST:PORT",
                        help="with --write-config: a replica's address (repeat for each; named r1, r2, ...)")
    parser.add_argument("--resolver", metavar="HOST:PORT",
                        help="with --write-config: the DNS server that names the replicas (Docker's: 127.0.0.11:53)")
    args = parser.parse_args(argv)
    if args.write_config:
        if not args.server:
            parser.error("--write-config needs at least one --server")
        servers = {f"r{i}": address for i, address in enumerate(args.server, 1)}
        args.write_config.write_text(render_config(args.bind, servers, args.stats, not args.no_affinity,
                                                          args.resolver))
        return
    start = time.perf_counter()
    with running_replicas(args.replicas, ROOT / "artifacts" / "replicas", not args.no_affinity, args.port) as replicas:
        print(f"{args.replicas} replicas up behind HAProxy in {time.perf_counter() - start:.1f} s: {replicas.url}")
        for name, url in replicas.replica_urls.items():
            print(f"  {name}: {url}")
        print(f"HAProxy's stats: {replicas.stats_url}; logs in artifacts/replicas/. Ctrl-C stops everything.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
