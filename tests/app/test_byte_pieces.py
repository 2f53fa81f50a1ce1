"""Issue 39: tokens of other scripts and emoji shown as "<E6 88>" were explained nowhere. A page whose tokens hold a
byte piece says, under them, which one is and what it holds, with the glossary's entry one click away; checked
against the bytes Hugging Face's own byte-level alphabet gives each token and Python's UTF-8."""

import pytest
import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode

from lmviz.course.glossary import LESSON_TERMS
from lmviz.course.registry import PATH
from lmviz.lessons.grpo import sample_group
from lmviz.lessons.next_token import DEFAULT_TOP_K
from tests.helpers import BYTE_PIECE_TEXTS, open_page, unescaped, with_byte_pieces

SHOWING = [lesson for lesson in PATH if "byte piece" in LESSON_TERMS[lesson.url_path]]


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a byte-level BPE token stands for, by transformers' own table (not lmviz's)."""
    byte_of = {character: byte for byte, character in bytes_to_unicode().items()}
    return bytes(byte_of[character] for character in tokenizer.convert_ids_to_tokens(token_id))


def is_piece(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def hex_form(data: bytes) -> str:
    return "<" + " ".join(f"{byte:02X}" for byte in data) + ">"


def said(at) -> str:
    [caption] = [unescaped(c.value) for c in at.caption if "is a [byte piece](glossary" in c.value]
    return caption


def test_every_lesson_with_a_text_that_shows_byte_pieces_declares_the_term():
    assert {lesson.url_path for lesson in SHOWING} == set(BYTE_PIECE_TEXTS) == {"sentence", "bpb", "next-token", "grpo"}


# Bits per byte's default text holds an emoji and Chinese on purpose: it is given a plain one
PLAIN_TEXTS = {"bpb": ("text_area", "bpb_text", "The capital of France is Paris.")}


@pytest.mark.parametrize("lesson", SHOWING, ids=[lesson.url_path for lesson in SHOWING])
def test_no_byte_piece_no_sentence(lesson):
    at = open_page(lesson.page)
    if lesson.url_path in PLAIN_TEXTS:
        kind, key, text = PLAIN_TEXTS[lesson.url_path]
        getattr(at, kind)(key=key).set_value(text)
        at.run()
    assert not at.exception and not [c for c in at.caption if "byte piece" in c.value]


def test_your_sentence_says_which_token_is_a_byte_piece_and_what_it_holds(bundled):
    lesson = next(lesson for lesson in SHOWING if lesson.url_path == "sentence")
    text = BYTE_PIECE_TEXTS["sentence"][2]
    at = with_byte_pieces(lesson)
    assert not at.exception
    ids = bundled.tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [token_bytes(bundled.tokenizer, i) for i in ids]
    assert b"".join(pieces) == text.encode("utf-8")
    first = next(n for n, piece in enumerate(pieces) if is_piece(piece))
    end = len(b"".join(pieces[:first + 1]))  # where the token's bytes end in the text's
    start = 0  # the character the token ends inside: Python's own encoding, character by character
    for character in text:
        if start + len(character.encode("utf-8")) > end:
            break
        start += len(character.encode("utf-8"))
    encoded = character.encode("utf-8")
    sentence = said(at)
    assert sentence.startswith(f"“{hex_form(pieces[first])}” is a [byte piece](glossary#byte-piece)")
    assert (f"{encoded[0]:02X} begins a character of {len(encoded)} bytes, of which this token holds "
            f"{end - start}") in sentence
    others = sum(is_piece(piece) for piece in pieces) - 1
    assert f"{others} other tokens here are byte pieces too." in sentence


def test_next_token_says_it_of_its_top_tokens(bundled):
    lesson = next(lesson for lesson in SHOWING if lesson.url_path == "next-token")
    at = with_byte_pieces(lesson)
    assert not at.exception
    ids = bundled.tokenizer(BYTE_PIECE_TEXTS["next-token"][2], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        top = bundled.model(input_ids=torch.tensor([ids])).logits[0, -1].topk(DEFAULT_TOP_K).indices.tolist()
    first = next(token_bytes(bundled.tokenizer, i) for i in top if is_piece(token_bytes(bundled.tokenizer, i)))
    assert said(at).startswith(f"“{hex_form(first)}” is a [byte piece](glossary#byte-piece)")


def test_grpo_says_it_under_the_answers(bundled):
    lesson = next(lesson for lesson in SHOWING if lesson.url_path == "grpo")
    at = with_byte_pieces(lesson)
    assert not at.exception
    group = sample_group(bundled, BYTE_PIECE_TEXTS["grpo"][2], 8, 0, 1.0, 12)  # the page's default settings
    drawn = [token_bytes(bundled.tokenizer, i) for answer in group.answers for i in answer.ids]
    first = next(piece for piece in drawn if is_piece(piece))
    assert said(at).startswith(f"“{hex_form(first)}” is a [byte piece](glossary#byte-piece)")
