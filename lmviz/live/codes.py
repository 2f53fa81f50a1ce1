"""Join codes and participant tokens.

A join code is read off a projector from the back of a room and typed on a phone, so it is short and has no
characters that look alike (no 0 or O, no 1, I or L). It only has to tell the open rooms apart, not keep anyone
out: 31^5 is about 29 million codes for at most a few dozen open rooms.

A participant token stands for one phone in one room, with no name behind it. It is in the join link and the
session, and whoever holds it can answer in that phone's place, so it is a secret of 128 bits from ``secrets``.
"""

from __future__ import annotations

import re
import secrets

from lmviz.core.text import quotable
from lmviz.errors import LearnerError

ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # digits and capitals without 0/O and 1/I/L
CODE_LENGTH = 5
LOOK_ALIKES = "0O1IL"
TOKEN_BYTES = 16  # 128 bits
# token_urlsafe(16) is 22 characters; anything else in a link or a session is not a token this module made.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{22,86}")


class LiveProblem(LearnerError):
    """Something in the live class a student or the teacher can act on; the message is one sentence."""


class WrongCode(LiveProblem, ValueError):
    """A join code that is malformed, or that no room has."""


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(typed: str) -> str:
    """The code a student typed, as the store keeps it: capitals, without spaces or dashes. A look-alike is refused
    rather than guessed, because a code never has one and the student can look again."""
    code = re.sub(r"[\s\-–—]", "", typed or "").upper()
    if not code:
        raise WrongCode(f"Type the class's code first: the {CODE_LENGTH} characters on the projector.")
    shown = quotable((typed or "").strip()[:20])  # a right-to-left override would reorder the sentence
    wrong = sorted(set(code) & set(LOOK_ALIKES))
    if wrong:
        raise WrongCode(f"“{shown}” has {' and '.join(wrong)} in it, which a class's code never has "
                        f"(no 0, O, 1, I or L): check the code on the projector.")
    if len(code) != CODE_LENGTH or set(code) - set(ALPHABET):
        raise WrongCode(f"“{shown}” is not a class's code: a code is {CODE_LENGTH} letters and digits, "
                        "as on the projector.")
    return code


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def is_token(text: object) -> bool:
    """Whether ``text`` can be a token this module made (a link can carry anything)."""
    return isinstance(text, str) and _TOKEN.fullmatch(text) is not None
