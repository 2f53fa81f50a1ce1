"""The shared scorer (lmviz.serving.ray_scorer) on a single-node Ray cluster started on loopback, and a replica's
client of it (lmviz.serving.remote.RemoteBatcher): records over HTTP equal to in-process scoring, concurrent
requests batched together with each answer going to its own caller, one sentence when the scorer is down or slow
(and the text scored by the replica's own model, as the sentence says), and the Your sentence page the same
through the scorer as without it."""

import asyncio
import json
import os
import threading
import time
import urllib.request

import pytest

from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.errors import ScorerUnavailable
from lmviz.lessons.causal_lm import ClmAnalysis, TokenRow, make_request
from lmviz.models.loading import TINY_GPT, load_causal_lm
from lmviz.serving import ray_scorer
from lmviz.serving.batcher import Batcher
from lmviz.serving.remote import INSTEAD, RemoteBatcher
from lmviz.serving.scoring import analyse_batch, score_text
from scripts.live_server import free_port
from tests.helpers import one_sentence, open_page

serve = ray_scorer.serve
# The scorer's batches wait this long for company (the Batcher's window is 10 ms): long enough that requests sent
# together from a few threads on 2 busy cores reach one batch, short enough to keep the module quick.
WINDOW = 0.5
SLEEPS = 5.0  # the slow deployment's answer time, past the client's timeout below
TIMEOUT = 1.0
# -log p and the losses: the scorer pads a text into a batch with others and runs torch on 1 thread, where the
# in-process reference is a batch of 1 on 2: float32 sums in another order, about 1e-7 of each logit (the tiny
# GPT's are under 30): a few 1e-6 at most. Everything else (ids, tokens, ranks, top-k tokens) is exact.
TOLERANCE = 1e-5
TEXTS = ["once upon a time there was a cat", "the dog ran to the park and saw a big red bird", "a cat", "kate and nina"]


@serve.deployment
class Sleeper:
    """A scorer that answers too late: what a replica sees when the shared scorer is far behind."""

    async def __call__(self, request) -> dict:
        await asyncio.sleep(SLEEPS)
        return {}


@pytest.fixture(scope="module")
def url():
    """The tiny GPT served by the shared scorer at the root of a loopback port, and the sleeper at /slow."""
    port = free_port()
    began = time.monotonic()
    try:
        ray_scorer.start_ray(port, cpus=2)
        ray_scorer.deploy(TINY_GPT, cpus=1, window=WINDOW)
        serve.run(Sleeper.bind(), name="slow", route_prefix="/slow")
        assert time.monotonic() - began < 120, "the cluster took over 2 minutes to start"
        yield f"http://127.0.0.1:{port}/"
    finally:
        ray_scorer.stop_ray()


@pytest.fixture(scope="module")
def local():
    """The replica's own copy of the same model."""
    return load_causal_lm(TINY_GPT, device="cpu", dtype="float32")


def batch_sizes(url: str) -> list[int]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)["batch_sizes"]


def remote(url: str, local, told=None, timeout: float = 30.0) -> RemoteBatcher:
    def must_not_fall_back(problem):
        raise AssertionError(f"fell back: {problem}")

    return RemoteBatcher(url, Batcher(local), told=told or must_not_fall_back, timeout=timeout)


def assert_same_records(got: ClmAnalysis, expected: ClmAnalysis) -> None:
    assert isinstance(got, ClmAnalysis) and all(isinstance(row, TokenRow) for row in got.rows)
    assert (got.text, got.tokens, got.input_ids, got.bos_added, got.truncated_from) == (
        expected.text, expected.tokens, expected.input_ids, expected.bos_added, expected.truncated_from)
    assert [(r.position, r.input_id, r.target_id, r.rank) for r in got.rows] == [
        (r.position, r.input_id, r.target_id, r.rank) for r in expected.rows]
    assert [[token for token, _ in r.top_k] for r in got.rows] == [
        [token for token, _ in r.top_k] for r in expected.rows]
    assert [r.nll for r in got.rows] == pytest.approx([r.nll for r in expected.rows], abs=TOLERANCE)
    assert [p for r in got.rows for _, p in r.top_k] == pytest.approx(
        [p for r in expected.rows for _, p in r.top_k], abs=TOLERANCE)
    assert [got.loss, got.loss_model, got.loss_cross_entropy] == pytest.approx(
        [expected.loss, expected.loss_model, expected.loss_cross_entropy], abs=TOLERANCE)


@pytest.mark.parametrize("add_bos", [False, True])
def test_records_over_http_equal_in_process_scoring(url, local, add_bos):
    client = remote(url, local)
    for text in TEXTS:
        got = client.analyse(text, add_bos, top_k=3)
        assert_same_records(got, score_text(local, text, add_bos, top_k=3))
        assert all(isinstance(guess, tuple) for row in got.rows for guess in row.top_k)  # as the dataclass gives them
        assert got.model == TINY_GPT and got.device == "cpu"
    client.close()


