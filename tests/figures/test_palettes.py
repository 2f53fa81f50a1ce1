"""lmviz.figures.palettes seen by colour-blind readers: simulated protanopia, deuteranopia and tritanopia
(Machado, Oliveira & Fernandes 2009, as colorspacious implements it; severity 100 = the full
dichromacy, the hardest case), distances measured in CAM02-UCS (Luo, Cui & Li 2006)."""

import itertools
import math

import numpy as np
import pytest
from colorspacious import cspace_convert, deltaE

from lmviz.core.labels import Branch
from lmviz.figures import palettes

DICHROMACIES = ("protanomaly", "deuteranomaly", "tritanomaly")
VISIONS = ("normal", *DICHROMACIES)

# How far apart is "clearly different"? CAM02-UCS is scaled so that a distance ΔE' of about 1
# is the smallest difference seen between two large patches side by side. Here the colours are
# chips a few characters wide and thin lines, on a projector, seen from the back of a room, and
# Szafir ("Modeling Color Difference for Visualization Design", IEEE TVCG 2017) measured that
# the difference people need grows several-fold as marks get smaller. 10 units keeps that
# margin. (The palettes lmviz used before came out at 1.2-5.2: see the last test.)
MIN_DELTA_E = 10.0
# The loss scale is read as "darker = more surprising", also by readers who see no hue at all:
# each step must be darker than the one before by 5 units of CAM02-UCS lightness J' (five
# large-patch thresholds), not just by a rounding error.
MIN_LIGHTNESS_STEP = 5.0
WCAG_TEXT = 4.5  # WCAG 2.1 AA, 1.4.3: normal-size text on its background
WCAG_GRAPHICS = 3.0  # WCAG 2.1 AA, 1.4.11: lines and marks against the page

# Colours that tell categories apart: every pair within a group must stay apart.
CATEGORICAL = {
    "Masked LM branches": lambda: list(palettes.MLM_BRANCH_COLOURS),
    "chat roles": lambda: list(palettes.CHAT_ROLE_COLOURS.values()),
    "plot lines (curves and reference lines)": lambda: [palettes.CURVE_COLOUR, palettes.LOSS_COLOUR,
                                                        *palettes.REFERENCE_LINE_COLOURS],
    "toy: true label's cell vs the others": lambda: [palettes.TOY_TRUE_LABEL_BACKGROUND, palettes.TOY_CELL_BACKGROUND],
    "toy: greedy pick's text vs the others": lambda: [palettes.TOY_GREEDY_TEXT, palettes.TOY_CELL_TEXT],
}


def seen(colour: str, vision: str) -> np.ndarray:
    """The colour (sRGB, 0-1) as someone with ``vision`` sees it."""
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    if vision == "normal":
        return rgb
    cvd = {"name": "sRGB1+CVD", "cvd_type": vision, "severity": 100}
    return np.clip(cspace_convert(rgb, cvd, "sRGB1"), 0, 1)


def distance(a: str, b: str, vision: str) -> float:
    return float(deltaE(seen(a, vision), seen(b, vision), input_space="sRGB1"))  # CAM02-UCS by default


def closest_pair(colours: list[str], vision: str) -> tuple[float, str, str]:
    return min((distance(a, b, vision), a, b) for a, b in itertools.combinations(colours, 2))


def lightness(colour: str, vision: str) -> float:
    return float(cspace_convert(seen(colour, vision), "sRGB1", "CAM02-UCS")[0])


def scale_colours() -> list[str]:
    return [colour for _, colour in palettes.LOSS_SCALE]


@pytest.mark.parametrize("vision", VISIONS)
@pytest.mark.parametrize("group", CATEGORICAL)
def test_colours_of_different_categories_stay_apart(group, vision):
    gap, a, b = closest_pair(CATEGORICAL[group](), vision)
    assert gap >= MIN_DELTA_E, f"{group}, {vision}: {a} and {b} are only ΔE' {gap:.1f} apart"


@pytest.mark.parametrize("vision", VISIONS)
def test_the_loss_scale_gets_darker_at_every_step(vision):
    colours = scale_colours()
    j = [lightness(c, vision) for c in colours]
    steps = [round(a - b, 1) for a, b in zip(j, j[1:])]
    assert min(steps) >= MIN_LIGHTNESS_STEP, f"{vision}: J' {[round(x, 1) for x in j]}, steps {steps}"
    gaps = [round(distance(a, b, vision), 1) for a, b in zip(colours, colours[1:])]
    assert min(gaps) >= MIN_DELTA_E, f"{vision}: neighbouring steps only ΔE' {gaps} apart"


def test_text_on_every_fill_is_readable():
    for fill in [*scale_colours(), *palettes.MLM_BRANCH_COLOURS, *palettes.CHAT_ROLE_COLOURS.values()]:
        assert palettes.contrast_ratio(fill, palettes.text_colour(fill)) >= WCAG_TEXT, fill


def test_plot_lines_stand_out_from_the_white_page():
    for line in [palettes.CURVE_COLOUR, palettes.LOSS_COLOUR, *palettes.REFERENCE_LINE_COLOURS]:
        assert palettes.contrast_ratio(line, palettes.WHITE) >= WCAG_GRAPHICS, line


def test_contrast_ratio_matches_wcag():
    assert palettes.contrast_ratio(palettes.BLACK, palettes.WHITE) == pytest.approx(21.0)
    assert palettes.contrast_ratio("#777777", palettes.WHITE) == pytest.approx(4.48, abs=0.01)  # WCAG's example


def test_every_loss_gets_the_colour_of_its_step():
    (first_edge, first), (_, second), *_ = palettes.LOSS_SCALE
    darkest = palettes.LOSS_SCALE[-1][1]
    assert palettes.loss_colour(0.0) == first and palettes.loss_colour(first_edge) == second
    assert palettes.loss_colour(math.inf) == palettes.loss_colour(math.nan) == darkest
    assert [upper for upper, _ in palettes.LOSS_SCALE] == sorted(upper for upper, _ in palettes.LOSS_SCALE)


def test_every_masking_branch_has_a_colour():
    assert len(palettes.MLM_BRANCH_COLOURS) == len(Branch)


# What lmviz drew with before palettes.py: Streamlit's light-theme tints behind
# :green-background[...] etc. (Streamlit 1.67's theme) and Plotly's default line colours.
OLD_LOSS_TINTS = ["#F1FBF6", "#FFF6ED", "#FFF1F2", "#F8F2FF"]  # green, orange, red, violet
OLD_BRANCH_TINTS = ["#F5F4F2", "#EDF5FF", "#FFF6ED", "#F1FBF6"]  # gray, blue, orange, green
OLD_PLOT_LINES = ["#1F77B4", "#D62728", "#808080", "#9467BD", "#2CA02C"]


def test_the_checks_reject_the_old_palettes():
    """The thresholds above are not so loose that anything passes."""
    assert closest_pair(OLD_LOSS_TINTS, "deuteranomaly")[0] < MIN_DELTA_E
    assert distance("#F5F4F2", "#F1FBF6", "deuteranomaly") < MIN_DELTA_E  # not selected vs kept
    assert closest_pair(OLD_PLOT_LINES, "protanomaly")[0] < MIN_DELTA_E
    j = [lightness(c, "protanomaly") for c in OLD_LOSS_TINTS]
    assert min(a - b for a, b in zip(j, j[1:])) < MIN_LIGHTNESS_STEP
