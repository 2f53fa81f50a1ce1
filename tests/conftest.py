"""Shared fixtures: tiny Hugging Face models built from configs, and the bundled model, offline."""

import contextlib
import os
import sys
import tempfile

# Tests never reach the Hugging Face hub: what they need is built here or shipped in a package.
os.environ["HF_HUB_OFFLINE"] = "1"
# ...and never see this machine's hub cache: the BERT pages would pick bert-base-uncased where it is
# cached, and compare it with tests written for lmviz's tiny BERT. An empty cache pins the tiny one.
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="lmviz-tests-empty-hub-cache-")
# ...and never warm the bundled model in a background thread: a short run (one test file) can end while
# that thread is inside torch, and the process then aborts at exit ("terminate called without an active
# exception", exit code 134) after every test passed. tests/app/test_presentation_and_warm_start.py turns it on
# where it is tested.
os.environ["LMVIZ_WARM_START"] = "0"
# ...and never share one visitor's minute of text (lmviz.serving.fair_share.FairShare) between tests: Streamlit's
# AppTest gives every page test the same session id. tests/app/test_public_server.py sets a limit where it is tested.
os.environ["LMVIZ_CHARS_PER_MINUTE"] = "inf"
# ...and never write the live class's rooms into this machine's cache folder: a page test that opens the Live class
# or join page gets a store of its own (tests/app/test_live_pages.py sets one per test).
os.environ.setdefault("LMVIZ_LIVE_DB", f"sqlite:///{tempfile.mkdtemp(prefix='lmviz-tests-live-')}/live.sqlite3")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cores_per_worker() -> int:
    """This process's share of the cores, in a pytest-xdist worker: the cores over the number of workers, at least
    one. Each worker, and the servers and CLIs it starts, would otherwise run one torch thread per core: on two
    cores, two workers at two threads each ran GRPO's group and step in 56 s each, against 16 s at one thread each
    (docs/development/testing.md), since an idle OpenMP thread spins on a core another process needs."""
    return max(1, cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto` (pytest.ini): a worker per core, and one more for each browser group (BROWSER_GROUPS below), whose
    tests mostly wait for their server and their browser: 23 minutes into a run at two workers on two cores, the
    browser group's worker had used 1.3 CPU minutes and the other worker 17 (docs/development/testing.md gives the
    runs' wall times). PYTEST_XDIST_AUTO_NUM_WORKERS, where set, is xdist's to read."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return cores() + len(BROWSER_GROUPS)


# Only in a worker (the controller of `-n auto` runs no test, and `-n 0` keeps torch's own default), and only where the
# person running the tests has not set it; set before torch is imported, it also reaches every process a test starts.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(cores_per_worker()))

import pytest  # noqa: E402
import torch  # noqa: E402

if "OMP_NUM_THREADS" in os.environ:  # in case a plugin imported torch before this file
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel  # noqa: E402

from tests.helpers import TINY_VOCAB  # noqa: E402


@pytest.fixture(scope="session")
def tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=TINY_VOCAB, n_positions=64, n_embd=16, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def tiny_bert():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )
    return BertForPreTraining(config).eval()


WORDS = ["<|endoftext|>", "[UNK]"] + "the cat sat on a mat dog ran to park and saw big small red blue bird".split()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A word-level tokenizer over a few words, built in memory (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")


@pytest.fixture(scope="session")
def tiny_loaded(tiny_gpt2, tiny_tokenizer):
    """The tiny GPT-2 wrapped the way lmviz.models.loading returns a real model."""
    from lmviz.models.loading import LoadedModel

    return LoadedModel(tiny_gpt2, tiny_tokenizer, "tiny-gpt2", "built from a config in the tests", "cpu", "float32",
                       0.0)


@pytest.fixture(scope="session")
def tiny_bert_loaded():
    """A BERT with masked-LM and next-sentence heads, random weights, over a tokenizer of lmviz's story words."""
    from lmviz.core.corpus import generate_corpus
    from lmviz.lessons.training import build_model, train_tokenizer
    from lmviz.models.loading import LoadedModel

    corpus = generate_corpus(num_train=200, num_validation=10, seed=2)
    tokenizer = train_tokenizer([s.text for s in corpus.train])
    torch.manual_seed(0)
    model = build_model("mlm+nsp", "tiny", tokenizer).eval()
    return LoadedModel(model, tokenizer, "random tiny BERT", "built in the tests", "cpu", "float32", 0.0)


@pytest.fixture(scope="session")
def bundled():
    """The bundled SmolLM2-135M-Instruct, loaded offline once for the whole run."""
    from lmviz.models.loading import load_causal_lm

    return load_causal_lm()


@pytest.fixture(scope="session")
def default_grpo_group(bundled):
    """RL fine-tuning's default group on the bundled model (its prompt, 8 answers of up to 12 tokens, seed 0,
    temperature 1), drawn once per worker for the tests that read it (about 25 s on busy cores, drawn by seven tests
    before). A test reads it; one that needs another group draws its own."""
    from lmviz.lessons.grpo import DEFAULT_PROMPT, sample_group

    return sample_group(bundled, DEFAULT_PROMPT, 8, 0, 1.0, 12)


# Tests that run one after another on one worker, each group on its own. The browser tests, in two groups of about
# the same length (13 and 14 minutes of their workers' time in a full run), each with the Streamlit server and the
# browser of its worker (tests/e2e/conftest.py): one group, the browser tests' 26 minutes, was the run's longest
# path. Within a group they run one at a time: two at once against one server, on two cores, each waited for the
# other's runs. Ray is one cluster per machine.
BROWSER_GROUPS = {
    "browser: the projector and the classroom": tuple(f"tests/e2e/test_{name}" for name in (
        "projector_", "classroom.py", "hidden_numbers.py", "room_and_keyboard.py", "lessons_browser.py",
        "byte_pieces_browser.py")),
    "browser: the others": ("tests/e2e/",),
}
ONE_WORKER = {**BROWSER_GROUPS, "ray": ("tests/serving/test_ray_scorer.py",)}


def one_worker_group(nodeid: str) -> str | None:
    """The ONE_WORKER group of a test, the first whose prefixes it starts with."""
    return next((group for group, prefixes in ONE_WORKER.items() if nodeid.startswith(prefixes)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Each ONE_WORKER group is one unit of work, sent whole to one worker; every other test is a unit of its own.

    Not xdist's --dist loadgroup: it marks a group by appending "@group" to the test's Node._nodeid, which pytest 9
    no longer reads (its node ids are Node._id), so the browser tests were shared out between both workers, two
    servers and two browsers at once on two cores (seen in a -v run). xdist sends the largest unit first
    (--loadscope-reorder, its default): the browser groups start at once, and their workers take more only when
    they are nearly done."""
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return one_worker_group(nodeid) or nodeid

    return OneWorkerGroups(config, log)


def pytest_sessionfinish(session, exitstatus):
    """Let the app's warm start finish before the interpreter does: a process that ends while that thread is
    inside torch is aborted by the C++ runtime ("terminate called without an active exception"), whatever the
    tests said."""
    import threading

    for thread in threading.enumerate():
        if thread.name == "lmviz-warm-start":
            thread.join(timeout=300)


# What work each test did, kept in its JUnit record as the property "work", so that scripts/test_times can sum the
# seconds of each kind (docs/development/testing.md). Three are seen as they happen: a process started (a server, a
# CLI, a benchmark, PostgreSQL, Ray) is Python's audit event, a backward pass is torch's engine call (Tensor.backward
# and torch.autograd.grad both go through it), a page run headless is AppTest's run; a browser and the bundled model
# are the fixtures the test asked for. One set for the process: what a thread the test left behind does counts for
# the test running then. A test that did several is counted once, under the first of WORK that it did, an order
# that puts the dearer kind first as a rule.
WORK = ("browser", "process", "page and backward", "page", "backward", "SmolLM2", "other")
_work_seen: set[str] = set()


def _watch(owner, name: str, seen: str) -> None:
    original = getattr(owner, name)

    def watched(*args, **kwargs):
        _work_seen.add(seen)
        return original(*args, **kwargs)

    setattr(owner, name, watched)


def _audit(event: str, _args) -> None:
    if event == "subprocess.Popen":
        _work_seen.add("process")


def share_one_script_cache() -> None:
    """Every AppTest run reads the app's and the pages' compiled code from one cache, as a server's runs do: AppTest
    (Streamlit 1.67) makes a new ScriptCache for each run, so each run parsed, rewrote (Streamlit's "magic") and
    compiled app.py and its page again, about half the Python calls of an RL fine-tuning page run. The cache keys
    on the script's path: a test's own script (AppTest.from_string) is a file named by its text's hash, and no test
    edits a page while the run lasts."""
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import app_test, local_script_runner

    # Where Streamlit 1.67 makes each run's cache: a later Streamlit that makes it elsewhere must fail here, not run
    # every test with a cache of its own unnoticed
    assert hasattr(app_test, "ScriptCache") and hasattr(local_script_runner, "ScriptCache")
    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared


def pytest_configure(config):
    from streamlit.testing.v1 import AppTest

    share_one_script_cache()
    sys.addaudithook(_audit)
    _watch(torch.autograd, "_engine_run_backward", "backward")
    _watch(AppTest, "_run", "page")


def work_of(fixtures, seen: set[str]) -> str:
    if "browser" in fixtures:
        return "browser"
    if "process" in seen:
        return "process"
    if "page" in seen:
        return "page and backward" if "backward" in seen else "page"
    if "backward" in seen:
        return "backward"
    return "SmolLM2" if "bundled" in fixtures else "other"


# The browser groups are the run's longest path, and each of their steps waits on a server, a browser and the test
# in turn: every other test yields the cores to them. A worker lowers its priority (raises its nice value, which
# any user may do, and which the processes it starts inherit) before its first test outside the ONE_WORKER groups;
# Ray's group keeps its priority with the browsers' (its cluster's workers run at the niceness of the process that
# starts it, lmviz.serving.ray_scorer).
# A group sent to a worker that has already yielded (a rerun of one failed group test, whose unit ties with the
# single tests; a crashed worker's tests sent on) takes its priority back where the user may (root, as in CI).
YIELDING_NICE = 5  # above the priority the worker started with
STARTING_NICE = os.nice(0)


def yield_to_the_browser_groups(item) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    if one_worker_group(item.nodeid) is None:
        if os.nice(0) < STARTING_NICE + YIELDING_NICE:
            os.nice(STARTING_NICE + YIELDING_NICE - os.nice(0))
    elif os.nice(0) > STARTING_NICE:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, STARTING_NICE)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _work_seen.clear()
    yield_to_the_browser_groups(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown":  # JUnit takes a test's properties from its teardown's report
        item.user_properties.append(("work", work_of(item.fixturenames, _work_seen)))
