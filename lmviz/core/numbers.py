"""How numbers are written, the same on every page, chart and in the CLI.

- losses, -log p, logits: 5 decimals (``fmt``), as the article's 0.86302;
- probabilities: 6 decimals, or 3 significant digits in scientific notation below 0.001
  (``fmt_prob``), so that none shows as 0;
- perplexity: 4 decimals (``PERPLEXITY_DIGITS``);
- gradients: as probabilities, with their sign (``fmt_grad``): an entry of ∂L/∂z is p/N or (p − 1)/N;
- a gradient's length over many weights, ‖g‖: 4 significant digits (``fmt_norm``);
- only in the tables whose point is that several computations of one loss agree:
  7 decimals (``CHECK_DIGITS``), and their gaps as ``fmt_gap`` (1.2e-08).
"""

from __future__ import annotations

import math

LOSS_DIGITS = 5  # losses and -log p: the article's 0.86302
CHECK_DIGITS = 7  # the three-way check, where the agreement is the point
PERPLEXITY_DIGITS = 4
NORM_DIGITS = 4  # a gradient's length (fmt_norm): significant digits


def fmt(value: float, digits: int = LOSS_DIGITS) -> str:
    if math.isnan(value):
        return "not a number"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # -1e-17 is 0.00000, not -0.00000


def fmt_signed(value: float, digits: int = LOSS_DIGITS) -> str:
    """A number whose sign is the point (an advantage, a change): + or − written, 0 without one."""
    return f"{value:+.{digits}f}" if value else fmt(0.0, digits)


def fmt_prob(p: float) -> str:
    """Probabilities below 0.001 in scientific notation, so that none shows as 0.000000."""
    return f"{p:.6f}" if p >= 1e-3 or p == 0 else f"{p:.3e}"


def fmt_grad(g: float) -> str:
    """A gradient entry, written as a probability is (it is p/N or (p − 1)/N) with its sign: 6 decimals, or 3
    significant digits in scientific notation below 0.001 in size, so that none shows as 0."""
    return f"{g:.6f}" if abs(g) >= 1e-3 or g == 0 else f"{g:.3e}"


def fmt_norm(value: float) -> str:
    """The length of a gradient over many weights: NORM_DIGITS significant digits. A float32 backward pass gives
    each weight's gradient to about float32's precision, so its length is right to ~1e-6, not to the last of a
    loss's 5 decimals (SmolLM2 on "The capital of France is Paris.": 31.36463 from the float32 gradient, 31.36467
    from a float64 pass)."""
    return f"{value:.{NORM_DIGITS}g}" if math.isfinite(value) else fmt(value)


def fmt_gap(value: float) -> str:
    """A difference between two computations of the same number: its order of magnitude is the point."""
    return f"{value:.1e}"
