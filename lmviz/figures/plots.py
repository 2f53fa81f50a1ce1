"""Plotly figures for the pages: data in, Figure out (never a model)."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lmviz.core.numbers import fmt, fmt_grad, fmt_prob
from lmviz.figures.palettes import CURVE_COLOUR, GREY, LABEL_BOX, LABEL_TEXT, LOSS_COLOUR, REFERENCE_LINE_COLOURS


def plain(text: str) -> str:
    """Plotly reads a subset of HTML in text and labels (<b>, <br>, <a>):
    escape tokens so they are drawn exactly as written."""
    return html.escape(text, quote=False)


CHART_FONT_PX = 14  # the smallest text on a chart: read from the back of a classroom
# The charts' own font, one the system has: Plotly's "Download plot as a PNG" draws the chart in an image, where
# Streamlit's web font (Source Sans) is not loaded. Text placed to fit in that font was drawn in a wider one and ran
# past its room: the mean loss's label cut at the right edge, the legend's entries over one another.
CHART_FONT_FAMILY = "Arial, 'Liberation Sans', Helvetica, sans-serif"
TITLE_ROOM = 2.2  # the height a chart's title adds above the rest, in chart font sizes
PLOTLY_MARGIN_T, PLOTLY_HEIGHT = 100, 450  # Plotly's own, where a figure sets none


def readable(fig: go.Figure, font_px: int) -> go.Figure:
    """``fig`` as a page shows it and its "Download plot as a PNG" saves it: all its text (axis titles, ticks, legend,
    labels, hover) at least ``font_px``, in CHART_FONT_FAMILY, and its title, all that names the chart in a saved
    image, at the top left in room added above what was there (the plot area keeps its height); a margin at the right,
    where Streamlit's theme leaves none."""
    if not fig.layout.title.text:
        raise ValueError("A chart needs a title: in a saved image nothing else names it.")
    font = {"size": font_px, "family": CHART_FONT_FAMILY}
    room = round(TITLE_ROOM * font_px)
    fig.update_layout(font=font, hoverlabel={"font": font}, legend={"font": font},
                      title={"font": {**font, "size": round(1.15 * font_px)}, "x": 0, "xanchor": "left",
                             "xref": "container", "y": 1, "yref": "container", "yanchor": "top",
                             "pad": {"t": round(0.5 * font_px), "l": 6}},
                      margin={"t": (fig.layout.margin.t or PLOTLY_MARGIN_T) + room,
                              "r": max(fig.layout.margin.r or 0, font_px)},  # a label ending at the right edge fits
                      height=(fig.layout.height or PLOTLY_HEIGHT) + room)
    fig.update_xaxes(title_font=font, tickfont=font)
    fig.update_yaxes(title_font=font, tickfont=font)
    fig.update_annotations(font_size=font_px, font_family=CHART_FONT_FAMILY)
    return fig
NLL_LABEL_ROOM = (300, 300)  # px: the smallest plot area nll_curve places labels for; a larger one spreads them
_NLL_X_MAX = 1.02


def nll_curve(p_label: list[float], names: list[str], mean_loss: float, uniform_loss: float,
              font_px: int = CHART_FONT_PX) -> go.Figure:
    """-log p against p, with one marker per position: how much each
    probability costs, and why a small p costs so much more than a large one.

    The two reference lines are named in the legend and each position next to
    its marker, placed so that no two labels overlap. A p of 0 has -log p = ∞:
    it is drawn as an arrow at the top edge, and an infinite mean only named."""
    finite = [t for t, p in enumerate(p_label) if p > 0]
    y_top = max([5.5, uniform_loss + 0.5] + [1.08 * -math.log(p_label[t]) for t in finite])
    on_chart = [(p_label[t], -math.log(p_label[t]), names[t]) for t in finite]
    off_chart = [(0.0, y_top, f"{names[t]} — p = 0, so -log p = ∞") for t in range(len(p_label)) if t not in finite]
    fig = go.Figure([_nll_line(y_top), _position_markers(on_chart)])  # the browser tests count trace 1's markers
    fig.add_trace(_level_line(mean_loss, f"mean of -log p = loss = {fmt(mean_loss)}", "dash", LOSS_COLOUR))
    fig.add_trace(_level_line(uniform_loss, f"uniform guess: ln V = {fmt(uniform_loss)}", "dot", GREY))
    if off_chart:
        fig.add_trace(go.Scatter(x=[0.0], y=[y_top], mode="markers", showlegend=False, hoverinfo="skip",
                                 marker={"size": 16, "color": LOSS_COLOUR, "symbol": "arrow-up"}, cliponaxis=False))
    points = on_chart + off_chart
    for (x, y, text), (dx, dy, side) in zip(points, _label_offsets(points, y_top, font_px)):
        fig.add_annotation(x=x, y=y, text=plain(text), showarrow=True, arrowhead=0, arrowcolor=GREY, standoff=7,
                           ax=dx, ay=-dy, xanchor=side, yanchor="middle", font={"size": font_px, "color": LABEL_TEXT},
                           bgcolor=LABEL_BOX)
    size = {"size": font_px}
    fig.update_layout(title_text="-log p against p: what each true label's probability costs", font=size,
                      hoverlabel={"font": size}, height=480, margin={"t": 80, "b": 60},
                      legend={"font": size, "orientation": "h", "x": 0, "xanchor": "left", "y": 1.02,
                              "yanchor": "bottom"})
    fig.update_xaxes(title={"text": "p(true label)", "font": size}, tickfont=size, range=[0, _NLL_X_MAX])
    fig.update_yaxes(title={"text": "-log p  (loss at that position)", "font": size}, tickfont=size, range=[0, y_top])
    return fig


