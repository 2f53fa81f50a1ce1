"""What a deployment decides with environment variables: which models it offers
(LMVIZ_ALLOWED_MODELS) and whether it saves memory (LMVIZ_LOW_MEMORY). With none set,
lmviz is a classroom or laptop app: any model, full float32 precision."""

from __future__ import annotations

import os

from lmviz.loading import ModelLoadError


def allowed_models() -> list[str] | None:
    """The models a public deployment allows, from $LMVIZ_ALLOWED_MODELS (comma-separated);
    None when it is not set (a classroom or a laptop: any model)."""
    value = os.environ.get("LMVIZ_ALLOWED_MODELS", "").strip()
    return [m.strip() for m in value.split(",") if m.strip()] if value else None


def default_dtype() -> str:
    """float32, or bfloat16 (half the memory) when $LMVIZ_LOW_MEMORY is set, e.g. on a small hosting tier."""
    return "bfloat16" if os.environ.get("LMVIZ_LOW_MEMORY", "").lower() in ("1", "true", "yes", "on") else "float32"


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
