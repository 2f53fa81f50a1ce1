"""A class's training steps on screen: the one StepGate the server's sessions share (lmviz.serving.steps), and the
status a page shows while its step waits or runs, with its place in line, never a bare spinner."""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Callable, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from lmviz.serving.steps import Place, StepGate, step_memory, steps_at_once_setting

T = TypeVar("T")
REFRESH_S = 0.5  # how often a waiting student's place is written again


@st.cache_resource(show_spinner=False)
def step_gate() -> StepGate:
    """The server's one gate: every lesson's steps, whichever session takes them."""
    return StepGate(steps_at_once_setting())


def gated(kind: str, loaded, compute: Callable[[], T]) -> T:
    """``compute()``, a step of ``kind`` on ``loaded``'s model, once the gate admits it."""
    with step_gate().step(kind, step_memory(loaded.model), loaded.device):
        return compute()


def place_sentence(doing: str, place: Place | None, progress: tuple[float, str] | None = None) -> str:
    """What the status says: how far the computation has come (``progress``: the fraction and words it last
    reported), or how many steps are ahead of it and about how long they take (from the gate's measured step
    times), or ``doing`` alone."""
    if progress is not None and (place is None or place.running):
        fraction, words = progress
        return f"{doing} {words} ({math.floor(100 * fraction)} %)"
    if place is None:
        return doing
    if place.running:
        return f"{doing} ({math.floor(place.running_s)} s so far)"
    ahead = f"{place.ahead} {'step is' if place.ahead == 1 else 'steps are'} ahead of yours"
    if place.wait_s is None:
        return f"{ahead}: yours starts when {'it is' if place.ahead == 1 else 'they are'} done. Then: {doing}"
    return f"{ahead}, about {max(1, math.ceil(place.wait_s))} s. Then: {doing}"


@contextlib.contextmanager
def step_status(doing: str, kind: str | None = None):
    """Around a page's call that may take a while: a status saying ``doing``, written again every REFRESH_S by a
    thread of this session (the page's own thread is in the computation, or in the cached function's wait for
    the same result another session computes), with the computation's progress as it reports it through the
    callback this yields, and, for a step of ``kind`` while it waits for its turn in the gate, its place and the
    estimated wait. Nothing is written for a result that comes within REFRESH_S (a cached one), as st.spinner
    waits too."""
    ctx = get_script_run_ctx()
    owner = ctx.session_id if ctx else f"thread-{threading.get_ident()}"
    gate, box, done, reported = step_gate(), st.empty(), threading.Event(), {}

    def report(fraction: float, words: str) -> None:
        reported["now"] = (fraction, words)

    def watch():
        shown = None
        while not done.wait(REFRESH_S):
            sentence = place_sentence(doing, gate.place(owner, kind) if kind else None, reported.get("now"))
            if sentence != shown and not done.is_set():
                box.info(sentence, icon=":material/hourglass_top:")
                shown = sentence

    watcher = threading.Thread(target=watch, daemon=True, name="lmviz-step-status")
    if ctx:
        add_script_run_ctx(watcher, ctx)
        watcher.start()
    try:
        with gate.owned_by(owner):
            yield report
    finally:
        done.set()
        if ctx:
            watcher.join(timeout=2 * REFRESH_S)
        box.empty()