def _position_markers(points: list[tuple[float, float, str]]) -> go.Scatter:
    """One marker per (p, -log p, name); hovering shows the numbers as the page writes them."""
    return go.Scatter(
        x=[p for p, _, _ in points], y=[y for _, y, _ in points], mode="markers", name="true label at a position",
        marker={"size": 12, "color": LOSS_COLOUR}, cliponaxis=False, text=[plain(n) for _, _, n in points],
        customdata=[[fmt_prob(p), fmt(y)] for p, y, _ in points],
        hovertemplate="%{text}<br>p = %{customdata[0]}<br>-log p = %{customdata[1]}<extra></extra>")


def _nll_line(y_top: float) -> go.Scatter:
    """-log p from p = 1 up to the top of the chart: evenly spaced in p, and in -log p where it is steep."""
    grid = sorted({i / 400 for i in range(2, 401)} | {math.exp(-k / 20) for k in range(20 * 5, int(20 * y_top) + 2)})
    return go.Scatter(x=grid, y=[-math.log(p) for p in grid], mode="lines", name="-log p",
                      line={"color": CURVE_COLOUR}, hoverinfo="skip")


def _level_line(level: float, name: str, dash: str, colour: str) -> go.Scatter:
    """A horizontal line across the chart, named in the legend; an infinite level is named only."""
    finite = math.isfinite(level)
    y = [level, level] if finite else [None, None]
    return go.Scatter(x=[0, _NLL_X_MAX], y=y, mode="lines", name=name if finite else f"{name} (off the chart)",
                      hoverinfo="skip", line={"color": colour, "dash": dash})


def _label_offsets(points: list[tuple[float, float, str]], y_top: float, font_px: int,
                   room: tuple[int, int] = NLL_LABEL_ROOM) -> list[tuple[int, int, str]]:
    """Where each (p, -log p, text) label goes: (dx, dy, xanchor), pixels from its marker.

    Each takes the first free spot right or left of its marker, then one line further
    up or down, and so on: free means inside the plot area and covering no other label
    and no marker. Worked out for a plot area of ``room`` pixels; a larger one only
    moves the markers, and so the labels, further apart."""
    width, height = room
    line = round(1.4 * font_px)  # a label's height, with a little air
    gap = 12  # px between a marker and the near edge of its label
    spots = [(dx, k * line, side) for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5)
             for dx, side in ((gap, "left"), (-gap, "right"))]
    taken = [_box(p / _NLL_X_MAX * width - 8, y / y_top * height, 16, 16) for p, y, _ in points]  # the markers
    offsets = []
    for p, y, text in points:
        text_px = 0.62 * font_px * len(text) + 6  # a generous average width per character

        def label_box(spot):
            dx, dy, side = spot
            return _box(p / _NLL_X_MAX * width + dx - (text_px if side == "right" else 0), y / y_top * height + dy,
                        text_px, line)

        spot = next((s for s in spots if _fits(label_box(s), taken, width, height)), spots[0])  # else overlap
        taken.append(label_box(spot))
        offsets.append(spot)
    return offsets


def _box(left: float, middle: float, width: float, height: float) -> tuple[float, float, float, float]:
    return left, middle - height / 2, left + width, middle + height / 2


def _fits(box, taken, width: float, height: float) -> bool:
    left, bottom, right, top = box
    inside = left >= 0 and bottom >= 0 and right <= width and top <= height
    return inside and not any(left < o[2] and o[0] < right and bottom < o[3] and o[1] < top for o in taken)


MAX_BAR_LABELS = 24  # more token labels than this overlap at a projector's width: they go to the hover


