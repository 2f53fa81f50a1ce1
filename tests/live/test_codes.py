"""Join codes a room can read off a projector and type without a doubt, and participant tokens nobody can guess."""

import math
import re

import pytest

from lmviz.errors import LearnerError
from lmviz.live.codes import (
    ALPHABET,
    CODE_LENGTH,
    TOKEN_BYTES,
    WrongCode,
    is_token,
    new_code,
    new_token,
    normalise_code,
)


def one_sentence(problem: Exception) -> str:
    text = str(problem)
    assert isinstance(problem, LearnerError)
    assert text.endswith(".") and "\n" not in text and "Traceback" not in text, text
    return text


def test_the_alphabet_has_no_look_alikes_and_codes_are_drawn_from_it():
    assert not set(ALPHABET) & set("0O1IL")
    assert len(set(ALPHABET)) == len(ALPHABET) == 31
    codes = {new_code() for _ in range(2000)}
    assert all(len(code) == CODE_LENGTH and set(code) <= set(ALPHABET) for code in codes)
    assert len(codes) > 1990  # 31^5 codes: 2000 draws almost never repeat


@pytest.mark.parametrize(("typed", "code"), [("ABCDE", "ABCDE"), (" ab cde ", "ABCDE"), ("a2c-9z", "A2C9Z"),
                                             ("XY\tZ23", "XYZ23")])
def test_a_code_is_read_whatever_its_case_and_spaces(typed, code):
    assert normalise_code(typed) == code


@pytest.mark.parametrize("typed", ["AB0DE", "abode", "A1CDE", "AICDE", "ALCDE"])
def test_a_look_alike_is_refused_with_a_sentence_that_names_it(typed):
    with pytest.raises(WrongCode) as raised:
        normalise_code(typed)
    text = one_sentence(raised.value)
    assert "no 0, O, 1, I or L" in text
    assert typed in text


@pytest.mark.parametrize("typed", ["", "   ", None, "ABCD", "ABCDEF", "ABC?E", "ÀBCDE"])
def test_what_is_not_a_code_is_refused_with_a_sentence(typed):
    with pytest.raises(WrongCode) as raised:
        normalise_code(typed)
    assert re.search(r"\b5\b", one_sentence(raised.value))


def test_tokens_have_at_least_128_bits_and_are_recognised():
    assert TOKEN_BYTES * 8 >= 128
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(token) >= math.ceil(128 / 6) and is_token(token) for token in tokens)  # 6 bits a character


@pytest.mark.parametrize("text", [None, "", "abc", "x" * 200, "<script>alert(1)</script>", 12345, "a b" * 10])
def test_anything_else_is_not_a_token(text):
    assert not is_token(text)
