"""What a deployment decides with environment variables: which models it offers
(LMVIZ_ALLOWED_MODELS), whether it saves memory (LMVIZ_LOW_MEMORY) and how big a model it downloads
from the hub (LMVIZ_MAX_MODEL_GB) and how much text one visitor sends to a model a minute
(LMVIZ_CHARS_PER_MINUTE), and whether a shared scorer serves the causal-LM scoring of every replica
(LMVIZ_SCORER_URL). With none set, lmviz is a classroom or laptop app: any model, full
float32 precision, but never a download over DEFAULT_MAX_MODEL_GB (safe by default on a public server too)."""

from __future__ import annotations

import ipaddress
import os

from lmviz.errors import ModelLoadError


def allowed_models() -> list[str] | None:
    """The models a public deployment allows, from $LMVIZ_ALLOWED_MODELS (comma-separated);
    None when it is not set (a classroom or a laptop: any model)."""
    value = os.environ.get("LMVIZ_ALLOWED_MODELS", "").strip()
    return [m.strip() for m in value.split(",") if m.strip()] if value else None


def default_dtype() -> str:
    """float32, or bfloat16 (half the memory) when $LMVIZ_LOW_MEMORY is set, e.g. on a small hosting tier."""
    return "bfloat16" if os.environ.get("LMVIZ_LOW_MEMORY", "").lower() in ("1", "true", "yes", "on") else "float32"


MAX_MODEL_GB_VARIABLE = "LMVIZ_MAX_MODEL_GB"
# 1 GB of weights on disk (10**9 bytes): README "Hosting" measured a 1.5 GB peak with LMVIZ_LOW_MEMORY=1 and a
# host's limit can be 2.7 GB; a model converted to bfloat16 reads its float32 file whole, so a 1 GB file adds
# about 1.5 GB at its peak. It admits gpt2 (0.55 GB), bert-base-uncased (0.44 GB) and SmolLM2-360M (0.72 GB).
DEFAULT_MAX_MODEL_GB = 1.0


def max_model_gb() -> float:
    """The most GB of weights the app downloads for one model, from $LMVIZ_MAX_MODEL_GB (default
    DEFAULT_MAX_MODEL_GB; "inf": no cap). Raises ModelLoadError when it is not a number of GB: a broken
    setting refuses every download rather than allow any size."""
    value = os.environ.get(MAX_MODEL_GB_VARIABLE, "").strip()
    try:
        cap = float(value) if value else DEFAULT_MAX_MODEL_GB
    except ValueError:
        cap = float("nan")
    if not cap >= 0:  # also NaN, which no size would ever be above
        raise ModelLoadError(f"{MAX_MODEL_GB_VARIABLE} must be a number of GB, such as 1 or 2.5 (it is {value!r}), "
                             "so this server downloads no model until it is.")
    return cap


CHARS_PER_MINUTE_VARIABLE = "LMVIZ_CHARS_PER_MINUTE"
# Five texts a minute of the longest a page takes (2 000 characters), for each session: far above what a
# student types; how much one visitor sending long texts as fast as they can still slows the others is
# measured by benchmarks/noisy_neighbour.py (README "Reliability").
DEFAULT_CHARS_PER_MINUTE = 10_000


def chars_per_minute() -> float:
    """The most characters one session sends to a model in any minute, from $LMVIZ_CHARS_PER_MINUTE
    (default DEFAULT_CHARS_PER_MINUTE; "inf": no limit). A value that is not a number keeps the default:
    a broken setting must not lift the limit."""
    value = os.environ.get(CHARS_PER_MINUTE_VARIABLE, "").strip()
    try:
        limit = float(value) if value else DEFAULT_CHARS_PER_MINUTE
    except ValueError:
        limit = float("nan")
    return limit if limit > 0 else DEFAULT_CHARS_PER_MINUTE


def check_allowed(name: str) -> str:
    """The model name, stripped; raises ModelLoadError when it is empty or this deployment does not offer it.
    Checked where every page, link and the CLI end up, so that no URL can get around it."""
    name = (name or "").strip()
    if not name:
        raise ModelLoadError("No model name given.")
    allowed = allowed_models()
    if allowed is not None and name not in allowed:
        raise ModelLoadError(f"This deployment only offers these models: {', '.join(allowed)}.")
    return name


SCORER_URL_VARIABLE = "LMVIZ_SCORER_URL"


def scorer_url() -> str | None:
    """Where the shared scorer (lmviz.serving.ray_scorer) answers, from $LMVIZ_SCORER_URL, e.g.
    http://127.0.0.1:8000/; None when it is not set: this process scores every text with its own copy of the model."""
    return os.environ.get(SCORER_URL_VARIABLE, "").strip() or None


LOCAL_PATHS_VARIABLE = "LMVIZ_ALLOW_LOCAL_PATHS"


def local_paths_allowed(bind_address: str | None, proxied: bool = False) -> bool:
    """Whether a visitor of the web app may name a folder of the server as a model. $LMVIZ_ALLOW_LOCAL_PATHS
    decides when set (1: yes, 0: no); otherwise only a server that listens on loopback alone (127.0.0.0/8, ::1,
    localhost), reached directly: there the visitor is someone on this machine, e.g. a teacher on a laptop.
    bind_address: where the server listens (Streamlit's server.address; None or "" means every interface).
    proxied: the request came through a proxy (it sent X-Forwarded-For or the like): a proxy in front of a
    loopback server brings the whole network to it."""
    setting = os.environ.get(LOCAL_PATHS_VARIABLE, "").strip().lower()
    if setting:
        return setting in ("1", "true", "yes", "on")
    return not proxied and _is_loopback(bind_address)


def _is_loopback(address: str | None) -> bool:
    host = (address or "").strip().strip("[]").lower()  # "[::1]" is how a URL writes ::1
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # unset (every interface), a unix socket (a proxy's usual way in), another host name
        return False
