"""A class on one server, on two replicas behind HAProxy, and on two replicas sharing one scorer.

    python -m benchmarks.replicas [--quick] [--sessions 30]

The same class each time: ``--sessions`` real browser sessions (chromium, one context each: separate cookies, so
separate Streamlit sessions and, behind HAProxy, each its own affinity cookie) open Your sentence with their own
sentence (benchmarks.reliability's) at the same moment, as scripts.live_server.sentence_page_at_once does. Three
setups, each started afresh on loopback and warmed by one visit per replica first:

1. one lmviz server (scripts/serve), the browsers straight at it;
2. two lmviz servers behind HAProxy (scripts.replicas), each with its own copy of the model;
3. the same two, with LMVIZ_SCORER_URL pointing at one Ray Serve scorer (lmviz.serving.ray_scorer) that batches
   every replica's texts.

Per setup: p50 / p95 of the seconds from opening the link to the loss on screen, the class's throughput (sessions
÷ the seconds until the last loss was on screen), how HAProxy spread the connections, whether every page showed its
own text and the loss of that text scored alone, and each process's memory after the class (RSS, and PSS, which
shares out the pages two processes map alike: the model's weights file, the libraries). The browsers run on the
same cores as the servers: on 2 cores they take their share, so the times are the whole machine's, setup against
setup, not a server's alone. --quick (for CI): 3 sessions; its figures mean little.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from benchmarks.gradient_step import load_average
from benchmarks.reliability import sentence
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.loading import load_causal_lm
from scripts.live_server import ROOT, environment_set, free_port, running_server, sentence_page_at_once
from scripts.replicas import running_replicas

LOGS = ROOT / "artifacts" / "replicas-benchmark"
SCORER_START_SECONDS = 180



@contextlib.contextmanager
def running_scorer(log_path: Path):
    """lmviz.serving.ray_scorer on a free loopback port, once it answers; yields its URL, and stops it after."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "lmviz.serving.ray_scorer", "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            url = f"http://127.0.0.1:{port}/"
            deadline = time.monotonic() + SCORER_START_SECONDS
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the scorer exited with code {process.returncode} (see {log_path})")
                try:
                    urllib.request.urlopen(url, timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the scorer did not answer within {SCORER_START_SECONDS} s") from None
                    time.sleep(1)  # Ray's start and the model's load take seconds
            yield url, process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=90)  # Serve's own shutdown waits for its controller
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process and every process under it, MiB."""
    processes = [psutil.Process(pid)]
    processes += processes[0].children(recursive=True)
    rss = pss = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            info = process.memory_full_info()
            rss, pss = rss + info.rss, pss + info.pss
    return rss / 2**20, pss / 2**20


def server_pids() -> list[int]:
    """This process's lmviz servers (scripts/serve execs streamlit)."""
    return [p.pid for p in psutil.Process().children(recursive=True)
            if "streamlit" in " ".join(p.cmdline()) and "run" in p.cmdline()]


def spread(replicas) -> str:
    """How HAProxy spread the work: each replica's stot, the connections it was sent (each browser session makes
    several: the page's files, its WebSocket)."""
    return ", ".join(f"{name} {row['stot']}" for name, row in replicas.stats().items())

def the_class(url: str, chromium: str, texts: list[str], warm_visits: int) -> dict:
    sentence_page_at_once(url, chromium, [f"A warm-up visit, number {i}." for i in range(warm_visits)])
    start = time.perf_counter()
    shown = sentence_page_at_once(url, chromium, texts)
    seconds = [s.loss_seconds for s in shown]
    q = statistics.quantiles(seconds, n=100) if len(seconds) > 1 else [seconds[0]] * 99
    return {"shown": shown, "p50": q[49], "p95": q[94], "throughput": len(texts) / max(seconds),
            "wall": time.perf_counter() - start}


def checked(shown, alone: dict[str, float]) -> tuple[int, float]:
    """(pages that showed another session's text, the largest difference from the text's loss scored alone)."""
    crossed = sum(1 for s in shown if s.text_shown != s.text)
    return crossed, max(abs(float(s.loss_shown) - alone[s.text]) for s in shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 sessions (for CI)")
    parser.add_argument("--sessions", type=int, default=30)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None or shutil.which("haproxy") is None:
        print("skipped: this needs chromium and haproxy (apt-get install chromium haproxy)")
        return
    count = 3 if args.quick else args.sessions
    texts = [sentence(200 + i) for i in range(count)]
    loaded = load_causal_lm(device="cpu")
    alone = {text: analyse_clm(loaded, text).loss for text in texts}
    del loaded
    started, begin = load_average(), time.perf_counter()
    rows = []

    with running_server(LOGS / "one-server.log") as url:
        result = the_class(url, chromium, texts, warm_visits=1)
        memory = {f"server (pid {pid})": memory_mib(pid) for pid in server_pids()}
    rows.append(("1. one server, its own model", result, "–", memory))

    with running_replicas(2, LOGS / "two-replicas") as replicas:
        result = the_class(replicas.url, chromium, texts, warm_visits=4)
        memory = {f"replica (pid {pid})": memory_mib(pid) for pid in server_pids()}
        rows.append(("2. two replicas, each its own model", result, spread(replicas), memory))

    with running_scorer(LOGS / "scorer.log") as (scorer_url, scorer_pid):
        with environment_set({"LMVIZ_SCORER_URL": scorer_url}), running_replicas(2, LOGS / "shared") as replicas:
            result = the_class(replicas.url, chromium, texts, warm_visits=4)
            memory = {f"replica (pid {pid})": memory_mib(pid) for pid in server_pids()}
            memory["Ray scorer, all its processes"] = memory_mib(scorer_pid)
            rows.append(("3. two replicas, one shared scorer", result, spread(replicas), memory))

    print(f"A class of {count} on Your sentence, real browsers (chromium) at once, on loopback; "
          f"{psutil.cpu_count()} cores, load average {started} at the start")
    print(f"{'setup':<38} {'p50 s':>6} {'p95 s':>6} {'sessions/s':>10}  {'wrong text':>10} {'loss gap':>8}  "
          f"connections per replica")
    for name, result, where, _ in rows:
        crossed, gap = checked(result["shown"], alone)
        print(f"{name:<38} {result['p50']:>6.1f} {result['p95']:>6.1f} {result['throughput']:>10.2f}  "
              f"{crossed:>10} {gap:>8.1e}  {where}")
    print("   p50 / p95: seconds from opening the link to the loss on screen. sessions/s: the class ÷ the seconds "
          "until the last loss was on screen. wrong text: pages that showed another session's text. loss gap: the "
          "largest difference from the text's loss scored alone (the page shows 5 decimals). connections per replica: "
          "HAProxy's stot, warm-up visits included.")
    print(f"\n{'memory after the class':<38} {'RSS MiB':>8} {'PSS MiB':>8}")
    for name, _, _, memory in rows:
        print(name)
        for process, (rss, pss) in memory.items():
            print(f"   {process:<35} {rss:>8.0f} {pss:>8.0f}")
    print("   PSS shares out the pages processes map alike (the weights file, the libraries) between them; RSS counts "
          "them in each.")
    print(f"\nLoad average {started} at the start, {load_average()} at the end; {time.perf_counter() - begin:.0f} s.")


if __name__ == "__main__":
    main()
