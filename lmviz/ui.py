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
