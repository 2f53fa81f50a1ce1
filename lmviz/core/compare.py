"""Two versions of a text side by side: which tokens they share, what each token costs in each, and
where the difference between their losses comes from. Pure Python on the analyses' records (no model).

Each version's loss is its own analysis's: the mean of -log p over *its own* scored positions, and the
two counts n_A and n_B may differ (a word cut into more tokens, a token only one version has). The
difference of the losses, S_B / n_B - S_A / n_A with S the sum of -log p, is split exactly in two:

- the tokens' part, (S_B - S_A) / n_B: one part per row, its change of -log p divided by n_B (a token that
  a version lacks or does not score counts 0), so a row whose -log p did not change has none;
- the count's part, S_A / n_B - S_A / n_A: the first version's own sum, divided by the other count.

With equal counts the count's part is 0. Splitting by the share nll_B / n_B - nll_A / n_A instead would give
a token whose -log p did not change a share of the difference, which is only the change of divisor.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from itertools import zip_longest

from lmviz.core.corpus import ANIMALS, FEELINGS, FOODS, PLACES
from lmviz.core.numbers import LOSS_DIGITS, fmt

SAME, CHANGED, ONLY_A, ONLY_B = "same", "changed", "only in the first", "only in the second"
SHARE_COLUMN = "share: change / second's count"  # the aligned table's column of the rows' shares


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
    share: float  # this row's part of the tokens' part: (nll_b - nll_a) / n_b, a token not scored counting 0
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
    difference: float  # loss_b - loss_a = from_tokens + from_count
    total_a: float  # S_A: the sum of A's -log p, which the count's part divides by n_b instead of n_a
    from_tokens: float  # (S_B - S_A) / n_b: the sum of the rows' shares
    from_count: float  # S_A / n_b - S_A / n_a: 0 when both versions score as many tokens
    decisive: list[AlignedRow]  # the rows with the largest |share|, largest first
    most_changed: AlignedRow | None  # of the rows both versions score, the one whose -log p changed most


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
    """The two versions aligned token by token, each row's -log p in A and B, and the difference of the losses
    split into the rows' shares (their changes of -log p) and the part of the different counts."""
    n_a, n_b = (sum(v is not None for v in version.nll) for version in (a, b))
    if not (n_a and n_b):
        raise ValueError("each version needs at least one scored token: a mean over none is no loss")
    total_a = sum(v for v in a.nll if v is not None)

    def cell(version, index):  # (token, nll) of one side of a row
        return (None, None) if index is None else (version.tokens[index], version.nll[index])

    rows = []
    for i, j, marker in align(a.keys, b.keys):
        (token_a, nll_a), (token_b, nll_b) = cell(a, i), cell(b, j)
        change = (nll_b or 0.0) - (nll_a or 0.0)  # a token a version lacks, or does not score, counts 0
        both = None not in (nll_a, nll_b)
        rows.append(AlignedRow(i, token_a, nll_a, j, token_b, nll_b, change if both else None, change / n_b, marker))
    decisive = sorted((r for r in rows if not shows_as_zero(r.share)), key=lambda r: -abs(r.share))[:top]
    most_changed = max((r for r in rows if r.difference is not None), key=lambda r: abs(r.difference), default=None)
    return Comparison(rows, a.loss, b.loss, n_a, n_b, b.loss - a.loss, total_a, sum(r.share for r in rows),
                      total_a / n_b - total_a / n_a, decisive, most_changed)


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


# What a second version starts with: the text with one word changed for another of its kind, so that it stays a
# sentence: a tense, a pronoun, an opposite, a season, the default sentence's city, and the places, animals, foods and
# feelings of lmviz's own stories (Masked LM's texts). Each group is a cycle: a word becomes the next of its group.
# Ambiguous words are left out ("her" is his or him; "spring" is a verb too). The rule before put the text's first
# word in place of its last, and a learner's "…apple pie in autumn." became "…apple pie in My.".
SWAP_GROUPS = (("Paris", "Berlin"), ("is", "was"), ("are", "were"), ("has", "had"), ("he", "she"), ("big", "small"),
               ("hot", "cold"), ("good", "bad"), ("always", "never"), ("before", "after"), ("first", "last"),
               ("day", "night"), ("morning", "evening"), ("summer", "autumn", "winter"), ("boy", "girl"),
               ("man", "woman"), ("love", "hate"), ("loves", "hates"), tuple(PLACES), tuple(ANIMALS), tuple(FOODS),
               tuple(FEELINGS))
