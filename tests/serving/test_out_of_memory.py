"""Running out of memory on a long input, caused for real.

Each test runs in a child process whose address space is capped (RLIMIT_AS) a
little above what it uses once warm, so that a short text still fits and a
long one cannot: the allocator fails exactly as on a full machine. The model
is a tiny GPT-2 with a 200 000-entry vocabulary, whose logits for ~1 000
tokens take ~800 MB; its weights take 13 MB.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmviz.models.loading import SHIPPED, TINY_GPT

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 200_000
SHORT = "the fox went to the forest ."
LONG = " ".join([SHORT] * 150)  # ~1 000 tokens

# Run first in every child: caps its address space `headroom` MB above its size now.
CAP = """
import resource
def cap_memory(headroom_mb):
    size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom_mb * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory) -> str:
    """A model folder: the shipped tiny GPT's tokenizer, a 200 000-token output layer."""
    folder = tmp_path_factory.mktemp("wide")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (SHIPPED[TINY_GPT] / name).exists():
            shutil.copy(SHIPPED[TINY_GPT] / name, folder / name)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=1024, n_embd=16, n_layer=1,
                               n_head=2)).save_pretrained(folder)
    return str(folder)


def run_child(code: str) -> subprocess.CompletedProcess:
    # no warm start: a bundled model loading in the background would move the memory the cap is measured from
    env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "LMVIZ_WARM_START": "0"}
    return subprocess.run([sys.executable, "-c", CAP + code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def child_json(code: str) -> dict:
    done = run_child(code)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_text_too_long_for_memory_gives_one_sentence_and_the_next_text_still_works(wide_model):
    out = child_json(f"""
import json
from lmviz.errors import NotEnoughMemory
from lmviz.serving.scoring import score_text as analyse_clm  # the CLI's and a session's own model's path
from lmviz.models.loading import load_causal_lm
loaded = load_causal_lm({wide_model!r}, device="cpu")
before = analyse_clm(loaded, {SHORT!r}).loss
cap_memory(250)
try:
    analyse_clm(loaded, {LONG!r})
    message = None
except NotEnoughMemory as problem:
    message = str(problem)
print(json.dumps({{"message": message, "before": before, "after": analyse_clm(loaded, {SHORT!r}).loss}}))
""")
    assert out["message"] is not None, "the long text fitted: the cap is too loose for this test to mean anything"
    assert out["message"].startswith("The cpu ran out of memory: the model's scores for this text's")
    assert f"{VOCAB:,} vocabulary entries" in out["message"] and "\n" not in out["message"]
    assert out["after"] == out["before"]  # and a short text still fits under the same cap afterwards


@pytest.mark.parametrize("piece_tokens, batches", [
    (None, [1, 1]),  # lmviz's Batcher: the long text is scored apart from the short one, and runs out alone
    (2048, [2]),  # no text read in pieces: they were served together, ran out, and were retried one by one
])
def test_a_class_batch_with_one_long_text_still_scores_the_short_one(wide_model, piece_tokens, batches):
    pieces = "" if piece_tokens is None else f", piece_tokens={piece_tokens}"
    out = child_json(f"""
import json, threading
from lmviz.errors import NotEnoughMemory
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.loading import load_causal_lm
from lmviz.serving.batcher import Batcher
loaded = load_causal_lm({wide_model!r}, device="cpu")
alone = analyse_clm(loaded, {SHORT!r})
batcher = Batcher(loaded, window=2.0{pieces})  # long enough for both requests to share a batch
cap_memory(250)
outcome = {{}}
def ask(name, text):
    try:
        outcome[name] = [row.nll for row in batcher.analyse(text).rows]
    except NotEnoughMemory as problem:
        outcome[name] = str(problem)
threads = [threading.Thread(target=ask, args=a) for a in (("long", {LONG!r}), ("short", {SHORT!r}))]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({{"outcome": outcome, "alone": [row.nll for row in alone.rows],
                  "batches": list(batcher.batch_sizes)}}))
""")
    assert sorted(out["batches"]) == batches
    assert isinstance(out["outcome"]["long"], str) and "ran out of memory" in out["outcome"]["long"]
    assert out["outcome"]["short"] == pytest.approx(out["alone"], abs=1e-5)


def test_the_cli_says_one_sentence_when_memory_runs_out(wide_model):
    done = run_child(f"""
import sys
import lmviz.__main__, transformers.models.gpt2.modeling_gpt2  # imported before the cap, as a warm process has
cap_memory(350)
sys.exit(lmviz.__main__.main(["clm", {LONG!r}, "--model", {wide_model!r}]))
""")
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("lmviz:")]  # not transformers' progress bars
    assert len(said) == 1 and said[0].startswith("lmviz: The cpu ran out of memory")
    assert said[0].endswith("Try a shorter text.") and "Traceback" not in done.stderr


def test_the_page_says_one_sentence_when_memory_runs_out(wide_model):
    out = child_json(f"""
import json
import os
from streamlit.testing.v1 import AppTest
os.environ["LMVIZ_ALLOW_LOCAL_PATHS"] = "1"  # the wide model is a folder: a page loads one where the host allows
at = AppTest.from_file("app.py", default_timeout=120)
at.query_params.update({{"model": {wide_model!r}, "text": {SHORT!r}}})
at.run()  # the first run registers the pages (st.navigation)
at.switch_page("app_pages/your_sentence.py").run()
first = [m.value for m in at.metric]
cap_memory(300)
at.text_area(key="text").set_value({LONG!r}).run()
print(json.dumps({{"first": first, "warnings": [w.value for w in at.warning], "errors": [e.value for e in at.error],
                  "exceptions": [str(e.value) for e in at.exception], "metrics": [m.value for m in at.metric]}}))
""")
    assert out["first"], "the short text was not scored before the cap"
    assert out["exceptions"] == [] and out["errors"] == [] and out["metrics"] == []
    assert len(out["warnings"]) == 1 and "ran out of memory" in out["warnings"][0]
    assert out["warnings"][0].endswith("Try a shorter text\\.")  # escaped for Markdown
