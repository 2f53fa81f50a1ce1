"""What every page run draws before any model, for the room: presentation mode, the pinned panel's
style and links to the glossary. It must not import torch: app.py runs it on every page, the home page
included, which would otherwise wait seconds for torch and transformers to import before it is drawn."""

from __future__ import annotations

import streamlit as st

from lmviz.course.glossary import link, link_first_uses

PRESENT_KEY = "present"


BODY_PX, CHART_PX = 24, 18  # presentation mode; otherwise Streamlit's 16 px and lmviz's 14 px charts


NORMAL_CHART_PX = 14


# Streamlit sizes its text in rem: a larger root font scales widgets, tables and headings together;
# body text (0.875 rem) is then set to BODY_PX itself, and the title kept to two lines at 1280 px.
PRESENTATION_CSS = f"""<style>
html {{ font-size: 20px; }}
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li,
[data-testid="stCaptionContainer"], [data-testid="stWidgetLabel"] p,
[data-testid="stText"] {{ font-size: {BODY_PX}px; }}
[data-testid="stMain"] h1 {{ font-size: 2rem; }}
[data-testid="stMetricLabel"] p {{ font-size: 18px !important; }}
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p {{ font-size: 1.6rem !important; }}
</style>"""


RESULT_PANEL = "result-panel"  # the container key; Streamlit gives it the CSS class st-key-result-panel


# The headline result of every page is pinned under Streamlit's header (3.75 rem): whatever the
# teacher scrolls to, the number that a control changes stays on the projector's screen.
# Streamlit wraps the container in a stLayoutWrapper of the same height, so that wrapper is what sticks;
# the header above it is made opaque, so that the page scrolling under both never shows through.
PAGE_CSS = f"""<style>
[data-testid="stLayoutWrapper"]:has(> .st-key-{RESULT_PANEL}) {{ position: sticky; top: 3.75rem; z-index: 990; }}
.st-key-{RESULT_PANEL} {{ background: var(--background-color, #fff); border-bottom: 2px solid rgba(49, 51, 63, 0.2);
  padding-bottom: 0.25rem; }}
[data-testid="stHeader"] {{ background: var(--background-color, #fff); }}
</style>"""


def page_style() -> None:
    st.html(PAGE_CSS)


def presentation_switch() -> bool:
    """A switch in the sidebar, on every page; ?present=1 in a link turns it on. The
    widget lives in app.py, so its state stays with the session from page to page."""
    if PRESENT_KEY not in st.session_state:
        st.session_state[PRESENT_KEY] = st.query_params.get(PRESENT_KEY) == "1"
    on = st.sidebar.toggle("Presentation mode", key=PRESENT_KEY,
                           help="Larger text and charts for a projector; stays on from page to page.")
    if on:
        st.html(PRESENTATION_CSS)
    return on


def presenting() -> bool:
    return bool(st.session_state.get(PRESENT_KEY))


def glossary_query() -> str:
    return f"?{PRESENT_KEY}=1" if presenting() else ""  # the glossary opens in presentation mode when the page is


def term(word: str, name: str) -> str:
    """``word`` linked to the glossary entry ``name``."""
    return link(word, name, glossary_query())


def terms_linked(text: str) -> str:
    """Plain ``text`` with the first use of each glossary term linked to it."""
    return link_first_uses(text, glossary_query())


def chart_font_px() -> int:
    return CHART_PX if presenting() else NORMAL_CHART_PX