WORD_SWAPS = {word: group[(k + 1) % len(group)] for group in SWAP_GROUPS for k, word in enumerate(group)}


def a_variant(text: str, swaps: dict[str, str] = WORD_SWAPS) -> str:
    """``text`` with the last of its words that ``swaps`` knows changed for its swap ("Paris" → "Berlin", "is" →
    "was"; a capital kept: "He" → "She"), or ``text`` itself when it has none. What the second box starts with;
    the learner edits it."""
    for word in reversed(list(re.finditer(r"\w+", text))):
        found = word.group()
        other = swaps.get(found) or swaps.get(found.lower())
        if other is not None:
            if found[0].isupper() and found not in swaps:
                other = other[0].upper() + other[1:]
            return text[:word.start()] + other + text[word.end():]
    return text


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
        SHARE_COLUMN: [signed(r.share) for r in rows],
    }


def summary(comparison: Comparison) -> str:
    """Where the difference comes from, in words and numbers: the tokens whose -log p changed (the largest
    shares), the different counts, and the row whose -log p changed most (plain text: escape it)."""
    c = comparison
    if not c.decisive and c.scored_a == c.scored_b:
        return "No token's -log p differs between the two versions: their losses are the same."
    largest = (f"; the largest shares: {', '.join(f'“{r.words}” ({signed(r.share)})' for r in c.decisive)}"
               if c.decisive else "; none did")
    if c.scored_a == c.scored_b:
        said = (f"Both versions score {c.scored_a} tokens, so the whole difference of {signed(c.difference)} comes "
                f"from tokens whose -log p changed, each change divided by {c.scored_b}{largest}.")
    else:
        said = (f"The difference of {signed(c.difference)} has two parts. Tokens whose -log p changed: "
                f"{signed(c.from_tokens)}, each change divided by {c.scored_b}, the second version's count{largest}. "
                f"Scoring {c.scored_b} tokens instead of {c.scored_a}: {signed(c.from_count)}, the first version's "
                f"total -log p, {fmt(c.total_a)}, divided by {c.scored_b} instead of {c.scored_a}.")
    if not adds_up_as_shown(c):
        said += " Each figure is rounded, so adding them up can miss the difference in the last digit."
    row = c.most_changed
    if row is None:
        return said
    if shows_as_zero(row.difference):
        return said + " No row that both versions score changed its -log p."
    # a row whose token changed ("Paris → Berlin") is one row: its -log p went from one token's to the other's
    return (said + f" Of the rows that both versions score, “{row.words}” changed most: -log p {fmt(row.nll_a)} → "
                   f"{fmt(row.nll_b)} ({signed(row.difference)}).")


def adds_up_as_shown(comparison: Comparison) -> bool:
    """Whether the figures a learner adds up, each rounded as shown (the two parts, or the table's shares and
    the count's part), give the difference as shown. The difference is the two losses' own, the parts are
    summed from each token's -log p: rounded, they can differ in the last digit."""
    c = comparison
    count = round(c.from_count, LOSS_DIGITS)
    sums = (round(c.from_tokens, LOSS_DIGITS) + count, sum(round(r.share, LOSS_DIGITS) for r in c.rows) + count)
    return all(signed(total) == signed(c.difference) for total in sums)


def how_the_shares_add_up(comparison: Comparison) -> str:
    """What "the loss" of each version is, and what a row's share is, with this comparison's counts."""
    c = comparison
    if c.scored_a == c.scored_b:
        counts, rest = f"{c.scored_a} in each", "the shares add up to the difference."
    else:
        counts = f"{c.scored_a} in the first, {c.scored_b} in the second"
        rest = ("a token whose -log p did not change has none. The shares add up to the tokens' part of the "
                f"difference; the rest is the count's part: the first version's total -log p divided by {c.scored_b} "
                f"minus the same total divided by {c.scored_a}.")
    return (f"Each loss is the mean of -log p over its own version's scored tokens: {counts}. A row's share is its "
            f"change of -log p, second − first, divided by {c.scored_b} (a token a version lacks or does not score "
            "counts 0); " + rest)
