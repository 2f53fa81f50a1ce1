"""Tokens drawn as HTML chips that wrap at any width: a token over its number, and the masked-LM
branches, each marked by a border and a text mark as well as its colour. Text in, HTML out (the text escaped)."""

from __future__ import annotations

import html

from lmviz.core.labels import Branch
from lmviz.figures.palettes import BLACK, MLM_BRANCH_COLOURS, fill_css

# Tokens drawn as chips that wrap at any width (sizes in rem: presentation mode enlarges them too).
CHIP_ROW = "display:flex;flex-wrap:wrap;align-items:center;margin:0.4rem 0"


CHIP = "display:inline-block;padding:0.1rem 0.45rem;border-radius:0.3rem;white-space:pre-wrap;overflow-wrap:anywhere"


# Each masked-LM branch has a border and a text mark as well as its colour, so that none depends on
# seeing the colour: (border, what the chip says), {token} the original, {shown} what the model reads.
BRANCH_MARKS = {
    Branch.NOT_SELECTED: ("2px solid transparent", "{shown}"),
    Branch.MASKED: (f"2px dashed {BLACK}", "{shown}"),
    Branch.RANDOM: (f"4px double {BLACK}", "{token}→{shown}"),
    Branch.KEPT: (f"2px solid {BLACK}", "✓ {shown}"),
}


BRANCH_MEANINGS = {Branch.NOT_SELECTED: "read as it is, no loss", Branch.MASKED: "replaced by the mask token",
                   Branch.RANDOM: "replaced by a random one", Branch.KEPT: "selected, left as it is"}


STACKED_CHIP = ("display:inline-flex;flex-direction:column;align-items:center;padding:0.15rem 0.45rem;"
                "border-radius:0.3rem;line-height:1.3;")


def stacked_chip(top: str, bottom: str, background: str, hover: str = "", border: str = "none") -> str:
    """A token chip, ``top`` over ``bottom`` (both already HTML-escaped): a token and its number."""
    title = f' title="{html.escape(hover)}"' if hover else ""
    return (f'<span style="{STACKED_CHIP}border:{border};{fill_css(background)}"{title}>'
            f'<span class="lmviz-token" style="white-space:pre-wrap;overflow-wrap:anywhere">{top}</span>'
            f'<span class="lmviz-nll" style="font-size:0.8em;font-variant-numeric:tabular-nums">{bottom}</span></span>')


def chip_row(chips: list[str], css_class: str = "lmviz-sentence", gap: str = "0.3rem") -> str:
    return f'<div class="{css_class}" style="{CHIP_ROW};gap:{gap}">{"".join(chips)}</div>'


def branch_chip(branch: Branch, token: str, shown: str) -> str:
    """What a masked LM reads at one position, marked by its branch (HTML, the text escaped)."""
    border, mark = BRANCH_MARKS[branch]
    text = html.escape(mark.format(token=token, shown=shown))
    return f'<span style="{CHIP};border:{border};{fill_css(MLM_BRANCH_COLOURS[branch])}">{text}</span>'
