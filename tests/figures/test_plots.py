"""Every chart as a page shows it and as its "Download plot as a PNG" saves it (lmviz.figures.plots.readable): a
title that names it, in room of its own; its labels inside the image, in a font the saved image draws as the screen
does; and a label on a box of its own readable in a light theme and a dark one."""

import math
import re
from types import SimpleNamespace

import pytest

from lmviz.figures import plots
from lmviz.figures.palettes import contrast_ratio

TOKENS = ["␣The", "␣cat", "␣sat", "."]
NLL = [5.34, 0.21, 2.9, 0.75]
STEPS = [SimpleNamespace(step=s, train={"causal": 5.0 - s / 10}, validation={"causal": 5.1 - s / 10} if s % 5 == 0
                         else None) for s in range(1, 21)]
CHARTS = {  # every kind of chart the pages draw, on small data
    "nll_curve": lambda: plots.nll_curve([0.5, 0.3, 0.0, 0.6], ["0: I", "1: love", "2: dogs", "3: cats"], math.inf,
                                         2.30259),
    "nll_curve finite": lambda: plots.nll_curve([0.5, 0.3, 0.33, 0.45, 0.6], [f"{t}: w" for t in range(5)], 0.86302,
                                                2.30259),
    "token_loss_bars": lambda: plots.token_loss_bars(TOKENS, NLL, sum(NLL) / len(NLL), [0.005, 0.81, 0.055, 0.47]),
    "training_curves": lambda: plots.training_curves(STEPS, {"causal": {"uniform guess": 5.4, "unigram": 4.1}},
                                                     {"causal": "nats per token"}),
    "next_token_bars": lambda: plots.next_token_bars(TOKENS, [0.6, 0.2, 0.1, 0.05], 0.05, 49_148, 0, 2),
    "push_and_loss_bars": lambda: plots.push_and_loss_bars(TOKENS, [0.16, 0.01, 0.12, 0.05], NLL),
    "loss_per_step": lambda: plots.loss_per_step([2.57, 1.86, 1.05, 0.61]),
}
SIZES = [plots.CHART_FONT_PX, 18]  # the page's text, and presentation mode's


def over(colour: str, ground: str) -> str:
    """An "rgba(r, g, b, a)" colour as it shows over the solid ``ground`` ("#RRGGBB")."""
    found = re.fullmatch(r"rgba\((\d+), (\d+), (\d+), ([\d.]+)\)", colour)
    if not found:
        return colour
    *rgb, alpha = (float(v) for v in found.groups())
    under = [int(ground[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(alpha * c + (1 - alpha) * u):02X}" for c, u in zip(rgb, under))


@pytest.mark.parametrize("px", SIZES)
@pytest.mark.parametrize("chart", CHARTS)
def test_every_chart_has_a_title_at_its_top_in_room_added_for_it(chart, px):
    """A saved PNG had no title: nothing in it said what it shows. The title's room is added above what the figure
    had, so that the legend, the bars' labels and the subplot titles keep theirs, and so is the figure's height, so
    that the plot area keeps its own."""
    before = CHARTS[chart]()
    margin, height = before.layout.margin.t, before.layout.height
    fig = plots.readable(CHARTS[chart](), px)
    title = fig.layout.title
    assert title.text and title.font.size > px
    assert (title.yref, title.y, title.yanchor, title.xanchor, title.x) == ("container", 1, "top", "left", 0)
    room = fig.layout.margin.t - margin
    assert room == fig.layout.height - height
    assert room >= 1.3 * title.font.size + title.pad.t  # a line of the title's text, and the space above it


@pytest.mark.parametrize("chart", CHARTS)
def test_every_label_of_a_chart_is_inside_its_image(chart):
    """An annotation placed on the plot area's edges (x or y 0 or 1 of the paper or an axis's domain) reaches inward
    from it, and one above the plot area has room under the title's: none is cut at the image's edge."""
    px = 18
    fig = plots.readable(CHARTS[chart](), px)
    room = round(plots.TITLE_ROOM * px)
    assert fig.layout.margin.r >= px  # Streamlit's theme leaves none: the mean loss's label reached the image's edge
    for note in fig.layout.annotations:
        xref, yref = note.xref or "x", note.yref or "y"  # unset: the data's
        if xref == "paper" or xref.endswith("domain"):
            assert 0 <= note.x <= 1, note
            assert note.x < 1 or note.xanchor == "right", note  # ends at the right edge, never past it
            assert note.x > 0 or note.xanchor in ("left", "auto"), note
        if yref == "paper" or yref.endswith("domain"):
            assert 0 <= note.y <= 1.02, note
            if note.y >= 1 and note.yanchor == "bottom":  # above the plot area: a line of text under the title's room
                assert fig.layout.margin.t - room >= 1.4 * px, note
        else:  # on the data, as the mean loss's label is: inside the axis's range where the chart sets one
            axis = fig.layout[f"yaxis{yref[1:]}"]
            if axis.range is not None:
                assert axis.range[0] <= note.y <= axis.range[1], note


@pytest.mark.parametrize("chart", CHARTS)
def test_every_text_of_a_chart_is_in_a_font_the_saved_image_draws(chart):
    """Plotly's saved PNG is drawn where Streamlit's web font is not loaded: text measured in it and drawn in a wider
    fallback ran past its room. Every text is in CHART_FONT_FAMILY, a font of the system's, on screen and saved."""
    fig = plots.readable(CHARTS[chart](), plots.CHART_FONT_PX)
    family = plots.CHART_FONT_FAMILY
    assert "Source Sans" not in family
    assert fig.layout.font.family == fig.layout.title.font.family == fig.layout.legend.font.family == family
    assert all(note.font.family == family for note in fig.layout.annotations)
    assert all(axis.tickfont.family == family for axis in [*fig.select_xaxes(), *fig.select_yaxes()])


def test_a_label_on_its_own_box_reads_in_a_light_theme_and_a_dark_one():
    """nll_curve's labels sit on a nearly white box: their text is dark whatever the theme (in a dark theme the text
    was the theme's light grey, on white)."""
    fig = plots.readable(CHARTS["nll_curve finite"](), plots.CHART_FONT_PX)
    boxed = [note for note in fig.layout.annotations if note.bgcolor]
    assert boxed
    for note in boxed:
        for page in ("#FFFFFF", "#0E1117"):  # Streamlit's light and dark backgrounds, under the box's transparency
            assert note.font.color and contrast_ratio(note.font.color, over(note.bgcolor, page)) >= 4.5, note


def test_a_chart_without_a_title_is_refused():
    with pytest.raises(ValueError, match="title"):
        plots.readable(plots.go.Figure(), plots.CHART_FONT_PX)
