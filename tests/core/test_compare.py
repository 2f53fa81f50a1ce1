"""lmviz.core.compare: the alignment on hand-made sequences, and both versions' losses and their difference
against the models' own logits through torch's cross-entropy; then both pages' comparison against the library."""

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.compare import (
    CHANGED,
    ONLY_A,
    ONLY_B,
    SAME,
    SHARE_COLUMN,
    SWAP_GROUPS,
    WORD_SWAPS,
    Version,
    a_variant,
    align,
    clm_version,
    compare,
    how_the_shares_add_up,
    mlm_version,
    positions_in_b,
    signed,
    summary,
)
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.lessons.bert import analyse_mlm_at, maskable_positions
from lmviz.lessons.causal_lm import analyse_clm
from tests.helpers import open_page


@pytest.mark.parametrize("a, b, expected", [
    ("abc", "abc", [(0, 0, SAME), (1, 1, SAME), (2, 2, SAME)]),
    ("abc", "axc", [(0, 0, SAME), (1, 1, CHANGED), (2, 2, SAME)]),
    ("abc", "abxc", [(0, 0, SAME), (1, 1, SAME), (None, 2, ONLY_B), (2, 3, SAME)]),
    ("abc", "ac", [(0, 0, SAME), (1, None, ONLY_A), (2, 1, SAME)]),
    # a changed run of unequal lengths: paired in order, the extra token on its own row
    ("abc", "axyc", [(0, 0, SAME), (1, 1, CHANGED), (None, 2, ONLY_B), (2, 3, SAME)]),
    ("xabc", "abc", [(0, None, ONLY_A), (1, 0, SAME), (2, 1, SAME), (3, 2, SAME)]),
    ("", "ab", [(None, 0, ONLY_B), (None, 1, ONLY_B)]),
])
def test_align(a, b, expected):
    assert align(list(a), list(b)) == expected


def test_the_difference_splits_exactly_into_the_tokens_part_and_the_counts_part():
    # A scores 3 tokens (sum 6, mean 2), B scores 4 (sum 10, mean 2.5): the means are over different counts.
    # By hand: the tokens' part is (10 - 6) / 4 = 1 (x adds 5, c changes by -1, b and d by 0); the count's part
    # is A's sum over B's count minus over its own, 6 / 4 - 6 / 3 = -0.5; together 0.5 = 2.5 - 2.
    a = Version(list("abcd"), list("abcd"), [None, 1.0, 2.0, 3.0], 2.0)
    b = Version(list("abxcd"), list("abxcd"), [None, 1.0, 5.0, 1.0, 3.0], 2.5)
    result = compare(a, b)
    assert [(r.token_a, r.token_b, r.marker) for r in result.rows] == [
        ("a", "a", SAME), ("b", "b", SAME), (None, "x", ONLY_B), ("c", "c", SAME), ("d", "d", SAME)]
    assert (result.scored_a, result.scored_b, result.difference, result.total_a) == (3, 4, 0.5, 6.0)
    assert [r.difference for r in result.rows] == [None, 0.0, None, -1.0, 0.0]
    assert [r.share for r in result.rows] == pytest.approx([0, 0, 5 / 4, -1 / 4, 0])
    assert (result.from_tokens, result.from_count) == pytest.approx((1.0, -0.5))
    assert result.from_tokens + result.from_count == pytest.approx(result.difference, abs=1e-15)
    # b and d cost the same in both: they are no reason for the difference (the old shares, -log p / n in each
    # version, gave d 3/4 - 3/3 and named it), and c, whose -log p changed most, is the one named for it
    assert [r.words for r in result.decisive] == ["x (only in the second)", "c"]
    assert result.most_changed.words == "c"
    said = summary(result)
    assert ("The difference of +0.50000 has two parts. Tokens whose -log p changed: +1.00000, each change divided "
            "by 4, the second version's count; the largest shares: “x (only in the second)” (+1.25000), “c” "
            "(-0.25000). Scoring 4 tokens instead of 3: -0.50000, the first version's total -log p, 6.00000, divided "
            "by 4 instead of 3. Of the rows that both versions score, “c” changed most: -log p 2.00000 → 1.00000 "
            "(-1.00000).") == said
    assert "“d”" not in said and "“b”" not in said
    assert "3 in the first, 4 in the second" in how_the_shares_add_up(result)


