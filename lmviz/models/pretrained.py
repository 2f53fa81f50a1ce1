"""How lmviz calls transformers' from_pretrained: safe with many threads, offline first,
and every failure turned into one sentence a learner can act on (ModelLoadError).

lmviz.models.loading decides which model a name means; lmviz.models.bundled prepares the bundled one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

import torch
import transformers

from lmviz.errors import ModelLoadError

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

Progress = Callable[[float, str], None]


HUB_ANSWER_SECONDS = 3.0


def hub_reachable(timeout: float = HUB_ANSWER_SECONDS) -> bool:
    """Whether the Hugging Face hub answers an HTTP request within ``timeout`` seconds (any answer,
    even an error status). Asked before every download: the hub client retries for ~50 s when there
    is no network, and waits without any time limit on a server that accepts the connection and never
    answers; this check answers a classroom without internet, or behind a stalled proxy, in seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    from huggingface_hub.utils import get_session  # the hub client's own session: its proxies and certificates

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        get_session().head(f"{endpoint}/api/models", timeout=timeout)
        return True
    except Exception:  # no network, refused, timed out, a proxy that fails: each is "cannot be reached"
        return False


# What each kind of model is, for loading and for messages.
KINDS = {"causal": ("AutoModelForCausalLM", "causal language model"),
         "bert": ("AutoModelForPreTraining", "BERT model with its masked-LM and next-sentence heads")}


def from_pretrained(name: str, kind: str = "causal", tokenizer_class: str = "AutoTokenizer", **kwargs):
    """(model, tokenizer) of a KINDS kind, in float32, never running code that comes with the model."""
    auto_class = getattr(transformers, KINDS[kind][0])
    tokenizer = getattr(transformers, tokenizer_class).from_pretrained(name, trust_remote_code=False, **kwargs)
    if len(tokenizer) <= 1:  # transformers builds an empty tokenizer, silently, when its files are missing
        raise OSError("its tokenizer files are missing")
    with model_build_lock:
        model = auto_class.from_pretrained(name, trust_remote_code=False, dtype=torch.float32, **kwargs)
    return model, tokenizer


def _from_hub_cache(name: str, kind: str):
    """(model, tokenizer, source) from this machine's hub cache, or None when it is not downloaded yet."""
    try:
        model, tokenizer = from_pretrained(name, kind, local_files_only=True)
    except (OSError, ValueError):
        return None
    return model, tokenizer, f"Hugging Face hub id {name} (from this machine's hub cache)"


def load_named(name: str, token: str | None, kind: str = "causal", progress: Progress | None = None):
    """(model, tokenizer, source) for a local folder or a hub id. A hub id not cached here is downloaded only
    when its weights are within the download cap, one download at a time (``progress`` hears of the wait)."""
    what = KINDS[kind][1]
    if Path(name).expanduser().is_dir():
        try:
            model, tokenizer = from_pretrained(str(Path(name).expanduser()), kind, local_files_only=True)
        except Exception as error:  # a missing or damaged file fails in many ways (OSError, SafetensorError, ...)
            detail = str(error).splitlines()[0] if str(error) else ""
            raise ModelLoadError(f"The folder {name!r} is not a {what} transformers can read "
                                 f"({type(error).__name__}: {detail})") from error
        return model, tokenizer, f"local folder {name}"
    cached = _from_hub_cache(name, kind)  # already downloaded: not checked again, loads offline
    if cached is not None:
        return cached
    if not hub_reachable():
        raise ModelLoadError(
            f"{name!r} is not on this machine and the Hugging Face hub cannot be reached (no answer within "
            f"{HUB_ANSWER_SECONDS:g} s), so it cannot be downloaded."
        )
    return _download(name, kind, token, progress)


def _download(name: str, kind: str, token: str | None, progress: Progress | None):
    """(model, tokenizer, source) from the hub, when its weights are within the cap; one download at a time."""
    from lmviz.models import hub  # here, not at the top: lmviz.hub imports this module's ModelLoadError

    weights = hub.checked_weights(name, token)  # before waiting: a model over the cap is refused at once
    with hub.one_download(name, progress):
        cached = _from_hub_cache(name, kind)  # the download this one waited for may have been the same model
        if cached is not None:
            return cached
        try:
            hub.download_weights(name, weights, token)
            model, tokenizer = from_pretrained(name, kind, token=token or None)
        except (OSError, ValueError) as error:
            detail = (str(error).splitlines() or [type(error).__name__])[0]
            raise ModelLoadError(f"Could not load {name!r} from the Hugging Face hub: it is not a {KINDS[kind][1]}, "
                                 f"or it is gated and needs an access token ({detail}).") from error
    return model, tokenizer, f"Hugging Face hub id {name}"


def hub_cached(repo_id: str) -> bool:
    """Whether the hub id is in this machine's hub cache (so it loads offline)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
