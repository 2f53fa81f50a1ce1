"""The CSV downloads: a cell a spreadsheet would run as a formula is made text; numbers stay numbers."""

import csv
import io

import pandas as pd

from lmviz.core.text import quotable, spreadsheet_safe


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
