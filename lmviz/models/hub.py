"""Before the app downloads a model from the Hugging Face hub: the size of its weights, read from the hub's
metadata and refused above the deployment's cap (lmviz.models.settings.max_model_gb), and one download at a time
per process. Without these, a model box on a public server lets any visitor fill its disk.

lmviz.models.pretrained calls these around its one hub download; ``python -m lmviz prepare`` does not (a host runs it on
purpose, for the models it chose).
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from typing import Callable

from lmviz.core.numbers import fmt
from lmviz.errors import ModelLoadError
from lmviz.models.settings import MAX_MODEL_GB_VARIABLE, max_model_gb

# The weight files from_pretrained fetches, in the order transformers tries them: one file, or the shards its
# index lists (named by this convention). Other formats in a repo (TF, Flax, ONNX, GGUF) are never fetched.
WEIGHT_CHOICES = (("model.safetensors", r"model-\d+-of-\d+\.safetensors"),
                  ("pytorch_model.bin", r"pytorch_model-\d+-of-\d+\.bin"))
INDEX_SUFFIX = ".index.json"
METADATA_SECONDS = 10.0  # the hub has already answered hub_reachable(): this only bounds a stall


def weight_files(sizes: dict[str, int | None]) -> dict[str, int | None]:
    """{file: size in bytes} of the weights from_pretrained would fetch, from a repo's {file: size}; {} when
    it has none that transformers reads. A sharded checkpoint's index file comes with its shards."""
    for single, shard in WEIGHT_CHOICES:
        if single in sizes:
            return {single: sizes[single]}
        if single + INDEX_SUFFIX in sizes:
            shards = {name: size for name, size in sizes.items() if re.fullmatch(shard, name)}
            if shards:
                return {single + INDEX_SUFFIX: sizes[single + INDEX_SUFFIX], **shards}
    return {}


def repo_file_sizes(repo_id: str, token: str | None) -> dict[str, int | None]:
    """{file: size in bytes} of every file in the repo's main revision, from the hub's metadata (no download)."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo_id, revision="main", files_metadata=True, token=token or None,
                              timeout=METADATA_SECONDS)
    return {s.rfilename: s.size if s.size is not None else getattr(s.lfs, "size", None) for s in info.siblings or []}


def _metadata_failure(repo_id: str, error: Exception) -> str:
    from huggingface_hub.errors import RepositoryNotFoundError

    if isinstance(error, RepositoryNotFoundError):  # also a gated repo without a token
        return f"{repo_id!r} is not on the Hugging Face hub, or it is private or gated and needs an access token."
    detail = str(error).splitlines()[0][:160] if str(error) else "no detail"
    return (f"lmviz could not read the size of {repo_id!r} from the Hugging Face hub ({type(error).__name__}: "
            f"{detail}), and it downloads no model whose size it does not know.")


def checked_weights(repo_id: str, token: str | None) -> dict[str, int]:
    """{file: size} of the weights the download would fetch, after checking their total against the cap;
    raises ModelLoadError (one sentence naming the size and the cap) above it, or when the size is unknown:
    a server refuses what it cannot measure, rather than find out on a full disk."""
    cap = max_model_gb()
    try:
        weights = weight_files(repo_file_sizes(repo_id, token))
    except Exception as error:  # HTTP errors, a stall, a malformed answer: each means "size unknown"
        raise ModelLoadError(_metadata_failure(repo_id, error)) from error
    if not weights:
        raise ModelLoadError(f"{repo_id!r} has no weights that transformers reads (model.safetensors or "
                             "pytorch_model.bin, whole or in shards) on the Hugging Face hub.")
    if any(size is None or size < 0 for size in weights.values()):
        raise ModelLoadError(f"The Hugging Face hub does not say how big the weights of {repo_id!r} are, and lmviz "
                             "downloads no model whose size it does not know.")
    total_gb = sum(weights.values()) / 1e9
    if total_gb > cap:
        raise ModelLoadError(f"{repo_id!r} is {fmt(total_gb, 2)} GB of weights, over this server's download cap of "
                             f"{fmt(cap, 2)} GB ({MAX_MODEL_GB_VARIABLE}), so it is not downloaded.")
    return weights


# --- one download at a time ------------------------------------------------------------------------------------

# Two visitors asking for two new models at once would otherwise download both in parallel, each as big as the
# cap: one at a time keeps the disk and the network within what one model needs.
_download_lock = threading.Lock()
_downloading: str | None = None  # the model being downloaded now, read without the lock by waiting pages
WAIT_REPORT_SECONDS = 1.0


def download_under_way() -> str | None:
    """The hub id this process is downloading now, if any."""
    return _downloading


def waiting_sentence(name: str, seconds: float | None = None) -> str:
    """What a page says while ``name`` waits for the download under way; "" when none is."""
    other = download_under_way()
    if other is None:
        return ""
    waited = "" if seconds is None else f" ({fmt(seconds, 0)} s so far)"
    if other == name:
        return f"{name} is downloading for another page of this server; this one waits for it{waited}…"
    return (f"Another model, {other}, is downloading on this server, which downloads one model at a time: "
            f"{name} waits for it{waited}…")


@contextmanager
def one_download(name: str, progress: Callable[[float, str], None] | None = None):
    """Holds this process's one download slot for ``name``. While another model holds it, the wait is
    reported to ``progress`` (fraction 0.0, a sentence) when it starts and every WAIT_REPORT_SECONDS."""
    global _downloading
    start = time.monotonic()
    acquired = _download_lock.acquire(blocking=False)
    while not acquired:
        if progress is not None:
            waiting = waiting_sentence(name, time.monotonic() - start)
            progress(0.0, waiting or f"{name} waits for another download to finish…")  # (the other just ended)
        acquired = _download_lock.acquire(timeout=WAIT_REPORT_SECONDS)
    _downloading = name
    try:
        yield
    finally:
        _downloading = None
        _download_lock.release()


def download_weights(repo_id: str, weights: dict[str, int], token: str | None) -> None:
    """Fetch the weight files into the hub cache. Done before from_pretrained, which would fetch them while
    holding lmviz.models.pretrained.model_build_lock, so that every other model build in the process waited for it."""
    from huggingface_hub import hf_hub_download

    for filename in weights:
        hf_hub_download(repo_id, filename, revision="main", token=token or None)
