"""How numbers are written, the same on every page and in the CLI."""

from __future__ import annotations

import math

LOSS_DIGITS = 5  # losses and -log p: the article's 0.86302
CHECK_DIGITS = 7  # the three-way check, where the agreement is the point
PERPLEXITY_DIGITS = 4


def fmt(value: float, digits: int = LOSS_DIGITS) -> str:
    if math.isnan(value):
        return "not a number"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.{digits}f}"


def fmt_prob(p: float) -> str:
    """Probabilities below 0.001 in scientific notation, so that none shows as 0.000000."""
    return f"{p:.6f}" if p >= 1e-3 or p == 0 else f"{p:.3e}"