def token_loss_bars(labels: list[str], nll: list[float], mean_loss: float,
                    probs: list[float] | None = None) -> go.Figure:
    """One bar per scored position: the loss of predicting that token. Every number in the
    hover is written by lmviz.core.numbers, as on the page."""
    positions = list(range(len(nll)))
    labels = [plain(label) for label in labels]
    customdata = [[label, fmt(v), fmt_prob(p) if probs is not None else ""]
                  for label, v, p in zip(labels, nll, probs or [0.0] * len(nll))]
    hover = "position %{x}<br>target %{customdata[0]}<br>-log p = %{customdata[1]}"
    if probs is not None:
        hover += "<br>p = %{customdata[2]}"
    labelled = len(nll) <= MAX_BAR_LABELS
    fig = go.Figure(go.Bar(x=positions, y=nll, customdata=customdata, marker_color=LOSS_COLOUR,
                           hovertemplate=hover + "<extra></extra>", text=labels if labelled else None,
                           textposition="outside", cliponaxis=False))
    fig.add_hline(y=mean_loss, line_dash="dash", annotation_text=f"mean loss {fmt(mean_loss)}",
                  annotation_position="top right")
    x_title = ("position (its target token above the bar)" if labelled
               else "position (hover over a bar for its token; the coloured sentence below shows them all)")
    fig.update_layout(title_text="-log p of each target token, and their mean: the loss",
                      xaxis_title=x_title, yaxis_title="-log p(target)",
                      xaxis={"tickmode": "array", "tickvals": positions} if labelled else {}, height=400,
                      margin={"t": 40, "b": 40}, showlegend=False)
    return fig


REFERENCE_LINE_DASHES = ("dot", "dash", "dashdot")


