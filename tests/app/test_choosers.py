"""lmviz.app.choosers: user text is shown literally, checked on what a Markdown renderer makes of it."""

import re

from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from lmviz.core.text import escape_markdown

NASTY = (r"**bold** _it_ $x^2$ <script>alert(1)</script> <img src=x onerror=alert(1)> "
         r"[a](b) :red[c] `code` # h \ ~s~ |t|")
# Streamlit's Markdown is CommonMark with GitHub's extensions (tables, ~strike~) and LaTeX between dollars:
# render it the same way.
RENDER = MarkdownIt("commonmark").use(dollarmath_plugin).enable(["table", "strikethrough"])
# Streamlit's own syntax, read from the Markdown source before it is rendered: :colour[text], :material/icon:
# and :emoji_name: shortcodes. A colon escaped with a backslash starts none of them.
STREAMLIT_DIRECTIVE = re.compile(r"(?<!\\):[\w/-]+(\[|:)")


def rendered_text(markdown: str) -> str:
    """The visible text of the rendered HTML, its entities decoded."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", RENDER.render(markdown))).strip()


def test_markup_in_user_text_renders_as_the_text_itself():
    assert not STREAMLIT_DIRECTIVE.search(escape_markdown(NASTY))
    html_out = RENDER.render(escape_markdown(NASTY))
    for tag in ("<strong", "<em", "<script", "<img", "<a ", "<code", "<h1", "<s>", "<del", "<table"):
        assert tag not in html_out, tag
    assert rendered_text(escape_markdown(NASTY)) == NASTY


def test_the_check_can_fail():
    """Unescaped, the same text does render as markup: the test above would see a missing escape."""
    html_out = RENDER.render(NASTY)
    assert "<strong>" in html_out and "<code>" in html_out and "<a href" in html_out and "math inline" in html_out
    assert rendered_text(NASTY) != NASTY
    assert STREAMLIT_DIRECTIVE.search(NASTY) and STREAMLIT_DIRECTIVE.search(":smile: and :material/home:")


def test_each_markup_character_alone_stays_itself():
    for char in r"\`*_{}[]()#+-.!|$<>~:&":
        for text in (char, f"{char}x{char}", f"{char * 2}x{char * 2}", f"{char} x"):
            assert rendered_text(escape_markdown(text)) == text, text
    for text in (":red[c]", ":smile:", ":material/home:", "a:b[c]"):
        assert not STREAMLIT_DIRECTIVE.search(escape_markdown(text)), text
