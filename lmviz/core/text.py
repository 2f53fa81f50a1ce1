"""Text in, token ids out, and tokens back to readable text: what every page and objective
needs before a model runs. Pure Python over a tokenizer: no torch, so that lmviz's story
generator (lmviz.core.corpus) and the light parts of the app can use it without importing torch."""

from __future__ import annotations

import functools
import re
import unicodedata

from lmviz.errors import NothingToScore

_SHOWN_AS = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _visible(text: str, shown_as: dict[str, str] = _SHOWN_AS) -> str:
    out = []
    for at, ch in enumerate(text):
        if ch in shown_as:
            out.append(shown_as[ch])
        elif ch == _ZWJ and _joins_emoji(text, at):
            out.append(ch)  # 👨‍👩‍👧 is one emoji made of three: shown whole, not as <U+200D> litter
        elif unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
            out.append(f"<U+{ord(ch):04X}>")  # control, format (e.g. right-to-left override) and other invisibles
        else:
            out.append(ch)
    return "".join(out) or "∅"


_ZWJ = "\u200d"  # the zero-width joiner, which joins emoji into one (a family, a flag with a rainbow)
_EMOJI_BEFORE_JOINER = {"So", "Sk"}  # a pictograph, a skin tone; or U+FE0F, the emoji presentation selector


def _joins_emoji(text: str, at: int) -> bool:
    """Whether the joiner at ``at`` stands between two emoji, as in an emoji ZWJ sequence; anywhere else it is
    invisible text and is shown as such."""
    if at == 0 or at + 1 >= len(text):
        return False
    before, after = text[at - 1], text[at + 1]
    return ((before == "\ufe0f" or unicodedata.category(before) in _EMOJI_BEFORE_JOINER)
            and unicodedata.category(after) == "So")


def quotable(text: str) -> str:
    """A text the learner typed, for quoting inside a sentence: as typed, spaces included, but with line breaks,
    tabs and every invisible character (a right-to-left override would reorder the rest of the sentence) shown."""
    return _visible(text, {ch: mark for ch, mark in _SHOWN_AS.items() if ch != " "})


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE (GPT-2, SmolLM2, Llama 3) writes each byte as a printable
    character: bytes that are printable Latin-1 stand for themselves, the others
    are shifted to 256, 257, ... in order. This maps those characters back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(shifted)}


@functools.lru_cache(maxsize=200_000)  # a vocabulary's worth: top-k lists repeat the same tokens over and over
def readable_token(tokenizer, token_id: int) -> str:
    """A token as text a learner can read: decoded (not BPE's 'Ġ' form), with
    spaces, line breaks and invisible characters made visible. A token that is
    only part of a character's UTF-8 bytes (CJK and emoji are often split) is
    shown as its bytes in hex, e.g. <E6 97>."""
    text = tokenizer.decode([token_id])
    if "\ufffd" in text:
        piece = tokenizer.convert_ids_to_tokens(token_id)
        alphabet = _byte_level_alphabet()
        if piece and all(ch in alphabet for ch in piece):
            return "<" + " ".join(f"{alphabet[ch]:02X}" for ch in piece) + ">"
        if piece and piece.startswith("<0x"):  # SentencePiece byte fallback, already in this form
            return piece
    return _visible(text)


# readable_token's two forms of a token that is bytes, not characters: byte-level BPE's "<E6 88>", and
# SentencePiece's byte fallback "<0xE6>"
_BYTE_PIECE = re.compile(r"<((?:[0-9A-F]{2} )*[0-9A-F]{2})>|<0x([0-9A-F]{2})>")


