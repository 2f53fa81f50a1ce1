"""The fold "A trainer's options" that the Toy example and Next token share: label smoothing, the
z-loss, logit soft-capping and each position's entropy, on the page's own logits (lmviz.core.loss_options)."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st
import torch

from lmviz.app import url_state
from lmviz.app.chrome import readable_table, term
from lmviz.app.widgets import metric_row
from lmviz.core.loss_options import PALM_Z_LOSS, LossOptions, OptionLoss, with_options
from lmviz.core.numbers import fmt, fmt_prob
from lmviz.core.text import escape_markdown

SMOOTHING = (0.0, 0.05, 0.1, 0.2, 0.5)
Z_LOSS = (0.0, PALM_Z_LOSS, 1e-3, 1e-2)
SHIFTS = (-20.0, -10.0, -5.0, 0.0, 5.0, 10.0, 20.0)
CAPS = (0.0, 30.0, 15.0, 5.0, 2.0, 1.0)  # 0: no cap. Gemma 2's 30, nanochat's 15, and small ones that bend a lot
LABEL = "A trainer's options: label smoothing, z-loss, soft-cap, entropy"


def _chosen(prefix: str) -> LossOptions:
    smoothing, z, shift, cap = st.columns(4)
    epsilon = url_state.linked(url_state.choice(f"{prefix}_smoothing", 0.1, SMOOTHING), smoothing.select_slider,
                               "Label smoothing ε", SMOOTHING, format_func=lambda e: f"{e:g}")
    coefficient = url_state.linked(url_state.choice(f"{prefix}_z_loss", PALM_Z_LOSS, Z_LOSS), z.select_slider,
                                   "z-loss coefficient", Z_LOSS, format_func=lambda c: f"{c:g}" if c else "off")
    moved = url_state.linked(url_state.choice(f"{prefix}_shift", 0.0, SHIFTS), shift.select_slider,
                             "Add to every logit", SHIFTS, format_func=lambda s: f"{s:+g}" if s else "0")
    capped = url_state.linked(url_state.choice(f"{prefix}_soft_cap", 0.0, CAPS), cap.select_slider,
                              "Soft-cap c", CAPS, format_func=lambda c: f"{c:g}" if c else "off")
    return LossOptions(label_smoothing=epsilon, z_loss=coefficient, soft_cap=capped or None, shift=moved)


def _table(result: OptionLoss, names: list[str]) -> pd.DataFrame:
    rows = result.rows
    table = {"position": [names[r.position] for r in rows], "-log p(label)": [fmt(r.nll) for r in rows],
             "entropy H": [fmt(r.entropy) for r in rows]}
    if result.options.soft_cap is not None or result.options.shift:
        table["-log p after shift and cap"] = [fmt(r.capped_nll) for r in rows]
    table["mean -log p over all C"] = [fmt(r.uniform) for r in rows]
    table[f"smoothed, ε = {result.options.label_smoothing:g}"] = [fmt(r.smoothed) for r in rows]
    table["log Z"] = [fmt(r.log_z) for r in rows]
    table["z-loss term"] = [fmt(r.z_term) for r in rows]
    return pd.DataFrame(table)


def _smoothing_said(result: OptionLoss, name: str, noun: str) -> str:
    o, r, c = result.options, result.rows[0], result.classes
    epsilon = o.label_smoothing
    target = (f"With ε = {epsilon:g} the target is no longer 1 on the true {noun} and 0 elsewhere: it is 1 − ε + ε/C "
              f"= {fmt_prob(1 - epsilon + epsilon / c)} on the true {noun} and ε/C = {fmt_prob(epsilon / c)} on each "
              f"of the other {c - 1:,} (C = {c:,}, the whole vocabulary)." if epsilon else
              f"With ε = 0 the target is 1 on the true {noun} and 0 elsewhere: the plain cross-entropy.")
    return (f"**{term('Label smoothing', 'label smoothing')}.** {target} Each position's loss is "
            f"(1 − ε)·(−log p_label) + ε·(mean of −log p over all C classes); at {escape_markdown(name)}: "
            f"(1 − {epsilon:g}) × {fmt(r.capped_nll)} + {epsilon:g} × {fmt(r.uniform)} = **{fmt(r.smoothed)}**. "
            "It is what PyTorch's `cross_entropy(logits, labels, label_smoothing=ε)` computes. The mean over every "
            "class is large wherever the model gives some classes tiny probabilities, so smoothing pulls "
            "probability away from a sure answer.")


def _z_loss_said(result: OptionLoss, unshifted: OptionLoss, name: str) -> str:
    o, r = result.options, result.rows[0]
    squared = f"{fmt(r.log_z)}²" if r.log_z >= 0 else f"({fmt(r.log_z)})²"
    said = (f"**{term('z-loss', 'z-loss')}.** log Z = log Σ e^z is the softmax's normaliser: {fmt(r.log_z)} at "
            f"{escape_markdown(name)}. The z-loss adds coefficient × (log Z)² = {o.z_loss:g} × {squared} = "
            f"{fmt(r.z_term)} there; the mean over the positions is {fmt(result.z_loss)}. ")
    if not o.shift:
        return said + ("Adding the same number to every logit changes no probability, so the cross-entropy cannot "
                       "see it, while log Z moves by that number: try “Add to every logit”.")
    gap = abs(result.cross_entropy - unshifted.cross_entropy)
    if gap < 1e-9:
        seen = (f"the cross-entropy is the same, {fmt(result.cross_entropy)}, since no probability changed; the "
                f"z-loss went from {fmt(unshifted.z_loss)} to {fmt(result.z_loss)}.")
    else:
        seen = (f"here the cross-entropy changed too, from {fmt(unshifted.cross_entropy)} to "
                f"{fmt(result.cross_entropy)}: the soft-cap bends shifted logits differently, so the probabilities "
                f"moved. The z-loss went from {fmt(unshifted.z_loss)} to {fmt(result.z_loss)}.")
    return said + f"With {o.shift:+g} added to every logit, {seen}"


def _cap_said(result: OptionLoss, raw_largest: float, name: str, noun: str) -> str:
    o, r = result.options, result.rows[0]
    if o.soft_cap is None:
        return (f"**{term('Soft-capping', 'soft-cap')}** (off). c·tanh(z/c) keeps every logit between −c and c, "
                "nearly unchanged where it is well inside: Gemma 2 caps its output at 30, nanochat at 15.")
    return (f"**{term('Soft-capping', 'soft-cap')}** at c = {o.soft_cap:g}: c·tanh(z/c) keeps every logit between "
            f"−{o.soft_cap:g} and {o.soft_cap:g}. At {escape_markdown(name)} the largest logit goes from "
            f"{fmt(raw_largest)} to {fmt(r.largest_logit)}, and −log p of the true {noun} from {fmt(r.nll)} to "
            f"{fmt(r.capped_nll)}.")


def _entropy_said(result: OptionLoss, names: list[str], noun: str) -> str:
    rows = result.rows
    more = [r for r in rows if r.nll > r.entropy]
    example = max(rows, key=lambda r: r.nll - r.entropy)
    if len(rows) == 1:
        paid = "more" if more else "no more"
        counted = (f"Here it paid {paid} than it expected: −log p(label) = {fmt(example.nll)}, "
                   f"H = {fmt(example.entropy)}.")
    elif more:
        counted = (f"It paid more than it expected at {len(more)} of the {len(rows)} positions, the most at "
                   f"{escape_markdown(names[example.position])}: −log p(label) = {fmt(example.nll)}, H = "
                   f"{fmt(example.entropy)}.")
    else:
        counted = (f"It paid less than it expected at all {len(rows)} positions: each true {noun} was among its "
                   "likelier guesses.")
    return (f"**{term('Entropy', 'entropy')}.** H = −Σ p log p over the whole vocabulary is how spread the model's "
            f"guess is, in {term('nats', 'nats')}: 0 when it is sure of one {noun}, ln C = "
            f"{fmt(math.log(result.classes))} when every {noun} is as likely. It is the −log p the model expects to "
            f"pay at a position if the next {noun} came as often as its own probabilities say; −log p(label) is what "
            f"it paid. {counted}")


def loss_options(prefix: str, logits: torch.Tensor, label_ids: list[int], names: list[str],
                 noun: str = "token") -> OptionLoss:
    """The fold's controls and numbers for ``logits`` (N, V) and the N ``label_ids``; ``names`` says each position as
    the page does, and ``noun`` what the vocabulary holds ("word" on the Toy example). Keys and link names start with
    ``prefix``."""
    with st.expander(LABEL):
        st.caption(f"What a training configuration adds to the {term('cross-entropy', 'cross-entropy')} above. The "
                   "plain loss does not change; the trainer's loss is computed from the same logits.")
        options = _chosen(prefix)
        result = with_options(logits, label_ids, options)
        unshifted = with_options(logits, label_ids, LossOptions(options.label_smoothing, options.z_loss,
                                                             options.soft_cap))
        row = metric_row()
        row.metric("Plain loss", fmt(result.plain), width="content")
        row.metric("Cross-entropy with these options", fmt(result.cross_entropy), width="content")
        row.metric("z-loss", fmt(result.z_loss), width="content")
        row.metric("Trainer's loss: the sum", fmt(result.total), width="content")
        first = names[result.rows[0].position]
        raw_largest = float((logits[result.rows[0].position].double() + options.shift).max())
        for said in (_smoothing_said(result, first, noun), _z_loss_said(result, unshifted, first),
                     _cap_said(result, raw_largest, first, noun), _entropy_said(result, names, noun)):
            st.markdown(said)
        readable_table(_table(result, names), hide_index=True)
        st.caption("The order is a trainer's: the shift (a demonstration), then the soft-cap, then the cross-entropy, "
                   "smoothed or not, and the z-loss, both from the capped logits. In nats, computed in float64.")
    return result
