"""Every term of the glossary is one click away where a page first uses it."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.course.glossary import TERMS, anchor, link
from tests.helpers import APP, PAGES, open_page

# on text with \[ \] unescaped: "[[MASK]](glossary#…)"
LINK = re.compile(r"\[(.*?)\]\(glossary(?:\?[^#)]*)?#([a-z0-9-]+)\)")


def first_uses(text: str) -> dict[str, int]:
    """term -> where in ``text`` one of its words first appears (whole words; "label" not in "labelled")."""
    found = {}
    for term, (words, _) in TERMS.items():
        hits = [m.start() for w in words
                for m in re.finditer(rf"(?<![\w\\-]){re.escape(w)}(?![\w-])", text,
                                     flags=re.IGNORECASE if w.islower() else 0)]
        if hits:
            found[term] = min(hits)
    return found


def linked_spans(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(2)) for m in LINK.finditer(text)]


def test_in_presentation_mode_the_glossary_opens_in_presentation_mode_too():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["present"] = "1"
    at.run()
    assert "(glossary?present=1#token)" in in_order(at)


@pytest.mark.parametrize("page", [p for p in PAGES if not p.endswith("glossary.py")])
def test_each_terms_first_use_links_to_the_glossary(page):
    at = open_page(page)
    assert not at.exception
    text = in_order(at).replace("\\[", "[").replace("\\]", "]")  # link() escapes the brackets of [MASK]
    spans = linked_spans(text)
    unlinked = []
    for term, where in first_uses(text).items():
        if not any(start <= where < end and target == anchor(term) for start, end, target in spans):
            unlinked.append(f"{term!r} at …{text[max(0, where - 40):where + 20]!r}")
    assert not unlinked, "first uses not linked to the glossary:\n" + "\n".join(unlinked)


def in_order(at) -> str:
    """Markdown and captions in page order (depth-first through columns, containers and expanders)."""
    parts = []

    def walk(node):
        kind = getattr(node, "type", None)
        if kind in ("markdown", "caption"):
            parts.append(str(node.value))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return "\n".join(parts)


def test_links_point_at_real_entries():
    assert link("logits", "logit") == "[logits](glossary#logit)"
    assert link("logits", "logit", "?present=1") == "[logits](glossary?present=1#logit)"
    assert link("[MASK]", "[CLS] / [SEP] / [MASK]") == "[\\[MASK\\]](glossary#cls-sep-mask)"
    assert len({anchor(t) for t in TERMS}) == len(TERMS)
    with pytest.raises(KeyError):
        link("tensor", "tensor")
