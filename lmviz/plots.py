"""Plotly figures for the pages: data in, Figure out (never a model)."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

LOSS_COLOUR = "#d62728"
CURVE_COLOUR = "#1f77b4"


def plain(text: str) -> str:
    """Plotly reads a subset of HTML in text and labels (<b>, <br>, <a>):
    escape tokens so they are drawn exactly as written."""
    return html.escape(text, quote=False)


def nll_curve(p_label: list[float], names: list[str], mean_loss: float, uniform_loss: float) -> go.Figure:
    """-log p against p, with one marker per position: how much each
    probability costs, and why a small p costs so much more than a large one."""
    grid = [i / 400 for i in range(2, 401)]  # p from 0.005 to 1
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=grid, y=[-math.log(p) for p in grid], mode="lines", name="-log p",
                             line={"color": CURVE_COLOUR}, hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=p_label, y=[-math.log(p) for p in p_label], mode="markers+text", name="true labels",
        text=[plain(n) for n in names], textposition="top right", marker={"size": 12, "color": LOSS_COLOUR},
        hovertemplate="%{text}<br>p = %{x:.4f}<br>-log p = %{y:.5f}<extra></extra>",
    ))
    fig.add_hline(y=mean_loss, line_dash="dash", line_color=LOSS_COLOUR,
                  annotation_text=f"mean = loss = {mean_loss:.5f}", annotation_position="top left")
    fig.add_hline(y=uniform_loss, line_dash="dot", line_color="grey",
                  annotation_text=f"uniform guess ln V = {uniform_loss:.5f}", annotation_position="bottom right")
    fig.update_layout(xaxis_title="p(true label)", yaxis_title="-log p  (loss at that position)",
                      xaxis_range=[0, 1.02], yaxis_range=[0, max(5.5, uniform_loss + 0.5)],
                      height=420, margin={"t": 30, "b": 40}, showlegend=False)
    return fig


def token_loss_bars(labels: list[str], nll: list[float], mean_loss: float, probs: list[float] | None = None) -> go.Figure:
    """One bar per scored position: the loss of predicting that token."""
    positions = list(range(len(nll)))
    hover = "position %{x}<br>target %{customdata[0]}<br>-log p = %{y:.5f}"
    labels = [plain(label) for label in labels]
    customdata = [[label] for label in labels]
    if probs is not None:
        customdata = [[label, p] for label, p in zip(labels, probs)]
        hover += "<br>p = %{customdata[1]:.5f}"
    fig = go.Figure(go.Bar(x=positions, y=nll, customdata=customdata, marker_color=LOSS_COLOUR,
                           hovertemplate=hover + "<extra></extra>", text=labels, textposition="outside",
                           cliponaxis=False))
    fig.add_hline(y=mean_loss, line_dash="dash", annotation_text=f"mean loss {mean_loss:.5f}",
                  annotation_position="top left")
    fig.update_layout(xaxis_title="position (its target token above the bar)", yaxis_title="-log p(target)",
                      xaxis={"tickmode": "array", "tickvals": positions}, height=400,
                      margin={"t": 40, "b": 40}, showlegend=False)
    return fig


def training_curves(history, reference_lines: dict[str, dict[str, float]], units: dict[str, str]) -> go.Figure:
    """Loss per step while training (``history``: lmviz.training.StepRecord), one panel
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
        for (label, value), colour in zip(reference_lines[part].items(), ["grey", "#9467bd", "#2ca02c"]):
            fig.add_hline(y=value, line_dash="dot", line_color=colour, row=1, col=col,
                          annotation_text=f"{plain(label)}: {value:.3f}", annotation_position="top right")
        fig.update_yaxes(title_text=f"loss ({units[part]})", rangemode="tozero", row=1, col=col)
        fig.update_xaxes(title_text="training step", row=1, col=col)
    fig.update_layout(height=450, margin={"t": 40, "b": 40}, legend={"orientation": "h", "y": -0.2})
    return fig