def test_concurrent_requests_from_several_threads_are_batched_and_each_gets_its_own_text(url, local):
    client = remote(url, local)
    texts = [f"{text} {word}" for text in TEXTS for word in ("cat", "dog")]  # 8 different texts
    before = len(batch_sizes(url))
    results, start = {}, threading.Barrier(len(texts))

    def send(text):
        start.wait(timeout=30)
        results[text] = client.analyse(text)

    threads = [threading.Thread(target=send, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    seen = batch_sizes(url)[before:]
    assert sum(seen) == len(texts) and max(seen) > 1, seen  # every text, and more than one in a forward pass
    together = analyse_batch(local, [make_request(local, text) for text in texts])  # the same padded batch, here
    for text, expected in zip(texts, together):
        assert results[text].text == text  # its own text's records, never another caller's
        assert_same_records(results[text], expected)
    client.close()


def test_a_url_where_nothing_listens_gives_one_sentence_and_the_replicas_own_scores(local):
    told = []
    client = remote(f"http://127.0.0.1:{free_port()}/", local, told=told.append)
    got = client.analyse(TEXTS[0])
    assert [str(problem) for problem in told] == [
        f"The shared scorer could not be reached (connection refused); {INSTEAD}"]
    assert isinstance(told[0], ScorerUnavailable) and one_sentence(str(told[0]))
    assert_same_records(got, score_text(local, TEXTS[0]))  # what the sentence says: scored here instead
    client.close()


def test_a_scorer_slower_than_the_timeout_gives_one_sentence_and_the_replicas_own_scores(url, local):
    told = []
    client = remote(f"{url}slow", local, told=told.append, timeout=TIMEOUT)
    began = time.monotonic()
    got = client.analyse(TEXTS[1])
    assert time.monotonic() - began < SLEEPS  # it did not wait for the answer
    assert [str(problem) for problem in told] == [f"The shared scorer did not answer within {TIMEOUT:g} s; {INSTEAD}"]
    assert one_sentence(str(told[0]))
    assert_same_records(got, score_text(local, TEXTS[1]))
    client.close()


def test_rays_workers_run_at_the_niceness_of_the_process_that_started_the_cluster(url):
    """Ray's default is nice 15: beside busy processes, Serve's proxy then failed to start (CI, stop 57)."""
    @ray_scorer.ray.remote(num_cpus=0)  # the scorer and the sleeper hold both of the cluster's CPUs
    def niceness() -> int:
        return os.nice(0)

    assert ray_scorer.ray.get(niceness.remote(), timeout=60) == os.nice(0)


def test_a_scorer_of_another_model_is_refused_in_one_sentence(url, local):
    other = load_causal_lm(TINY_GPT, device="cpu", dtype="bfloat16")  # the same name, another model's numbers
    told = []
    client = remote(url, other, told=told.append)
    got = client.analyse(TEXTS[0])
    assert [str(problem) for problem in told] == [
        "The shared scorer refused this text with HTTP 409 (This scorer serves lmviz-tiny-gpt in float32, not "
        f"lmviz-tiny-gpt in bfloat16); {INSTEAD}"]
    assert one_sentence(str(told[0]))
    assert got.loss == score_text(other, TEXTS[0]).loss
    client.close()


def page_loss(at) -> str:
    return next(m.value for m in at.metric if m.label == "Loss: mean(-log p)")


def tiny_gpt_page():
    at = open_page("app_pages/your_sentence.py")
    at.text_input(key="model_name").set_value(TINY_GPT).run()
    assert not at.exception, at.exception
    return at


def forget_scores() -> None:
    """Streamlit's caches outlive a page run: the batchers (built with the setting of their time) and the pages'
    cached records go, so that the next run builds and scores anew."""
    import streamlit as st

    from lmviz.app.caches import get_batcher

    get_batcher.clear()
    st.cache_data.clear()


@pytest.fixture
def fresh_batchers():
    forget_scores()
    yield
    forget_scores()


def test_your_sentence_shows_the_same_loss_through_the_shared_scorer(url, local, monkeypatch, fresh_batchers):
    alone = tiny_gpt_page()
    monkeypatch.setenv("LMVIZ_SCORER_URL", url)
    forget_scores()
    before = len(batch_sizes(url))
    shared = tiny_gpt_page()
    assert len(batch_sizes(url)) > before  # the page's texts went to the scorer
    assert not shared.warning
    text = shared.text_area(key="text").value
    assert page_loss(shared) == page_loss(alone) == fmt(score_text(local, text).loss)


def test_your_sentence_says_in_one_sentence_when_the_shared_scorer_is_down(local, monkeypatch, fresh_batchers):
    monkeypatch.setenv("LMVIZ_SCORER_URL", f"http://127.0.0.1:{free_port()}/")
    at = tiny_gpt_page()
    said = {warning.value for warning in at.warning}
    assert said == {escape_markdown(f"The shared scorer could not be reached (connection refused); {INSTEAD}")}, said
    assert page_loss(at) == fmt(score_text(local, at.text_area(key="text").value).loss)
