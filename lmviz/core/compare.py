"""Two versions of a text side by side: which tokens they share, what each token costs in each, and
which tokens make the difference between their losses. Pure Python on the analyses' records (no model).

Each version's loss is its own analysis's: the mean of -log p over *its own* scored positions, and the
two counts may differ (a word cut into more tokens, a token only one version has). So the difference of
the two losses is split exactly into one share per row: -log p(B) / n_B - -log p(A) / n_A, a token
that is not scored counting 0. The shares add up to loss B - loss A; the largest make the difference.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from itertools import zip_longest

from lmviz.core.numbers import LOSS_DIGITS, fmt

SAME, CHANGED, ONLY_A, ONLY_B = "same", "changed", "only in the first", "only in the second"


@dataclass(frozen=True)
class Version:
    """One version of the text as compare() reads it."""

    tokens: list[str]  # readable tokens, for the table
    keys: list  # what is matched between versions: token ids (or the readable tokens)
    nll: list[float | None]  # -log p of each token; None where it is not scored (no label there)
    loss: float  # the analysis's own loss: the mean of the nll that are not None


@dataclass(frozen=True)
class AlignedRow:
    index_a: int | None  # the token's index in version A's tokens; None: A has no token on this row
    token_a: str | None
    nll_a: float | None
    index_b: int | None
    token_b: str | None
    nll_b: float | None
    difference: float | None  # nll_b - nll_a, where both are scored
    share: float  # this row's part of loss B - loss A: nll_b / n_b - nll_a / n_a (not scored: 0)
    marker: str  # SAME, CHANGED, ONLY_A or ONLY_B

    @property
    def words(self) -> str:
        """The row in words: "Paris → Berlin", "." (the same token), "Paris (only in the first)"."""
        if self.marker == SAME:
            return self.token_a
        if self.marker == CHANGED:
            return f"{self.token_a} → {self.token_b}"
        return f"{self.token_a or self.token_b} ({self.marker})"


@dataclass(frozen=True)
class Comparison:
    rows: list[AlignedRow]
    loss_a: float  # A's loss, over A's scored_a positions
    loss_b: float  # B's loss, over B's scored_b positions
    scored_a: int
    scored_b: int
    difference: float  # loss_b - loss_a: the sum of the rows' shares
    decisive: list[AlignedRow]  # the rows with the largest |share|, largest first


def align(keys_a: list, keys_b: list) -> list[tuple[int | None, int | None, str]]:
    """(index in A, index in B, marker) per row. Matched runs side by side; inside a changed run the
    tokens are paired in order, and the longer side's extra tokens get rows of their own."""
    rows = []
    # autojunk=False: SequenceMatcher would otherwise ignore tokens frequent in a long text (".", "the")
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes():
        for i, j in zip_longest(range(a0, a1), range(b0, b1)):
            rows.append((i, j, ONLY_B if i is None else ONLY_A if j is None else SAME if op == "equal" else CHANGED))
    return rows


def compare(a: Version, b: Version, top: int = 3) -> Comparison:
    """The two versions aligned token by token, each row's -log p in A and B, and its share of the difference."""
    n_a, n_b = (sum(v is not None for v in version.nll) for version in (a, b))

    def cell(version, index, scored):  # (token, nll, nll / n) of one side of a row
        if index is None:
            return None, None, 0.0
        nll = version.nll[index]
        return version.tokens[index], nll, 0.0 if nll is None else nll / scored

    rows = []
    for i, j, marker in align(a.keys, b.keys):
        (token_a, nll_a, part_a), (token_b, nll_b, part_b) = cell(a, i, n_a), cell(b, j, n_b)
        both = None not in (nll_a, nll_b)
        rows.append(AlignedRow(i, token_a, nll_a, j, token_b, nll_b, nll_b - nll_a if both else None,
                               part_b - part_a, marker))
    decisive = sorted((r for r in rows if not shows_as_zero(r.share)), key=lambda r: -abs(r.share))[:top]
    return Comparison(rows, a.loss, b.loss, n_a, n_b, b.loss - a.loss, decisive)


