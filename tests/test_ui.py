"""lmviz.ui: user text is shown literally."""

import re

from lmviz.ui import escape_markdown

NASTY = r"**bold** _it_ $x^2$ <script>alert(1)</script> <img src=x onerror=alert(1)> [a](b) :red[c] `code` # h \ ~s~ |t|"
MARKUP = set(r"\`*_{}[]()#+-.!|$<>~:&")


def test_every_markup_character_is_escaped():
    escaped = escape_markdown(NASTY)
    unescaped = re.sub(r"\\.", "", escaped)  # drop every backslash-escaped pair
    assert not set(unescaped) & MARKUP
    assert re.sub(r"\\(.)", r"\1", escaped) == NASTY  # and nothing else changed
