"""The room's answers to one question, as the projector shows them after the teacher reveals them: a bar per answer,
one per vote when the question had a second vote, each bar with its count written on it and the right answers named
on the axis ("✓ right"), so that neither the answer nor the vote is told by colour alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from lmviz.figures.palettes import BLUE, ORANGE
from lmviz.figures.plots import CHART_FONT_PX, plain, readable

# Vote 1 solid, vote 2 hatched and in another colour: told apart by the pattern and the legend as well as the hue.
VOTE_STYLES = ({"color": BLUE, "pattern": {"shape": ""}}, {"color": ORANGE, "pattern": {"shape": "/", "solidity": 0.4}})
RIGHT_MARK = "✓ right"
PARTLY_RIGHT_MARK = "✓ partly right"  # a bin of typed numbers that straddles the tolerance's edge


@dataclass(frozen=True)
class Bar:
    answer: str  # a choice, or a typed number written at the question's digits
    count: int
    right: int  # how many of ``count`` are right


def answer_label(answer: str, right: int, count: int, is_answer: bool) -> str:
    """The axis label under an answer's bars: the answer, and on a line of its own whether it is right."""
    if is_answer or (count and right == count):
        mark = RIGHT_MARK
    elif right:
        mark = PARTLY_RIGHT_MARK
    else:
        return plain(answer)
    return f"{plain(answer)}<br><b>{mark}</b>"


def vote_bars(votes: list[tuple[str, list[Bar]]], answers: list[str], right_answers: set[str], title: str,
              font_px: int = CHART_FONT_PX, height: int = 360) -> go.Figure:
    """One bar per answer in ``answers`` (in that order) for each vote (name, its bars); an answer a vote did not
    get counts 0 there. ``right_answers``: the answers marked right whatever their counts (a choice question's
    answer); a typed number's bin is marked from its own ``right`` count."""
    tallies = [{bar.answer: bar for bar in bars} for _, bars in votes]
    labels = []
    for answer in answers:
        count = sum(t[answer].count for t in tallies if answer in t)
        right = sum(t[answer].right for t in tallies if answer in t)
        labels.append(answer_label(answer, right, count, answer in right_answers))
    fig = go.Figure()
    for (name, _), tally, style in zip(votes, tallies, VOTE_STYLES):
        counts = [tally[a].count if a in tally else 0 for a in answers]
        fig.add_trace(go.Bar(x=labels, y=counts, name=plain(name), text=[str(c) for c in counts],
                             textposition="outside", cliponaxis=False, marker={**style, "line": {"width": 0}},
                             hovertemplate="%{x}: %{y}<extra>" + plain(name) + "</extra>"))
    top = max([bar.count for _, bars in votes for bar in bars] + [1])
    fig.update_layout(title_text=plain(title), barmode="group", height=height, showlegend=len(votes) > 1,
                      legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"},
                      margin={"t": 40, "b": 40, "l": 50})
    # whole numbers only: Plotly's own ticks at 0.2 apart read "0 0 0 1 1 1" once written as counts
    fig.update_yaxes(title_text="answers", range=[0, top * 1.2], tick0=0, dtick=max(1, math.ceil(top / 5)),
                     tickformat="d")
    fig.update_xaxes(type="category")
    return readable(fig, font_px)
