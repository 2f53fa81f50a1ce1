"""Text as the learner typed it: CSV cells a spreadsheet would run made text, Markdown escaped with no bare address
made a link, invisible characters shown and emoji kept whole."""

import csv
import io
import re

import pandas as pd

from lmviz.core.text import WORD_JOINER, escape_markdown, quotable, spreadsheet_safe


def test_text_that_starts_a_formula_gets_an_apostrophe_and_numbers_do_not():
    cells = ["=SUM(A1)", "@cmd", "+x", "-x", "-100", "-0.50000", "+3", "Paris", "␣the", 4.2, -100, None]
    assert [spreadsheet_safe(c) for c in cells] == [
        "'=SUM(A1)", "'@cmd", "'+x", "'-x", "-100", "-0.50000", "+3", "Paris", "␣the", 4.2, -100, None]


def test_a_table_written_safe_reads_back_with_every_number_unchanged():
    table = pd.DataFrame({"token": ["=1+1", "cat"], "label": ["-100", "42"], "-log p": [0.12345, 2.5]})
    rows = list(csv.reader(io.StringIO(table.map(spreadsheet_safe).to_csv(index=False))))
    assert rows == [["token", "label", "-log p"], ["'=1+1", "-100", "0.12345"], ["cat", "42", "2.5"]]


def test_a_quoted_text_keeps_its_spaces_and_shows_what_is_invisible():
    assert quotable("The cat sat.") == "The cat sat."
    assert quotable("abc \u202eevil\u202c") == "abc <U+202E>evil<U+202C>"  # no override left to reorder the page
    assert quotable("one\ntwo\tthree\u200b") == "one⏎two⇥three<U+200B>"


def test_a_byte_piece_is_read_back_from_both_hex_forms_and_nothing_else_is():
    from lmviz.core.text import byte_piece

    assert byte_piece("<20 F0 9F>") == b" \xf0\x9f" and byte_piece("<8D>") == b"\x8d"
    assert byte_piece("<0xE6>") == b"\xe6"  # SentencePiece's byte fallback
    for text in ("<", "<>", "<e6 88>", "<E6  88>", "<E688>", "a<E6>", "<U+202E>", "<|endoftext|>", "␣Paris"):
        assert byte_piece(text) is None, text


def test_where_a_byte_piece_cuts_a_character_is_pythons_utf8():
    from lmviz.core.text import cut_character, utf8_length

    for character in ("A", "é", "我", "🍕", "한"):
        encoded = character.encode("utf-8")
        assert utf8_length(encoded[0]) == len(encoded)
        for continuation in encoded[1:]:
            assert utf8_length(continuation) is None
        for held in range(1, len(encoded)):  # the piece holds the character's first bytes, after a space
            assert cut_character(b" " + encoded[:held]) == (encoded[0], len(encoded), held)
        assert cut_character(encoded) is None and cut_character(encoded[1:]) is None  # whole, or its end only
    assert all(utf8_length(byte) is None for byte in (0xC0, 0xC1, *range(0xF5, 0x100)))  # never in UTF-8


def test_an_address_in_escaped_text_reads_as_typed_but_has_nothing_markdown_would_link():
    typed = "See https://evil.example/x, HTTP://A.B, www.site.org or me@school.edu now."
    escaped = escape_markdown(typed)
    assert re.sub(r"\\(.)", r"\1", escaped).replace(WORD_JOINER, "") == typed  # what the reader sees
    for linked in ("https://", "http://", "www.", "e@"):  # what GitHub-flavoured Markdown looks for
        assert linked not in re.sub(r"\\(.)", r"\1", escaped).lower()
    assert escape_markdown("The cat sat, 3.5 each.") == "The cat sat, 3\\.5 each\\."  # no joiner elsewhere


def test_emoji_joined_by_a_zero_width_joiner_stay_whole_and_a_lone_joiner_is_shown():
    family, flag = "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\U0001F3F3\ufe0f\u200d\U0001F308"
    assert quotable(f"{family} and {flag}") == f"{family} and {flag}"
    assert quotable("a\u200db") == "a<U+200D>b" and quotable("\u200d\U0001F308") == "<U+200D>\U0001F308"
