"""The sentence a page says under tokens of text in other scripts or emoji: what a token shown as "<E6 88>" is.
One call per page, with the tokens it shows; nothing is said when none of them is a byte piece."""

from __future__ import annotations

import streamlit as st

from lmviz.app.chrome import term
from lmviz.core.text import byte_piece, cut_character, escape_markdown, utf8_length


def explain_byte_pieces(tokens) -> None:
    """A caption under ``tokens`` (as lmviz.core.text.readable_token shows them) saying what the first byte piece
    among them is, with the glossary's entry one click away."""
    sentence = byte_piece_sentence(list(tokens))
    if sentence:
        st.caption(sentence)


def byte_piece_sentence(tokens: list[str]) -> str | None:
    """Markdown: the first byte piece among ``tokens``, what it holds of which character, and how many of the
    others are byte pieces too; None when none is."""
    pieces = [token for token in tokens if byte_piece(token) is not None]
    if not pieces:
        return None
    first = byte_piece(pieces[0])
    said = [f"“{escape_markdown(pieces[0])}” is a {term('byte piece', 'byte piece')}: a token that holds some of a "
            "character's UTF-8 bytes but not all, so it is shown as its bytes in hex"]
    cut = cut_character(first)
    if cut is not None:
        lead, length, held = cut
        rest = (f"the other {length - held} must come in the token or tokens after it" if length - held > 1
                else "the last one must come in the token after it")
        said.append(f"{lead:02X} begins a character of {length} bytes, of which this token holds {held}: {rest}")
    elif utf8_length(first[0]) is None:
        said.append(f"Its first byte, {first[0]:02X}, continues a character, which a token before it must have begun")
    others = len(pieces) - 1
    if others:
        said.append(f"{others} other token{'s' if others > 1 else ''} here {'are' if others > 1 else 'is'} "
                    f"{'byte pieces' if others > 1 else 'a byte piece'} too")
    return ". ".join(said) + "."
