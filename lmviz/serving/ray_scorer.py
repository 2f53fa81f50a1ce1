"""One causal LM for every replica: a Ray Serve deployment that scores the texts lmviz.serving.remote.RemoteBatcher
sends, gathering those that arrive together, from any replica, into one padded forward pass (@serve.batch) scored
by lmviz.serving.scoring.analyse_batch, the function a replica's own Batcher uses: the same code's numbers.

Started on loopback, until stopped (Ctrl-C or SIGTERM) or for --seconds at most:

    python -m lmviz.serving.ray_scorer --port 8000 [--model NAME] [--cpus 2] [--seconds N]

and the replicas pointed at it with LMVIZ_SCORER_URL=http://127.0.0.1:8000/. A GET of that URL says which model
it serves and the sizes of the batches it scored. Ray Serve is a serving dependency (requirements-dev.txt), not
the app's: only this module imports it.

Unlike the Batcher, a long text is not read a piece at a time between short ones: it is padded into the batch
it arrives with (lmviz.serving.batcher says why a single server does more)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import threading

# Ray takes the loopback address as the node's, as it does on a laptop, so that its own servers listen on loopback,
# not on this machine's network address. Read when ray is first imported: set before.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Ray starts its workers (Serve's controller, its HTTP proxy, the scorer's replicas) at nice 15 unless told: on a
# machine whose cores are busy (a class server's Streamlit replicas, CI's other tests) they waited for a core so long
# that Serve's proxy failed its readiness checks and serve.start gave up (80 s to start and 200 s to deploy the tiny
# GPT beside two busy processes, against 2 s and 7 s quiet). The scorer is what the class waits on: nice 0, as the
# process that starts it. Read by Ray's raylet, which inherits this process's environment: set before ray.init.
os.environ.setdefault("RAY_worker_niceness", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request as HttpRequest  # noqa: E402
from starlette.responses import Response  # noqa: E402

from lmviz.errors import NotEnoughMemory, NothingToScore  # noqa: E402
from lmviz.lessons.causal_lm import ClmAnalysis, Request, make_request  # noqa: E402
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm  # noqa: E402
from lmviz.serving.batcher import MAX_BATCH, WINDOW_SECONDS  # noqa: E402
from lmviz.serving.remote import error_json  # noqa: E402
from lmviz.serving.scoring import analyse_batch  # noqa: E402

HOST = "127.0.0.1"  # loopback only: a scorer for other machines is deployed behind their own network's rules
MAX_TOP_K = 100  # the pages ask for 5; a bound, so that no request makes the scorer sort a whole vocabulary
OBJECT_STORE_BYTES = 100 * 2**20  # the records travel over HTTP, not through Ray's object store: Ray's minimum


def answer(status: int, data: dict) -> Response:
    """JSON, with the infinities a loss can be (a label of probability 0) written as Python's json reads them."""
    return Response(json.dumps(data), status_code=status, media_type="application/json")


def score_together(loaded, requests: list[Request]) -> list[ClmAnalysis | NotEnoughMemory]:
    """analyse_batch's records; a batch that runs out of memory is scored a text at a time, so that one text's
    size sinks no other's, and a text that runs out alone gets its sentence."""
    try:
        return analyse_batch(loaded, requests)
    except NotEnoughMemory as problem:
        if len(requests) == 1:
            return [problem]
    return [score_together(loaded, [request])[0] for request in requests]


@serve.deployment(max_ongoing_requests=4 * MAX_BATCH)  # enough waiting in the replica to fill the next batch
class CausalLmScorer:
    def __init__(self, name: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32",
                 window: float = WINDOW_SECONDS):
        self.loaded = load_causal_lm(name, device=device, dtype=dtype)
        self.score.set_batch_wait_timeout_s(window)  # how long a batch's first request waits for company
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=10_000)  # bounded: it runs for a course

    async def __call__(self, http: HttpRequest) -> Response:
        loaded = self.loaded
        if http.method == "GET":
            return answer(200, {"model": loaded.name, "dtype": loaded.dtype, "device": loaded.device,
                                "source": loaded.source, "batch_sizes": list(self.batch_sizes)})
        try:
            body = await http.json()
            asked, top_k = (body["model"], body["dtype"]), int(body["top_k"])
            text, add_bos = body["text"], body["add_bos"]
            if not (isinstance(text, str) and isinstance(add_bos, bool) and 1 <= top_k <= MAX_TOP_K):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return answer(400, {"error": "A request is JSON with text, add_bos, top_k (1 to "
                                         f"{MAX_TOP_K}), model and dtype."})
        if asked != (loaded.name, loaded.dtype):  # another model's scores would be shown as this one's
            return answer(409, {"error": f"This scorer serves {loaded.name} in {loaded.dtype}, "
                                         f"not {asked[0]} in {asked[1]}."})
        try:
            request = make_request(loaded, text, add_bos, top_k)
        except NothingToScore as problem:
            return answer(422, error_json(problem))
        result = await self.score(request)
        if isinstance(result, NotEnoughMemory):
            return answer(507, error_json(result))
        return answer(200, result.to_dict())

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=WINDOW_SECONDS)
    async def score(self, requests: list[Request]) -> list[ClmAnalysis | NotEnoughMemory]:
        self.batch_sizes.append(len(requests))
        # in a thread: the event loop goes on taking requests, which make up the next batch meanwhile
        return await asyncio.to_thread(score_together, self.loaded, requests)


# The application KubeRay's RayService imports (deploy/kubernetes/rayservice.yaml, import_path
# lmviz.serving.ray_scorer:app): the bundled model on the CPU in float32, what the replicas ask for by default.
app = CausalLmScorer.bind()


def start_ray(port: int, cpus: int) -> None:
    """A single-node Ray cluster of ``cpus`` CPUs and Serve's HTTP proxy, both on loopback, without the dashboard."""
    ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
             configure_logging=False, log_to_driver=False)
    serve.start(http_options={"host": HOST, "port": port})


def deploy(name: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32", cpus: int = 1,
           window: float = WINDOW_SECONDS) -> None:
    """The scorer at the proxy's root (``/``), on ``cpus`` of the cluster's CPUs (Ray gives torch as many threads),
    once its model is loaded; a batch's first request waits ``window`` seconds for others (the Batcher's window)."""
    scorer = CausalLmScorer.options(ray_actor_options={"num_cpus": cpus}).bind(name, device, dtype, window)
    serve.run(scorer, route_prefix="/")


def stop_ray() -> None:
    serve.shutdown()
    ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lmviz.serving.ray_scorer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help=f"where Serve's HTTP proxy listens on {HOST}")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a name lmviz.models.loading.load_causal_lm takes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="the replicas' LMVIZ_LOW_MEMORY must give the same")
    parser.add_argument("--cpus", type=int, default=2, help="the CPUs Ray may use, all of them for the scorer")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default: when told to)")
    options = parser.parse_args(argv)
    stop = threading.Event()
    try:
        start_ray(options.port, options.cpus)
        for signum in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which puts its own handler on SIGTERM
            signal.signal(signum, lambda *_: stop.set())
        deploy(options.model, options.device, options.dtype, options.cpus)
        print(f"lmviz scorer: {options.model} at http://{HOST}:{options.port}/", flush=True)
        stop.wait(options.seconds)
    finally:
        stop_ray()


if __name__ == "__main__":
    main()
