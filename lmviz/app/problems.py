"""What a visitor is told when something fails: lmviz's own sentence, without what it would reveal of
the server, and always shown as text."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import streamlit as st

from lmviz.core.text import escape_markdown
from lmviz.errors import ModelLoadError

log = logging.getLogger(__name__)


# Where the whole error of a failed load goes instead of the page: the server's log.
DETAIL = "details in the server's log"


_EXCEPTION_CLASS = r"\b[A-Z]\w*(?:Error|Exception|Warning)\b"


# An absolute path, or one in a home folder: not a hub id's "owner/name" (after a letter), nor a URL's path
# (after ":", "/" or a host name's letter); the … is a path already shortened.
_PATH = re.compile(r"(?<![\w.:/~…-])~?/(?:[^\s'\"`,;()<>]*[^\s'\"`,;()<>.])?|\b[A-Za-z]:\\[^\s'\"`,;()<>]*")


def problem_for_visitor(name: str, error: BaseException) -> str:
    """What a visitor is told of a model that could not be loaded: lmviz's sentence without what it would
    reveal of the server (absolute paths, the home folder and with it the user name, exception classes, the
    library's own detail), on every server alike; the whole error goes to the server's log. A folder keeps
    its last part ("…/my-model"): enough for the teacher who typed it to recognise it."""
    if isinstance(error, ModelLoadError) and error.__cause__ is None:  # lmviz's own refusal: its sentence is all
        log.info("Did not load the model %r: %s", name, error)
    else:
        log.warning("Could not load the model %r", name, exc_info=error)
    said = str(error) if isinstance(error, ModelLoadError) else f"Could not load {name!r} ({DETAIL})."
    said = _without_causes(said, error)
    said = re.sub(rf"\(\s*{_EXCEPTION_CLASS}[^()]*\)", f"({DETAIL})", said)  # detail not found in the causes
    said = re.sub(rf"{_EXCEPTION_CLASS}:?\s*", "", said)
    home = str(Path.home())
    said = said.replace(home, "~") if len(home) > 1 else said
    said = " ".join(_PATH.sub(_last_part, said).split())  # one line: a library's message can have several
    return said if said.endswith((".", "!", "?")) else f"{said}."


def _without_causes(said: str, error: BaseException) -> str:
    """``said`` with the text of the exceptions that caused ``error`` replaced by DETAIL (lmviz's own
    ModelLoadError sentences are kept: a message quotes them on purpose)."""
    cause = error.__cause__ or error.__context__
    while cause is not None:
        if not isinstance(cause, ModelLoadError):
            whole = str(cause).strip()
            first = whole.splitlines()[0] if whole else ""
            for detail in (f"{type(cause).__name__}: {whole}", f"{type(cause).__name__}: {first}", whole, first):
                if len(detail) > 3:  # "" or "0" would match anywhere
                    said = said.replace(detail, "\0")
        cause = cause.__cause__ or cause.__context__
    return re.sub(r"\(\s*\0\s*\)|\0", f"({DETAIL})", said)


def _last_part(path: re.Match) -> str:
    parts = re.split(r"[/\\]", path.group().rstrip("/\\"))
    return f"…/{parts[-1]}" if len(parts) > 1 and parts[-1] not in ("", "~") else "…"


def show_problem(problem: BaseException | str, where=None, *, kind: str = "warning", icon: str | None = None) -> None:
    """One sentence for the learner (a lmviz.errors.LearnerError, or a sentence made from one) in ``where`` (the
    page, or a container such as the pinned result panel), as a warning, an error, an info or a caption. Always
    escaped: the sentence may quote what the learner typed, which must be shown as typed, never as Markdown."""
    show = getattr(where if where is not None else st, kind)
    text = escape_markdown(str(problem))
    show(text) if kind == "caption" else show(text, icon=icon)
