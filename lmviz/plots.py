"""Plotly figures for the pages: data in, Figure out (never a model)."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go

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


def training_curves(steps: list[int], train_losses: list[float], validation_steps: list[int],
                    validation_losses: list[float], reference_lines: dict[str, float]) -> go.Figure:
    """Loss per step while training, with the losses worth comparing to as dotted lines."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=train_losses, mode="lines", name="training loss (one batch)",
                             line={"color": CURVE_COLOUR, "width": 1}))
    fig.add_trace(go.Scatter(x=validation_steps, y=validation_losses, mode="lines+markers", name="validation loss",
                             line={"color": LOSS_COLOUR, "width": 2}))
    for (label, value), colour in zip(reference_lines.items(), ["grey", "#9467bd", "#2ca02c"]):
        fig.add_hline(y=value, line_dash="dot", line_color=colour,
                      annotation_text=f"{plain(label)}: {value:.3f}", annotation_position="top right")
    fig.update_layout(xaxis_title="training step", yaxis_title="loss (nats per predicted token)",
                      yaxis_rangemode="tozero", height=450, margin={"t": 30, "b": 40},
                      legend={"orientation": "h", "y": -0.2})
    return fig