def byte_piece(token: str) -> bytes | None:
    """The bytes of a token that readable_token shows as bytes in hex (a byte piece: a token holding only part of a
    character's UTF-8 bytes), or None for a token shown as text."""
    match = _BYTE_PIECE.fullmatch(token)
    return None if match is None else bytes.fromhex(match[1] or match[2])


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The bytes of text a token stands for, read from its piece in the vocabulary, never by decoding it (a token
    that holds part of a character decodes to U+FFFD, whose own three bytes are not the text's): byte-level BPE's
    printable characters mapped back to their bytes, SentencePiece's byte fallback <0xNN> as that byte. b"" for a
    special token, which stands for no text. None for a piece of neither kind; a WordPiece piece such as "cat"
    is read as its letters, which ``reads_bytes`` then finds do not give the text back."""
    if token_id in tokenizer.all_special_ids:
        return b""
    piece = tokenizer.convert_ids_to_tokens(token_id) or ""
    alphabet = _byte_level_alphabet()
    if piece and all(ch in alphabet for ch in piece):
        return bytes(alphabet[ch] for ch in piece)
    fallback = re.fullmatch(r"<0x([0-9A-F]{2})>", piece)
    return None if fallback is None else bytes.fromhex(fallback[1])


# Spaces, a line break, a letter with an accent, two CJK characters and an emoji: a tokenizer whose pieces give
# these bytes back is byte-level for any text.
_BYTES_PROBE = "a b\n é 東京 🍕"


def reads_bytes(tokenizer, text: str = _BYTES_PROBE) -> bool:
    """Whether ``tokenizer``'s tokens of ``text`` are the text's UTF-8 bytes cut into pieces: their token_bytes,
    joined, give back exactly ``text.encode("utf-8")``. True for byte-level BPE (GPT-2, SmolLM2, Llama 3); False
    for WordPiece (lmviz's tiny models, BERT), whose normaliser lowercases text and whose pieces drop the spaces,
    and for SentencePiece, which adds a space before the text."""
    ids = tokenizer(valid_text(text), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    pieces = [token_bytes(tokenizer, i) for i in ids]
    return None not in pieces and b"".join(pieces) == valid_text(text).encode("utf-8")


def utf8_length(lead: int) -> int | None:
    """How many bytes UTF-8 writes the character that begins with byte ``lead`` in: 1 to 4, or None for a byte that
    cannot begin one (80 to BF continue a character; C0, C1 and F5 to FF are never used)."""
    for first, last, length in ((0x00, 0x7F, 1), (0xC2, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF4, 4)):
        if first <= lead <= last:
            return length
    return None


def cut_character(piece: bytes) -> tuple[int, int, int] | None:
    """Where a byte piece cuts the last character it begins: (that character's first byte, its length in UTF-8, how
    many of its bytes the piece holds), or None when the piece begins none that it leaves unfinished."""
    start = 0
    while start < len(piece):
        length = utf8_length(piece[start])
        if length is None:  # a byte that continues a character begun before it (or no character at all)
            start += 1
        elif start + length > len(piece):
            return piece[start], length, len(piece) - start
        else:
            start += length
    return None


def valid_text(text: str) -> str:
    """Text with any lone UTF-16 surrogate (which no UTF-8 tokenizer can read, and a
    browser or a URL can send) replaced by U+FFFD, the replacement character."""
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


DOCUMENT_SEPARATOR = "<|endoftext|>"  # GPT-2's and SmolLM2's token between pre-training documents


def document_separator_id(tokenizer) -> int | None:
    """The id of <|endoftext|>, the token between pre-training documents, if the vocabulary has it."""
    return tokenizer.get_vocab().get(DOCUMENT_SEPARATOR)


def start_token_id(tokenizer) -> int:
    """The token a text starts with in pre-training: the document separator
    <|endoftext|> where the vocabulary has one (GPT-2, SmolLM2; SmolLM2-Instruct's
    BOS is a chat-turn marker instead), else BOS, else EOS."""
    for candidate in (document_separator_id(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return candidate
    raise NothingToScore("This tokenizer has no beginning-of-sequence or end-of-sequence token to prepend.")


def end_token_id(tokenizer) -> int | None:
    """The token a pre-training document ends with: the document separator
    where the vocabulary has one, else EOS (None if the tokenizer has neither)."""
    separator = document_separator_id(tokenizer)
    return separator if separator is not None else tokenizer.eos_token_id


def boundary_token_note(tokenizer, token_id: int) -> str:
    """What ``token_id`` is, as the marker a text starts or ends with, read from
    the tokenizer: the document separator (and then what this tokenizer's own
    bos_token and eos_token are, when they differ from it), or its BOS or EOS token."""
    shown = f"{readable_token(tokenizer, token_id)} (id {token_id})"
    if token_id == tokenizer.bos_token_id:
        return f"{shown} is this tokenizer's BOS (beginning-of-sequence) token."
    if token_id != document_separator_id(tokenizer):
        return f"{shown} is this tokenizer's EOS (end-of-sequence) token."
    note = (f"{shown} separates one document from the next in the text that models with this vocabulary are "
            "pre-trained on: it ends one text and begins the next")
    others = [(role, tokenizer.convert_tokens_to_ids(token)) for role, token in
              (("bos_token", tokenizer.bos_token), ("eos_token", tokenizer.eos_token)) if token is not None]
    others = [(role, i) for role, i in others if i != token_id]
    if not others:
        return note + "."
    template = getattr(tokenizer, "chat_template", None) or ""
    in_chat = all(tokenizer.convert_ids_to_tokens(i) in template for _, i in others)
    named = " and ".join(f"{role} is {readable_token(tokenizer, i)} (id {i})" for role, i in others)
    return f"{note}. This tokenizer's {named}" + (", which its chat template uses to mark chat turns." if in_chat
                                                   else ".")


def encode(tokenizer, text: str, add_bos: bool, max_tokens: int) -> tuple[list[int], int | None]:
    """Token ids of ``text`` (special tokens only as asked), cut to ``max_tokens``.

    Returns (ids, the length before cutting or None).
    """
    if not text or not text.strip():
        raise NothingToScore("There is nothing to score: the text is empty. Type a sentence.")
    # split_special_tokens: typing "<|endoftext|>" gives the characters, not the model's control token
    ids = tokenizer(valid_text(text), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if add_bos:
        ids = [start_token_id(tokenizer), *ids]
    if len(ids) < 2:
        raise NothingToScore(
            "There is no next token to predict: the text is a single token. Type more, "
            "or tick 'Start with a start-of-text token' so that the first token is predicted from the start marker."
        )
    if len(ids) > max_tokens:
        return ids[:max_tokens], len(ids)
    return ids, None


def pad_right(rows: list[list[int]], value: int) -> tuple[list[list[int]], list[list[int]]]:
    """Rows of ids padded at the end with ``value`` to the longest one's length, and their
    attention masks (1 on real tokens, 0 on pads). Right padding leaves every real token at
    its position: the one padding lmviz uses, except the Batches page's left-padding lesson."""
    width = max(len(row) for row in rows)
    return ([row + [value] * (width - len(row)) for row in rows],
            [[1] * len(row) + [0] * (width - len(row)) for row in rows])


# Characters that Markdown, Streamlit's :colour[...] / :emoji: syntax or LaTeX ($...$) would interpret.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|$<>~:&])")


# What GitHub-flavoured Markdown turns into a link with no Markdown around it: http://, https://, www. and an
# e-mail's @. Streamlit's renderer finds them in the text after the escapes are read, so a backslash cannot stop it.
_AUTOLINKED = re.compile(r"(?i)(?<=https)(?=://)|(?<=http)(?=://)|(?<=www)(?=\.)|(?=@)")
WORD_JOINER = "\u2060"  # invisible and of no width: splits what would be linked, and is shown as nothing


def escape_markdown(text: str) -> str:
    """Text that st.markdown shows literally, whatever the user typed: nothing formatted, and no bare address
    made a link (a word joiner, invisible, sits before its "://", its "." after www, or its "@")."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _AUTOLINKED.sub(WORD_JOINER, text))


_FORMULA_START = ("=", "+", "-", "@")


def spreadsheet_safe(value):
    """A cell for a CSV a spreadsheet will open: text that would start a formula there ("=SUM(A1)", a token a
    learner typed) gets a leading apostrophe, which spreadsheets read as "text"; numbers, "-0.5" or "-100" written
    as text included, stay as they are."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value
