"""Streamlit helpers shared by the pages (the only lmviz module that imports Streamlit):
escaping, "Show the code", and the model loaders every page shares (one copy per process)."""

from __future__ import annotations

import inspect
import re

import streamlit as st

from lmviz.models import (DEFAULT_MODEL, TINY_BERT, ModelLoadError, allowed_models, bert_candidates, load_bert,
                          load_causal_lm, prepare_bundled)
from lmviz.serving import Batcher

# Characters that Markdown, Streamlit's :colour[...] / :emoji: syntax or LaTeX ($...$) would interpret.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|$<>~:&])")


def escape_markdown(text: str) -> str:
    """Text that st.markdown shows literally, whatever the user typed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def show_code(*functions, label: str = "Show the code") -> None:
    """An expander with the real source of the lmviz functions that made the numbers."""
    with st.expander(label):
        for function in functions:
            st.caption(f"{function.__module__}.{function.__qualname__}")
            st.code(inspect.getsource(function), language="python")


@st.cache_data(ttl=600, show_spinner=False)
def _bert_choices() -> list[str]:
    return bert_candidates()


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_bert_once(name: str, device: str):
    return load_bert(name, device=device)


def choose_bert():
    """A BERT model picker shared by the BERT pages: bert-base-uncased where it can
    be had, else lmviz's own tiny BERT; one copy per process. Returns a LoadedModel."""
    trained = st.session_state.get("trained_bert")  # this session's model from the Train page
    choices = _bert_choices() + ([trained.name] if trained is not None else [])
    with st.expander("Model", expanded=False):
        name = st.selectbox("BERT model", choices, key="bert_choice",
                            help="bert-base-uncased is offered when it is cached here or the hub can be reached.")
        custom = "" if allowed_models() else st.text_input(
            "…or a hub id / local folder of a BertForPreTraining model", key="bert_custom").strip()
    if trained is not None and name == trained.name and not custom:
        st.caption(escape_markdown(f"Model: {trained.name}, {trained.source}."))
        return trained
    name = custom or name
    try:
        with st.spinner(f"Loading {escape_markdown(name)}…"):
            loaded = _load_bert_once(name, "auto")
    except ModelLoadError as problem:
        st.error(escape_markdown(str(problem)))
        if name == TINY_BERT:
            st.stop()
        st.info(f"Using lmviz's own tiny BERT, {TINY_BERT}, instead.")
        loaded = _load_bert_once(TINY_BERT, "auto")
    st.caption(escape_markdown(f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}."))
    return loaded


@st.cache_resource(show_spinner=False, max_entries=3)
def get_model(name: str, device: str, dtype: str, token: str | None):
    """One copy of a causal LM per process, shared by every session and page (never modified)."""
    return load_causal_lm(name, device=device, dtype=dtype, token=token)


# on_release: a batcher dropped from the cache ends its thread, which would otherwise keep the model alive
@st.cache_resource(show_spinner=False, max_entries=3, on_release=lambda batcher: batcher.close())
def get_batcher(name: str, device: str, dtype: str, token: str | None):
    """Gathers the requests of all sessions that arrive together into one forward pass."""
    return Batcher(get_model(name, device, dtype, token))


def load_with_progress(name: str, device: str, dtype: str, token: str | None):
    """The model's batcher, or None after one sentence saying why the model could not be loaded."""
    shown = escape_markdown(name)
    try:
        if name == DEFAULT_MODEL:
            bar = st.progress(0.0, text=f"Preparing {shown}…")
            prepare_bundled(lambda fraction, message: bar.progress(fraction, text=message))
            bar.empty()
        with st.spinner(f"Loading {shown}…"):
            return get_batcher(name, device, dtype, token)
    except ModelLoadError as problem:
        st.error(escape_markdown(str(problem)))
    except Exception as error:  # anything else a model folder or download can throw: one sentence, not a traceback
        st.error(escape_markdown(f"Could not load {name!r}: {type(error).__name__}: {error}"))
    return None


