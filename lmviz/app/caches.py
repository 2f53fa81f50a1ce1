"""The models and the limits every session shares: one copy of each model per process (Streamlit's
resource cache), its Batcher (or, with LMVIZ_SCORER_URL set, the shared scorer's client), and the process's
FairShare (applied by lmviz.serving.scorer.CausalScorer)."""

from __future__ import annotations

import streamlit as st

from lmviz.app.problems import show_problem
from lmviz.models.loading import (
    bert_candidates,
    load_bert,
    load_causal_lm,
)
from lmviz.models.settings import chars_per_minute, scorer_url
from lmviz.serving.batcher import Batcher
from lmviz.serving.fair_share import PROCESS_CHARS_IN_FLIGHT, FairShare
from lmviz.serving.remote import RemoteBatcher


@st.cache_data(ttl=600, show_spinner=False)
def usual_berts() -> list[str]:
    return bert_candidates()  # may wait for a check that the hub answers: kept for ten minutes


@st.cache_resource(show_spinner=False, max_entries=3)
def load_bert_once(name: str, device: str):
    return load_bert(name, device=device)


@st.cache_resource(show_spinner=False, max_entries=3)
def get_model(name: str, device: str, dtype: str, token: str | None):
    """One copy of a causal LM per process, shared by every session and page (never modified)."""
    return load_causal_lm(name, device=device, dtype=dtype, token=token)


# on_release: a batcher dropped from the cache ends its thread, which would otherwise keep the model alive
@st.cache_resource(show_spinner=False, max_entries=3, on_release=lambda batcher: batcher.close())
def get_batcher(name: str, device: str, dtype: str, token: str | None):
    """Gathers the requests of all sessions that arrive together into one forward pass: this process's, or, with
    LMVIZ_SCORER_URL set, the shared scorer's, which gathers every replica's (lmviz.serving.remote.RemoteBatcher: the
    model is still loaded here, for the other forward passes and for when the scorer does not answer)."""
    local = Batcher(get_model(name, device, dtype, token))
    url = scorer_url()
    return local if url is None else RemoteBatcher(url, local, told=show_problem)


@st.cache_resource(show_spinner=False)
def process_fair_share() -> FairShare:
    """One per process: every session's texts count against the same limits."""
    return FairShare(chars_per_minute(), PROCESS_CHARS_IN_FLIGHT)


def session_id() -> str:
    """This visitor's session, as Streamlit names it ("" outside a script run): whose fair share a text counts
    against."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    context = get_script_run_ctx()
    return context.session_id if context else ""
