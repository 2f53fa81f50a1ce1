"""A page's inputs kept in its link, so that the link opens the same result for whoever opens it: a bookmark, a
link sent to the class, and a browser that reconnects to another replica after the one it used was lost, which
starts a fresh session from the URL.

An input is read from the link on its session's first run (while its key is not yet in the session state),
checked as its widget checks it: a value the widget would not take is ignored and the page starts from its
default, never a traceback. After the widget is drawn its value is written back, as a string: a text as typed, a
number as short as reads back exactly, a flag as 1 or 0, a choice by its value. Writing the link does not rerun the
page. The session state is seeded, not the widget given a value=: Streamlit warns when a widget has both."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

import streamlit as st

from lmviz.core.text import valid_text

T = TypeVar("T")

# The names the links of Next token had before every input was kept: links already sent out keep working.
LINK_NAMES = {"next_text": "text", "next_bos": "bos", "next_temperature": "t"}


@dataclass(frozen=True)
class Kept(Generic[T]):
    """One input kept in the link: its session-state key (a widget's, or the page's own), its default, how its
    link value is read (ValueError for one the widget would not take) and how its value is written."""

    key: str
    default: T
    read: Callable[[str], T]
    write: Callable[[T], str]
    max_chars: int | None = None  # a text's: a longer one in the link is cut, with one sentence saying so

    @property
    def param(self) -> str:
        """Its name in the link: the key, or the older name in LINK_NAMES."""
        return LINK_NAMES.get(self.key, self.key)


def number_text(value: float) -> str:
    """A number as a link writes it: :g where that reads back exactly (0.001, 3e-05, 12), else every digit."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def text(key: str, default: str, max_chars: int) -> Kept[str]:
    return Kept(key, default, lambda raw: valid_text(raw)[:max_chars], str, max_chars)


def number(key: str, default: float, low: float, high: float, step: float | None = None) -> Kept:
    """A number from ``low`` to ``high``, whole when the default is (as number_input and slider take them); with a
    slider's ``step``, put on its nearest step."""
    whole = isinstance(default, int)

    def read(raw: str):
        value = int(raw) if whole else float(raw)
        if not math.isfinite(value) or not low <= value <= high:
            raise ValueError(f"{raw!r} is not from {low} to {high}")
        if step is not None:
            value = low + round((value - low) / step) * step
            value = int(value) if whole else round(value, 10)  # 0.30000000000000004 is the slider's 0.3
        return value

    return Kept(key, default, read, number_text)


def flag(key: str, default: bool = False) -> Kept[bool]:
    def read(raw: str) -> bool:
        if raw not in ("0", "1"):
            raise ValueError(f"{raw!r} is neither 1 nor 0")
        return raw == "1"

    return Kept(key, default, read, lambda on: "1" if on else "0")


def choice(key: str, default: T, options: Sequence[T]) -> Kept[T]:
    """One of ``options``, written by its value (a number as number_text writes it)."""
    def written(option) -> str:
        return number_text(option) if isinstance(option, (int, float)) else str(option)

    def read(raw: str):
        for option in options:
            if written(option) == raw:
                return option
        raise ValueError(f"{raw!r} is not one of the choices")

    return Kept(key, default, read, written)


def positions(key: str, most: int) -> Kept[list[int]]:
    """Token positions, written 1,3,5 (the page drops the ones its text does not have)."""
    def read(raw: str) -> list[int]:
        chosen = [int(part) for part in raw.split(",") if part]
        if any(not 0 <= p < most for p in chosen):
            raise ValueError(f"{raw!r} has a position outside 0 to {most - 1}")
        return list(dict.fromkeys(chosen))

    return Kept(key, [], read, lambda chosen: ",".join(map(str, chosen)))


SEEDED = "url-state-seeded"  # session state: {page: {key: Kept}}, every input each page has kept in its link
PAGE = "url-state-page"  # session state: the page whose script runs now
RESET_KEY = "reset-page"


def on_page(name: str) -> None:
    """Called before a page's script runs: the inputs it seeds from now on are that page's, which its reset button
    puts back."""
    st.session_state[PAGE] = name


@contextlib.contextmanager
def kept_on_reset():
    """Inputs seeded inside are not put back by the page's reset button: the model, whose reload takes seconds and
    which the learner chose for every page."""
    page = st.session_state.get(PAGE)
    st.session_state[PAGE] = None
    try:
        yield
    finally:
        st.session_state[PAGE] = page


def reset_button(also: Callable[[], None] | None = None) -> None:
    """"Reset this page": every input the page keeps in its link back to its default, in the session and in the
    link, and ``also`` (a page's own state that is not an input, such as an editor's cells) called. Placed before
    the page's controls; it resets the inputs seeded further down too, since it acts on the next run, after this
    one has recorded them all. The check-yourself answers, progress, presentation mode and the model are kept."""
    st.button("Reset this page", key=RESET_KEY, type="tertiary", icon=":material/restart_alt:", on_click=_reset,
              args=(st.session_state.get(PAGE), also),
              help="Puts every control of this page back to where the lesson starts: its texts, choices and "
                   "numbers. Your answers to the questions are kept.")


def _reset(page: str | None, also: Callable[[], None] | None) -> None:
    for kept in st.session_state.get(SEEDED, {}).get(page, {}).values():
        st.session_state.pop(kept.key, None)  # seeded again from its default: the link no longer has it
        if kept.param in st.query_params:
            del st.query_params[kept.param]
    if also:
        also()


def seed(kept: Kept) -> None:
    """On the session's first run, the link's value (or the default) into the session state."""
    st.session_state.setdefault(SEEDED, {}).setdefault(st.session_state.get(PAGE), {})[kept.key] = kept
    if kept.key in st.session_state:
        return
    raw = st.query_params.get(kept.param)
    value = kept.default
    if raw is not None:
        try:
            value = kept.read(raw)
        except ValueError:
            pass  # a value the widget would not take: the page starts from its default, and the link is rewritten
        if kept.max_chars is not None and len(raw) > kept.max_chars:
            st.info(f"The text in the link was cut to its first {kept.max_chars} characters.")
    st.session_state[kept.key] = value


def write(kept: Kept[T], value: T) -> None:
    written = kept.write(value)
    if st.query_params.get(kept.param) != written:  # only what changed is sent to the browser
        st.query_params[kept.param] = written


def linked(kept: Kept[T], widget: Callable[..., T], *args, **kwargs) -> T:
    """``widget(*args, key=kept.key, **kwargs)``, seeded from the link, its value written back to it."""
    seed(kept)
    value = widget(*args, key=kept.key, **kwargs)
    write(kept, value)
    return value
