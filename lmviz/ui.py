"""Small Streamlit helpers shared by the pages (the only lmviz module that imports Streamlit)."""

from __future__ import annotations

import inspect
import re

import streamlit as st

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
    from lmviz.models import bert_candidates

    return bert_candidates()


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_bert_once(name: str, device: str):
    from lmviz.models import load_bert

    return load_bert(name, device=device)


def choose_bert():
    """A BERT model picker shared by the BERT pages: bert-base-uncased where it can
    be had, else lmviz's own tiny BERT; one copy per process. Returns a LoadedModel."""
    from lmviz.models import TINY_BERT, ModelLoadError, allowed_models

    choices = _bert_choices()
    with st.expander("Model", expanded=False):
        name = st.selectbox("BERT model", choices, key="bert_choice",
                            help="bert-base-uncased is offered when it is cached here or the hub can be reached.")
        custom = "" if allowed_models() else st.text_input(
            "…or a hub id / local folder of a BertForPreTraining model", key="bert_custom").strip()
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
