"""Every colour lmviz draws with, in one place (pure Python: no Streamlit, no Plotly).

A class has colour-blind students, and a projector washes colours out, so:
colours that mean different things stay apart under protanopia, deuteranopia
and tritanopia, and the loss scale goes from light to dark for everyone
(tests/figures/test_palettes.py simulates each and measures). Colour is never the only
sign: the pages also write the value, a mark or a border.
"""

from __future__ import annotations

import math

# Okabe & Ito, "Color Universal Design" (2008): a categorical set made for dichromats.
BLUE = "#0072B2"
VERMILION = "#D55E00"
ORANGE = "#E69F00"
BLUISH_GREEN = "#009E73"
REDDISH_PURPLE = "#CC79A7"
BLACK = "#000000"
WHITE = "#FFFFFF"
GREY = "#808080"  # Plotly's "grey"
LIGHT_GREY = "#EEEEEE"

# Plots (lmviz/plots.py). Lines are drawn on white, so each has 3:1 contrast with it
# (WCAG 2.1, 1.4.11, graphical objects).
CURVE_COLOUR = BLUE  # the -log p curve; the training loss
LOSS_COLOUR = VERMILION  # the true labels and their losses; the validation loss
# The training chart's dotted reference lines, in the order the Train page lists them
# (uniform guess ln V, the corpus's unigram entropy, the validation stories' own entropy).
REFERENCE_LINE_COLOURS = (GREY, REDDISH_PURPLE, BLACK)

# Masked LM: the four things that can happen to a position (lmviz.core.masking.Branch, in its order:
# not selected, [MASK], random token, kept). "Not selected" is nearly white: the eye goes to the
# positions that count. (Indexed by the branch, so that this module needs no torch.)
MLM_BRANCH_COLOURS = (LIGHT_GREY, BLUE, ORANGE, BLUISH_GREEN)

# Chat fine-tuning: who wrote each token (lmviz.lessons.chat_loss's roles). The template's own tokens are nearly
# white, like masked LM's "not selected": the eye goes to the messages; every chip also says its role.
CHAT_ROLE_COLOURS = {"system": REDDISH_PURPLE, "user": BLUE, "assistant": BLUISH_GREEN, "template": LIGHT_GREY}

# Toy example: the true label's cell and the greedy pick's text (the page also marks each with a symbol: ✓ and ★).
TOY_TRUE_LABEL_BACKGROUND = "#C7E9C0"
TOY_GREEDY_TEXT = "#08519C"
# What the two colours above stand out from, Streamlit's light-theme cell: the page sets it with them (the true label's
# text, the greedy pick's cell), so that a dark theme's light text never lands on a light cell; the contrast tests
# (tests/figures/test_palettes.py) measure each pair.
TOY_CELL_BACKGROUND = WHITE
TOY_CELL_TEXT = "#31333F"  # Streamlit's light theme text colour
# A chart's label on a box of its own (nll_curve's): dark text on a nearly white box in either theme, legible where
# it crosses a line.
LABEL_BOX, LABEL_TEXT = "rgba(255, 255, 255, 0.85)", TOY_CELL_TEXT

# Sequential: -log p of a token, (upper edge, colour), light = likely to dark = surprising.
# Five stops of viridis (van der Walt & Smith, 2015; matplotlib's default), reversed:
# its lightness rises steadily, and stays ordered for dichromats.
LOSS_SCALE = (
    (1.0, "#FDE725"),
    (2.0, "#5EC962"),
    (4.0, "#21918C"),
    (8.0, "#3B528B"),
    (math.inf, "#440154"),
)


def loss_colour(nll: float) -> str:
    """The scale's colour for a -log p value (NaN and ∞ get the darkest)."""
    return next((colour for upper, colour in LOSS_SCALE if nll < upper), LOSS_SCALE[-1][1])


def _linear(channel: int) -> float:
    c = channel / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def relative_luminance(colour: str) -> float:
    """WCAG 2.1's relative luminance of a "#RRGGBB" colour."""
    r, g, b = (_linear(int(colour[i:i + 2], 16)) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2.1's contrast ratio, from 1 (none) to 21 (black on white)."""
    light, dark = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on ``background``."""
    return max((BLACK, WHITE), key=lambda text: contrast_ratio(text, background))


def fill_css(background: str) -> str:
    """Inline CSS for a chip: its fill and a text colour that reads on it."""
    return f"background:{background};color:{text_colour(background)}"
