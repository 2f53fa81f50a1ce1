"""Your sentence with "Predict first" and "Compare with another version" together: nothing on the page gives the
prediction away before it is made, and the comparison's split of the difference is the one computed from the
model's own logits."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.compare import SHARE_COLUMN, clm_version, compare, how_the_shares_add_up, summary
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.lessons.causal_lm import analyse_clm
from tests.helpers import answer_question, open_page

FIRST = "The capital of France is Paris."  # the page's own first text


def everything_on(at) -> str:
    """Every element of the page, main area and sidebar, as text: its whole protobuf message (labels, help, values,
    captions, a chart's data) and, for a table, its cells, which the message holds as Arrow bytes."""
    parts = []

    def visit(node):
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        if getattr(node, "type", "") in ("arrow_data_frame", "dataframe", "table"):
            parts.append(node.value.to_csv())
        for child in getattr(node, "children", {}).values():
            visit(child)

    visit(at.main)
    visit(at.sidebar)
    return "\n".join(parts)


def giveaways(nll: float) -> list[str]:
    """How a -log p could be written: as the page writes it, and cut to 4 decimals (a chart's 11.539291...)."""
    return [fmt(nll), f"{math.floor(nll * 1e4) / 1e4:.4f}"]


def test_predict_first_hides_the_comparisons_per_token_losses_until_the_prediction(bundled):
    at = open_page("app_pages/your_sentence.py")
    at.checkbox(key="sentence_predict").check().run()
    at.checkbox(key="sentence_compare").check().run()
    assert not at.exception and not at.error
    a = analyse_clm(bundled, FIRST)
    b = analyse_clm(bundled, at.text_area(key="sentence_b").value)
    expected = compare(clm_version(a), clm_version(b))
    shown = everything_on(at)
    assert fmt(a.loss) in shown  # the page was read: its whole-text loss is there, and stays
    # no -log p of either version: the second shares the first's tokens up to the change, and their costs
    leaked = [f"{row.target_token} {text}" for row in a.rows + b.rows for text in giveaways(row.nll) if text in shown]
    assert not leaked
    assert escape_markdown(summary(expected)) not in shown
    assert not [d for d in at.dataframe if SHARE_COLUMN in d.value.columns]
    aligned = next(d.value for d in at.dataframe if "second version" in d.value.columns)
    assert list(aligned.columns) == ["first version", "second version", "tokens"]  # the tokens side by side, only
    assert any("appear once you make your prediction" in c.value for c in at.caption)
    # section 4 speaks of a table that is not on the page yet: it says when it comes
    assert any("-log p values that section 2's table shows once you make your prediction" in m.value
               for m in at.markdown)
    help_text = at.checkbox(key="sentence_predict").help
    assert "each token's -log p in both versions" in help_text and "where their difference comes from" in help_text

    answer_question(at, "sentence/highest", reveal=True)
    assert not at.exception
    assert escape_markdown(summary(expected)) in [m.value for m in at.markdown]
    table = next(d.value for d in at.dataframe if SHARE_COLUMN in d.value.columns)
    assert table["-log p (first)"].tolist() == ["not scored"] + [fmt(r.nll) for r in a.rows]
    assert not any("appear once you make your prediction" in c.value for c in at.caption)
    assert any("-log p values of the table of section 2." in m.value for m in at.markdown)


def test_the_page_splits_a_difference_of_counts_as_torch_does(bundled):
    second = "The capital of France is the city of Paris."  # three tokens more: 9 scored against 6
    at = open_page("app_pages/your_sentence.py")
    at.checkbox(key="sentence_compare").check().run()
    at.text_area(key="sentence_b").input(second).run()
    assert not at.exception and not at.error
    a, b = analyse_clm(bundled, FIRST), analyse_clm(bundled, second)
    expected = compare(clm_version(a), clm_version(b))

    def nll(ids):  # the reference: torch's cross-entropy on the model's own logits, in float64 from there on
        with torch.no_grad():
            logits = bundled.model(input_ids=torch.tensor([ids])).logits[0]
        return F.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]), reduction="none").double()

    ref_a, ref_b = nll(a.input_ids), nll(b.input_ids)
    n_a, n_b = len(ref_a), len(ref_b)
    assert (expected.scored_a, expected.scored_b) == (n_a, n_b) == (6, 9)
    tokens_part = (ref_b.sum() - ref_a.sum()).item() / n_b
    count_part = ref_a.sum().item() / n_b - ref_a.sum().item() / n_a
    assert expected.from_tokens == pytest.approx(tokens_part, abs=1e-5)
    assert expected.from_count == pytest.approx(count_part, abs=1e-5)
    assert tokens_part + count_part == pytest.approx(expected.difference, abs=1e-5)
    said = escape_markdown(summary(expected))
    assert said in [m.value for m in at.markdown]
    # the numbers of the sentence, as a learner reads them; the shared tokens ␣capital ... ␣is cost the same in
    # both, so none of them is named, and ␣Paris, whose -log p changed most, is
    plain = summary(expected)
    assert f"Tokens whose -log p changed: {'+' if tokens_part > 0 else ''}{fmt(tokens_part)}" in plain
    assert f"Scoring 9 tokens instead of 6: {fmt(count_part)}" in plain
    assert f"total -log p, {fmt(ref_a.sum().item())}, divided by 9 instead of 6" in plain
    assert not any(f"“{token}”" in plain for token in ("␣capital", "␣of", "␣France", "␣is"))
    paris = list(b.input_ids).index(a.input_ids[-2])  # ␣Paris (the first text's last token but one) in the second
    assert (f"“␣Paris” changed most: -log p {fmt(ref_a[-2].item())} → {fmt(ref_b[paris - 1].item())}"
            in plain)
    table = next(d.value for d in at.dataframe if SHARE_COLUMN in d.value.columns)
    unchanged = table[table["second − first"] == fmt(0.0)]
    assert len(unchanged) == 4 and set(unchanged[SHARE_COLUMN]) == {fmt(0.0)}  # no share for an unchanged cost
    assert any(escape_markdown(how_the_shares_add_up(expected)) in c.value for c in at.caption)


def test_the_second_version_starts_as_a_sentence_with_one_word_changed(bundled):
    """The teacher's rehearsal: a student's "…apple pie in autumn." got the second version "…apple pie in My.", its
    first word moved to the place of its last. The second version changes one word for another of its kind."""
    text = "My grandmother bakes apple pie in autumn."
    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    at.checkbox(key="sentence_compare").check().run()
    assert not at.exception and not at.error
    second = at.text_area(key="sentence_b").value
    assert second == "My grandmother bakes apple pie in winter."
    changed = [(a, b) for a, b in zip(text.split(), second.split()) if a != b]
    assert changed == [("autumn.", "winter.")] and "My" not in second.split()[1:]