def clm_version(result) -> Version:
    """A lmviz.lessons.causal_lm.ClmAnalysis as a Version: row t scores the token at t + 1, so the first token
    (the start token, when one was added) has no -log p."""
    nll = [None] * len(result.tokens)
    for row in result.rows:
        nll[row.position + 1] = row.nll
    return Version(result.tokens, result.input_ids, nll, result.loss)


def mlm_version(result, maskable: dict[int, str]) -> Version:
    """A lmviz.lessons.bert.MlmAnalysis as a Version of its maskable tokens ({position: token}, from
    maskable_positions): [CLS] and [SEP] never carry a loss, so they are left out of the table."""
    return Version(list(maskable.values()), list(maskable.values()), [result.rows[p].nll for p in maskable],
                   result.loss)


def positions_in_b(maskable_a: dict[int, str], maskable_b: dict[int, str], chosen) -> list[int]:
    """The positions of B that share a row of the alignment with the ``chosen`` positions of A: where
    B is masked, so that both versions are masked at the same places. Tokens only B has are never masked."""
    positions_a, positions_b = list(maskable_a), list(maskable_b)
    chosen = set(chosen)
    return [positions_b[j] for i, j, _ in align(list(maskable_a.values()), list(maskable_b.values()))
            if i is not None and j is not None and positions_a[i] in chosen]


def a_variant(text: str, swaps: dict[str, str]) -> str:
    """``text`` with its last word swapped: by ``swaps`` ({"Paris": "Berlin"}), else for the text's
    first word that differs from it. What the second box starts with; the learner edits it."""
    words = re.findall(r"\w+", text)
    if not words:
        return text
    last = words[-1]
    other = swaps.get(last) or next((w for w in words if w.lower() != last.lower()), last)
    start = text.rindex(last)
    return text[:start] + other + text[start + len(last):]



def shows_as_zero(value: float) -> bool:
    """0.00000 as lmviz.core.numbers writes it: float noise between two forward passes (1e-7), no difference."""
    return round(value, LOSS_DIGITS) == 0


def signed(value: float) -> str:
    """A difference, with its sign: +0.52000 costs more in the second version, -0.52000 less, 0.00000 the same."""
    if shows_as_zero(value):
        return fmt(0.0)  # never "-0.00000"
    return ("+" if value > 0 else "") + fmt(value)


def aligned_table(rows: list[AlignedRow]) -> dict[str, list]:
    """Aligned rows as the pages' table, {column: cells}. An empty cell: that version has no token on
    the row; "not scored": it has, but the token carries no loss (the first token, an unmasked one)."""
    def nll(token, value):
        return "" if token is None else "not scored" if value is None else fmt(value)

    return {
        "first version": [r.token_a or "" for r in rows],
        "-log p (first)": [nll(r.token_a, r.nll_a) for r in rows],
        "second version": [r.token_b or "" for r in rows],
        "-log p (second)": [nll(r.token_b, r.nll_b) for r in rows],
        "tokens": [r.marker for r in rows],
        "second − first": ["" if r.difference is None else signed(r.difference) for r in rows],
        "share of the difference": [signed(r.share) for r in rows],
    }


def summary(comparison: Comparison) -> str:
    """One sentence: the tokens that make the difference, with their shares (plain text: escape it)."""
    if not comparison.decisive:
        return "No token's -log p differs between the two versions: their losses are the same."
    parts = [f"“{row.words}” ({signed(row.share)})" for row in comparison.decisive]
    return f"The tokens that make most of the difference of {signed(comparison.difference)}: {', '.join(parts)}."


def how_the_shares_add_up(comparison: Comparison) -> str:
    """What "the loss" of each version is, and what a row's share is, with this comparison's counts."""
    return (f"Each loss is the mean of -log p over its own version's scored tokens: {comparison.scored_a} in "
            f"the first, {comparison.scored_b} in the second. A row's share of the difference is its -log p in "
            f"the second version / {comparison.scored_b} minus its -log p in the first / {comparison.scored_a} "
            "(a token not scored counts 0), so the shares add up to the difference.")