def test_the_summary_names_the_token_that_changed_most_even_outside_the_largest_shares():
    # x and y, only in B, have the largest shares; c, in both, changed most and must still be named
    a = Version(list("ac"), list("ac"), [None, 2.0], 2.0)
    b = Version(list("axyc"), list("axyc"), [None, 9.0, 8.0, 1.0], 6.0)
    result = compare(a, b, top=2)
    assert [r.words for r in result.decisive] == ["x (only in the second)", "y (only in the second)"]
    assert result.from_tokens == pytest.approx((18.0 - 2.0) / 3) and result.from_count == pytest.approx(2 / 3 - 2)
    assert "“c” changed most: -log p 2.00000 → 1.00000 (-1.00000)" in summary(result)


def test_with_equal_counts_the_whole_difference_is_the_tokens():
    a = Version(list("abc"), list("abc"), [None, 1.0, 2.0], 1.5)
    b = Version(list("abx"), list("abx"), [None, 1.0, 4.0], 2.5)
    result = compare(a, b)
    assert (result.from_tokens, result.from_count) == (1.0, 0.0)
    assert summary(result) == ("Both versions score 2 tokens, so the whole difference of +1.00000 comes from tokens "
                               "whose -log p changed, each change divided by 2; the largest shares: “c → x” "
                               "(+1.00000). Of the rows that both versions score, “c → x” changed most: -log p "
                               "2.00000 → 4.00000 (+2.00000).")
    assert summary(compare(a, a)) == "No token's -log p differs between the two versions: their losses are the same."


def test_a_sum_of_rounded_parts_that_misses_the_rounded_difference_is_said():
    # A: one token, 2.000008; B: it and another, 2.246912. Tokens' part 2.246912 / 2 = 1.123456 (shown 1.12346),
    # count's part 2.000008 / 2 - 2.000008 = -1.000004 (shown -1.00000): shown, they add up to 0.12346, while
    # the difference, 0.123452, shows as 0.12345
    a = Version(list("ab"), list("ab"), [None, 2.000008], 2.000008)
    b = Version(list("abc"), list("abc"), [None, 2.000008, 2.246912], (2.000008 + 2.246912) / 2)
    result = compare(a, b)
    assert (fmt(result.from_tokens), fmt(result.from_count), signed(result.difference)) == (
        "1.12346", "-1.00000", "+0.12345")
    note = " Each figure is rounded, so adding them up can miss the difference in the last digit."
    assert note in summary(result)
    b = Version(list("abc"), list("abc"), [None, 2.000008, 2.0], 2.000004)  # -0.000004 and 0.0 add up as shown
    assert "rounded" not in summary(compare(a, b))
    # equal counts: the share is summed from -log p (+0.013864, shown +0.01386), the difference is of the two
    # losses, which a model computes in float32 (+0.013866, shown +0.01387)
    a = Version(list("ab"), list("ab"), [None, 1.0], 1.0)
    b = Version(list("ab"), list("ab"), [None, 1.013864], 1.013866)
    assert note in summary(compare(a, b))
    assert note not in summary(compare(a, Version(list("ab"), list("ab"), [None, 1.013864], 1.013864)))


def test_differences_are_signed_and_float_noise_makes_none():
    assert (signed(0.5), signed(-0.5), signed(-1e-7), signed(4e-6)) == ("+0.50000", "-0.50000", "0.00000", "0.00000")
    # two forward passes of the same prefix can differ by ~1e-7 (batched, padded): that token is no reason
    a = Version(list("abc"), list("abc"), [None, 1.0, 2.0], 1.5)
    b = Version(list("abx"), list("abx"), [None, 1.0 + 1e-7, 4.0], 2.5 + 5e-8)
    assert [r.words for r in compare(a, b).decisive] == ["c → x"]