def training_curves(history, reference_lines: dict[str, dict[str, float]], units: dict[str, str]) -> go.Figure:
    """Loss per step while training (``history``: lmviz.lessons.training.StepRecord), one panel
    per loss part, each with the losses worth comparing it to as dotted lines. The
    parts of masked LM + next sentence are drawn apart: they are measured per
    different things and start near different uniform guesses (ln V and ln 2)."""
    parts = list(reference_lines)
    fig = make_subplots(rows=1, cols=len(parts), subplot_titles=[f"{part} loss" for part in parts])
    trained = [r for r in history if r.train is not None]
    validated = [r for r in history if r.validation is not None]
    for col, part in enumerate(parts, start=1):
        first = col == 1  # one legend entry per kind of curve
        fig.add_trace(go.Scatter(x=[r.step for r in trained], y=[r.train[part] for r in trained], mode="lines",
                                 name="training loss (this step's batch)", legendgroup="train", showlegend=first,
                                 line={"color": CURVE_COLOUR, "width": 1}), row=1, col=col)
        fig.add_trace(go.Scatter(x=[r.step for r in validated], y=[r.validation[part] for r in validated],
                                 mode="lines+markers", name="validation loss (fixed stories)", legendgroup="val",
                                 showlegend=first, line={"color": LOSS_COLOUR, "width": 2}), row=1, col=col)
        # Reference lines are named in the legend, not by labels on the chart, which the curves
        # would cross; each has its own dash as well as its own colour.
        last_step = max([r.step for r in history] + [1])
        for (label, value), colour, dash in zip(reference_lines[part].items(), REFERENCE_LINE_COLOURS,
                                                REFERENCE_LINE_DASHES):
            fig.add_trace(go.Scatter(x=[0, last_step], y=[value, value], mode="lines",
                                     name=f"{plain(label)}: {fmt(value)}",
                                     line={"color": colour, "dash": dash, "width": 2}, hoverinfo="name"),
                          row=1, col=col)
        fig.update_yaxes(title_text=f"loss ({units[part]})", rangemode="tozero", row=1, col=col)
        fig.update_xaxes(title_text="training step", row=1, col=col)
    # 480 px: with the room readable() adds for the title it is the 520 px that fits beside Train's button at 1280×720
    fig.update_layout(title_text="The loss at each training step", height=480, margin={"t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.25})
    return fig


GREEDY_MARK, TRUE_NEXT_MARK = "★ greedy", "✓ true next"


def next_token_bars(tokens: list[str], probs: list[float], rest_prob: float, rest_count: int, greedy: int,
                    true_next: int | None = None) -> go.Figure:
    """The next-token distribution: one bar per listed token, most likely on top, and the rest of the
    vocabulary as one "everything else" bar. ``greedy`` and ``true_next`` index ``tokens``; each is
    marked in words beside its bar as well as by its colour."""
    names = [plain(t) for t in tokens] + [f"everything else ({rest_count:,} tokens)"]
    values = [*probs, rest_prob]
    marks = [" ".join(m for m, on in ((GREEDY_MARK, i == greedy), (TRUE_NEXT_MARK, i == true_next)) if on)
             for i in range(len(tokens))] + [""]
    colours = [LOSS_COLOUR if i == true_next else CURVE_COLOUR for i in range(len(tokens))] + [GREY]
    # Two bars may show the same text (two tokens that read alike): the y axis is the rank, labelled with the token.
    y = list(range(1, len(values) + 1))
    fig = go.Figure(go.Bar(
        x=values, y=y, orientation="h", marker={"color": colours, "pattern": {"shape": [""] * len(tokens) + ["/"]}},
        text=[fmt_prob(p) for p in values], textposition="outside", cliponaxis=False, customdata=names,
        hovertemplate="%{customdata}<br>p = %{text}<extra></extra>"))
    fig.update_yaxes(tickmode="array", tickvals=y,
                     ticktext=[f"{mark} {name}".strip() for name, mark in zip(names, marks)],
                     autorange="reversed", title_text="")
    # room right of the longest bar for its number (the axis may then run past 1)
    fig.update_xaxes(title_text="probability of being the next token", range=[0, max(values) * 1.3])
    fig.update_layout(title_text="The probability of each token being the next", height=max(300, 26 * len(values) + 90),
                      margin={"t": 10, "b": 50}, showlegend=False)
    return fig


def push_and_loss_bars(labels: list[str], pushes: list[float], nll: list[float]) -> go.Figure:
    """Per label, two panels one above the other (each named by its title, not by a colour): -log p, and the
    length of the position's row of ∂L/∂logits, how fast the loss changes with that position's logits. The same x,
    token by token."""
    labels = [plain(label) for label in labels]
    positions = list(range(len(labels)))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=["-log p(label): how surprised the model is",
                                        "‖row‖ of the gradient with respect to the logits"])
    for row, values, written, colour in ((1, nll, fmt, LOSS_COLOUR), (2, pushes, fmt_grad, CURVE_COLOUR)):
        fig.add_trace(go.Bar(x=positions, y=values, marker_color=colour, customdata=[[t, written(v)] for t, v in
                                                                                      zip(labels, values)],
                             hovertemplate="%{customdata[0]}: %{customdata[1]}<extra></extra>"), row=row, col=1)
    ticks = {"tickmode": "array", "tickvals": positions, "ticktext": labels} if len(labels) <= MAX_BAR_LABELS else {}
    fig.update_xaxes(**ticks)
    fig.update_xaxes(title_text="label (the token predicted)", row=2, col=1)
    fig.update_layout(title_text="Label by label: -log p, and the gradient's row", height=440,
                      margin={"t": 40, "b": 40}, showlegend=False)
    return fig


def loss_per_step(losses: list[float]) -> go.Figure:
    """A text's loss before the first step (step 0) and after each step."""
    steps = list(range(len(losses)))
    fig = go.Figure(go.Scatter(x=steps, y=losses, mode="lines+markers", line={"color": LOSS_COLOUR, "width": 2},
                               customdata=[fmt(v) for v in losses],
                               hovertemplate="after step %{x}: loss %{customdata}<extra></extra>"))
    fig.update_layout(title_text="The loss of your text, step after step", xaxis_title="steps taken",
                      yaxis_title="loss of your text", height=320,
                      xaxis={"tickmode": "array", "tickvals": steps}, yaxis={"rangemode": "tozero"},
                      margin={"t": 20, "b": 40}, showlegend=False)
    return fig


# The three ways of scoring a long text (lmviz.lessons.bits_per_byte), each with its own colour, dash and marker
WINDOW_STYLES = ({"color": GREY, "dash": "solid", "symbol": "circle-open"},
                 {"color": CURVE_COLOUR, "dash": "dash", "symbol": "square"},
                 {"color": LOSS_COLOUR, "dash": "dot", "symbol": "diamond"})


def context_lengths(ways: dict[str, list[int | None]]) -> go.Figure:
    """How many tokens each token of a text is predicted from, one line per way of scoring it (``ways``: name ->
    each position's context length, None where that way does not score it): where a line falls below the one
    pass's diagonal, the token lost context. Lines differ by dash and marker as well as colour."""
    fig = go.Figure()
    for (name, context), style in zip(ways.items(), WINDOW_STYLES):
        fig.add_trace(go.Scatter(
            x=list(range(len(context))), y=context, mode="lines+markers", name=plain(name), connectgaps=False,
            line={"color": style["color"], "dash": style["dash"], "width": 2},
            marker={"symbol": style["symbol"], "size": 6, "color": style["color"]},
            hovertemplate="position %{x}: predicted from %{y} tokens<extra>" + plain(name) + "</extra>"))
    fig.update_xaxes(title_text="position of the predicted token", rangemode="tozero")
    fig.update_yaxes(title_text="context length (tokens)", rangemode="tozero")
    fig.update_layout(title_text="How many tokens each token is predicted from", height=340,
                      margin={"t": 30, "b": 40}, legend={"orientation": "h", "y": -0.3})
    return fig
