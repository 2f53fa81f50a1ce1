"""Issue 39: tokens of other scripts and emoji shown as "<F0 9F>", explained nowhere. On a 1280×720 projector, the
sentence that says what the first one is stands under the tokens, with "byte piece" linked to its glossary entry."""

from urllib.parse import quote

from playwright.sync_api import expect

from lmviz.core.text import readable_token
from tests.e2e.helpers import assert_no_error, settle
from tests.helpers import BYTE_PIECE_TEXTS


def test_your_sentence_says_what_a_byte_piece_is_under_the_tokens(projector, server, bundled):
    text = BYTE_PIECE_TEXTS["sentence"][2]
    ids = bundled.tokenizer(text, add_special_tokens=False)["input_ids"]
    first = next(token for token in (readable_token(bundled.tokenizer, i) for i in ids) if token.startswith("<"))
    projector.goto(f"{server}/sentence?text={quote(text)}")
    settle(projector)
    main = projector.locator("[data-testid='stMain']")
    tokens = main.locator("[data-testid='stMarkdownContainer']", has_text=first).first
    said = main.locator("[data-testid='stCaptionContainer']", has_text=f"“{first}” is a byte piece")
    expect(said).to_have_count(1)
    said.scroll_into_view_if_needed()
    expect(said).to_be_in_viewport(ratio=1)
    assert said.bounding_box()["y"] > tokens.bounding_box()["y"]  # under the tokens it explains
    link = said.get_by_role("link", name="byte piece")
    assert link.get_attribute("href").endswith("glossary#byte-piece")
    assert_no_error(projector)