def test_a_variant_changes_one_word_for_another_of_its_kind():
    assert a_variant("The capital of France is Paris.") == "The capital of France is Berlin."
    # the teacher's rehearsal: the text's first word took the place of its last, "…apple pie in My."
    assert a_variant("My grandmother bakes apple pie in autumn.") == "My grandmother bakes apple pie in winter."
    assert a_variant("He said this is his hat.") == "He said this was his hat."  # "is", not the "is" in "this"
    assert a_variant("Is it far?") == "Was it far?"  # the capital kept
    assert a_variant("the cat sat on the mat .") == "the dog sat on the mat ."  # one of lmviz's stories' animals
    assert a_variant("Hello world") == "Hello world"  # no word it knows: the text itself, never a word moved
    assert a_variant("...") == "..."


def test_every_swap_stays_in_its_group_and_every_word_has_one():
    for group in SWAP_GROUPS:
        for word in group:
            assert WORD_SWAPS[word] in group and WORD_SWAPS[word] != word
    assert len(WORD_SWAPS) == sum(len(group) for group in SWAP_GROUPS)  # no word in two groups


def reference_nll(model, ids: list[int]) -> torch.Tensor:
    """-log p of every token after the first: torch's cross-entropy on the model's own logits, labels shifted."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
    return F.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]), reduction="none")  # (T - 1,)


@pytest.mark.parametrize("add_bos", [False, True])
def test_clm_comparison_equals_cross_entropy_row_by_row(tiny_loaded, add_bos):
    first, second = "the cat sat on a mat", "a the dog sat on the big mat"
    a, b = analyse_clm(tiny_loaded, first, add_bos=add_bos), analyse_clm(tiny_loaded, second, add_bos=add_bos)
    result = compare(clm_version(a), clm_version(b))
    start = ["<|endoftext|>"] if add_bos else []
    # what a reader must see, row by row: a misaligned table fails here
    expected = [(s, s, SAME) for s in start] + [
        (None, "a", ONLY_B), ("the", "the", SAME), ("cat", "dog", CHANGED), ("sat", "sat", SAME), ("on", "on", SAME),
        ("a", "the", CHANGED), (None, "big", ONLY_B), ("mat", "mat", SAME)]
    assert [(r.token_a, r.token_b, r.marker) for r in result.rows] == expected
    nll_a, nll_b = reference_nll(tiny_loaded.model, a.input_ids), reference_nll(tiny_loaded.model, b.input_ids)
    for row in result.rows:  # each -log p is the one of that very token of its own version (index - 1: shifted)
        for index, nll, reference in ((row.index_a, row.nll_a, nll_a), (row.index_b, row.nll_b, nll_b)):
            assert nll is None if index in (None, 0) else nll == pytest.approx(reference[index - 1].item(), abs=1e-5)
    assert (result.scored_a, result.scored_b) == (len(nll_a), len(nll_b))
    assert result.loss_a == pytest.approx(nll_a.mean().item(), abs=1e-6)
    assert result.loss_b == pytest.approx(nll_b.mean().item(), abs=1e-6)
    assert result.difference == pytest.approx((nll_b.mean() - nll_a.mean()).item(), abs=1e-6)
    # the split, computed again from torch's -log p in float64: each row's change over B's count, and A's sum
    # over B's count minus over A's
    sum_a, sum_b, n_a, n_b = nll_a.double().sum().item(), nll_b.double().sum().item(), len(nll_a), len(nll_b)
    for row in result.rows:
        cost_a = 0.0 if row.index_a in (None, 0) else nll_a[row.index_a - 1].item()
        cost_b = 0.0 if row.index_b in (None, 0) else nll_b[row.index_b - 1].item()
        assert row.share == pytest.approx((cost_b - cost_a) / n_b, abs=1e-6)
    assert result.from_tokens == pytest.approx((sum_b - sum_a) / n_b, abs=1e-6)
    assert result.from_count == pytest.approx(sum_a / n_b - sum_a / n_a, abs=1e-6)
    assert result.from_tokens + result.from_count == pytest.approx(result.difference, abs=1e-6)
    biggest = max(result.rows, key=lambda r: abs(r.share))
    assert result.decisive[0] == biggest
    both = [r for r in result.rows if None not in (r.nll_a, r.nll_b)]
    assert result.most_changed == max(both, key=lambda r: abs(nll_b[r.index_b - 1] - nll_a[r.index_a - 1]))


def reference_mlm_nll(loaded, text: str, positions: list[int]) -> torch.Tensor:
    """-log p of the original tokens at ``positions``, [MASK] there: the whole BertForPreTraining's
    prediction logits (not lmviz's heads or mlm_loss) through torch's cross-entropy."""
    ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"]  # (1, T)
    masked = ids.clone()
    masked[0, positions] = loaded.tokenizer.mask_token_id
    with torch.no_grad():
        logits = loaded.model(input_ids=masked).prediction_logits[0]  # (T, V)
    return F.cross_entropy(logits[positions], ids[0, positions], reduction="none")


def test_mlm_comparison_masks_the_same_aligned_tokens_and_equals_cross_entropy(tiny_bert_loaded):
    tokenizer = tiny_bert_loaded.tokenizer
    first, second = "anna and ben went to the park .", "anna went to the big park with ben ."
    maskable_a, maskable_b = maskable_positions(tokenizer, first), maskable_positions(tokenizer, second)
    chosen = [p for p, token in maskable_a.items() if token in ("and", "the", "park")]
    mapped = positions_in_b(maskable_a, maskable_b, chosen)
    # "and" is only in the first version; "the" and "park" are masked in both, where they are in each
    assert [maskable_b[p] for p in mapped] == ["the", "park"]
    a, b = analyse_mlm_at(tiny_bert_loaded, first, chosen), analyse_mlm_at(tiny_bert_loaded, second, mapped)
    result = compare(mlm_version(a, maskable_a), mlm_version(b, maskable_b))
    scored = [(r.token_a, r.token_b) for r in result.rows if r.nll_a is not None or r.nll_b is not None]
    assert scored == [("and", None), ("the", "the"), ("park", "park")]
    ref_a = reference_mlm_nll(tiny_bert_loaded, first, chosen)
    ref_b = reference_mlm_nll(tiny_bert_loaded, second, mapped)
    assert [r.nll_a for r in result.rows if r.nll_a is not None] == pytest.approx(ref_a.tolist(), abs=1e-5)
    assert [r.nll_b for r in result.rows if r.nll_b is not None] == pytest.approx(ref_b.tolist(), abs=1e-5)
    assert (result.scored_a, result.scored_b) == (3, 2)  # each mean over its own scored positions
    assert result.loss_a == pytest.approx(ref_a.mean().item(), abs=1e-5)
    assert result.loss_b == pytest.approx(ref_b.mean().item(), abs=1e-5)
    assert result.difference == pytest.approx((ref_b.mean() - ref_a.mean()).item(), abs=1e-5)
    sum_a, sum_b = ref_a.double().sum().item(), ref_b.double().sum().item()
    assert result.from_tokens == pytest.approx((sum_b - sum_a) / 2, abs=1e-5)  # "and" leaves: its -log p counts 0
    assert result.from_count == pytest.approx(sum_a / 2 - sum_a / 3, abs=1e-5)
    assert result.from_tokens + result.from_count == pytest.approx(result.difference, abs=1e-5)


# The pages: the numbers on screen are the library's, the library's are the reference's (above and here).

def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def comparison_table(at):
    return next(d.value for d in at.dataframe if SHARE_COLUMN in d.value.columns)


def shows_the_comparison(at, expected) -> None:
    """The three numbers, the sentence naming the tokens, and the code of compare under "Show the code"."""
    shown = metrics(at)
    assert shown["Loss, first version"] == fmt(expected.loss_a)
    assert shown["Loss, second version"] == fmt(expected.loss_b)
    assert shown["Difference: second − first"] == signed(expected.difference)
    assert escape_markdown(summary(expected)) in [m.value for m in at.markdown]
    assert any("def compare(" in c.value for c in at.code)


def the_main_box_says(at, key: str, text: str) -> list[str]:
    at.text_area(key=key).input(text).run()
    return [w.value for w in at.warning]


@pytest.mark.parametrize("bad", ["   ", "Hi"])  # nothing at all; one token, so nothing to predict
def test_your_sentence_compares_two_versions(bundled, bad):
    at = open_page("app_pages/your_sentence.py")
    at.checkbox(key="sentence_compare").check().run()
    first, second = at.text_area(key="text").value, at.text_area(key="sentence_b").value
    assert second == "The capital of France is Berlin."  # the example, pre-filled
    a, b = analyse_clm(bundled, first), analyse_clm(bundled, second)
    expected = compare(clm_version(a), clm_version(b))
    ref_a, ref_b = reference_nll(bundled.model, a.input_ids), reference_nll(bundled.model, b.input_ids)
    assert expected.loss_a == pytest.approx(ref_a.mean().item(), abs=1e-5)
    assert expected.loss_b == pytest.approx(ref_b.mean().item(), abs=1e-5)
    assert not at.exception and not at.warning and not at.error
    shows_the_comparison(at, expected)
    assert metrics(at)["Loss: mean(-log p)"] == metrics(at)["Loss, first version"]
    table = comparison_table(at)
    assert table["tokens"].tolist() == [SAME] * 5 + [CHANGED, SAME]
    assert table["first version"].tolist() == a.tokens and table["second version"].tolist() == b.tokens
    assert table["-log p (second)"].tolist() == ["not scored"] + [fmt(r.nll) for r in b.rows]
    assert escape_markdown("“␣Paris → ␣Berlin”") in escape_markdown(summary(expected))
    assert summary(expected).index("Paris") < summary(expected).index("“.”")  # the largest share first

    at.text_area(key="sentence_b").input(bad).run()
    said = [w.value for w in at.warning]
    assert len(said) == 1 and "Difference: second − first" not in metrics(at)
    assert metrics(at)["Loss: mean(-log p)"] == fmt(a.loss)  # the first version stays
    assert said == the_main_box_says(at, "text", bad)  # the very sentence the main box gives


def test_masked_lm_compares_two_versions_masked_at_the_same_places():
    from lmviz.models.loading import load_bert

    loaded = load_bert()  # the page's model: the tests' hub cache is empty, so not bert-base-uncased
    at = open_page("app_pages/masked_lm.py")
    at.radio(key="mlm_mode").set_value("the tokens I choose (fill in the blank)").run()
    first = at.text_area(key="mlm_text").value
    second = first.replace("station", "park")
    maskable_a, maskable_b = maskable_positions(loaded.tokenizer, first), maskable_positions(loaded.tokenizer, second)
    chosen = [p for p, token in maskable_a.items() if token in ("station", "platform")]
    at.multiselect(key="mlm_positions").set_value(chosen).run()
    at.toggle(key="mlm_compare").set_value(True).run()
    at.text_area(key="mlm_text_b").input(second).run()
    assert not at.exception and not at.error
    mapped = positions_in_b(maskable_a, maskable_b, chosen)
    assert [maskable_b[p] for p in mapped] == ["park", "park", "platform"]
    a, b = analyse_mlm_at(loaded, first, chosen), analyse_mlm_at(loaded, second, mapped)
    expected = compare(mlm_version(a, maskable_a), mlm_version(b, maskable_b))
    ref_a, ref_b = reference_mlm_nll(loaded, first, chosen), reference_mlm_nll(loaded, second, mapped)
    assert expected.loss_a == pytest.approx(ref_a.mean().item(), abs=1e-5)
    assert expected.loss_b == pytest.approx(ref_b.mean().item(), abs=1e-5)
    shows_the_comparison(at, expected)
    assert metrics(at)["Masked-LM loss"] == metrics(at)["Loss, first version"]
    table = comparison_table(at)  # only the masked rows
    assert list(zip(table["first version"], table["second version"], table["tokens"])) == [
        ("station", "park", CHANGED), ("station", "park", CHANGED), ("platform", "platform", SAME)]
    assert table["-log p (second)"].tolist() == [fmt(v) for v in ref_b.tolist()]

    at.text_area(key="mlm_text_b").input("").run()
    said = [w.value for w in at.warning]
    assert len(said) == 1 and "Difference: second − first" not in metrics(at)
    assert said == the_main_box_says(at, "mlm_text", "")  # the very sentence the main box gives
