"""On a shared server, ``FairShare`` limits what one session sends to a model: one request at a time, and so
many characters a minute, counted before a tokenizer or model is touched."""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from typing import Callable, Iterator

from lmviz.errors import NothingToScore


class TooMuchText(NothingToScore):
    """A shared server's limit on one visitor's texts was reached; the message says how long to wait."""


WINDOW_OF_A_MINUTE = 60.0
PROCESS_CHARS_IN_FLIGHT = 60_000  # a class of 30 each pasting a text of a page's longest (2 000) at once
TURN_SECONDS = 60.0  # how long a session's request waits for its previous one before it is refused


class FairShare:
    """The limits that keep one visitor of a shared server from starving the class, counted in characters
    before a tokenizer or model is touched. Per session: one request scored at a time (a second, as when a
    page is run again while its text is still being scored, waits its turn), and at most
    ``chars_per_minute`` characters sent to a model in any 60 s, a request's boxes counted together (the same
    boxes again, scored with another setting such as the start token, are not counted twice: a refusal must
    not hide a setting of the text just scored). Per process: at most ``chars_in_flight`` characters being
    scored at once (a visitor with many tabs is many sessions)."""

    def __init__(self, chars_per_minute: float, chars_in_flight: float, clock: Callable[[], float] = time.monotonic,
                 turn_seconds: float = TURN_SECONDS):
        self.chars_per_minute, self.chars_in_flight, self.clock = chars_per_minute, chars_in_flight, clock
        self.turn_seconds = turn_seconds
        self._turn = threading.Condition()
        self._sent: dict[str, collections.deque] = {}  # session -> (time, boxes, characters) of its last minute
        self._busy: dict[str, int] = {}  # session -> characters of its request being scored now

    @contextlib.contextmanager
    def admit(self, session: str, texts: list[str]) -> Iterator[None]:
        """Score ``texts`` (one request's boxes) for ``session`` inside this block, or raise TooMuchText.
        No text at all (lmviz's own paragraph, the same for everyone) is not counted."""
        if not texts:
            yield
            return
        boxes, chars = tuple(texts), sum(len(text) for text in texts)
        with self._turn:
            if not self._turn.wait_for(lambda: session not in self._busy, timeout=self.turn_seconds):
                raise TooMuchText("Your previous text is still being scored. Try again in a moment.")
            now = self.clock()
            self._forget_before(now - WINDOW_OF_A_MINUTE)
            sent = self._sent.setdefault(session, collections.deque())
            new = 0 if any(earlier == boxes for _, earlier, _ in sent) else chars
            self._check(sent, new, chars, now)
            if new:
                sent.append((now, boxes, new))
            self._busy[session] = chars
        try:
            yield
        finally:
            with self._turn:
                del self._busy[session]
                self._turn.notify_all()

    def _check(self, sent: collections.deque, new: int, chars: int, now: float) -> None:
        if new > self.chars_per_minute:
            raise TooMuchText(f"What you sent has {new:,} characters; this server scores at most "
                              f"{self.chars_per_minute:,.0f} a minute for each visitor. Shorten it.")
        used = sum(n for _, _, n in sent)
        if used + new > self.chars_per_minute:
            # wait until enough of the minute's oldest requests have left the window
            freed, wait = used, 0.0
            for when, _, n in sent:
                freed -= n
                wait = when + WINDOW_OF_A_MINUTE - now
                if freed + new <= self.chars_per_minute:
                    break
            raise TooMuchText(f"You have sent {used:,} characters to be scored in the last minute; this "
                              f"server scores at most {self.chars_per_minute:,.0f} a minute for each visitor, "
                              f"so that every student's text is scored quickly. Try again in {math.ceil(wait)} s.")
        if sum(self._busy.values()) + chars > self.chars_in_flight:
            raise TooMuchText("The server is busy scoring other visitors' texts. Try again in a few seconds.")

    def _forget_before(self, start: float) -> None:
        for session in list(self._sent):
            sent = self._sent[session]
            while sent and sent[0][0] <= start:
                sent.popleft()
            if not sent and session not in self._busy:
                del self._sent[session]  # a session that went away leaves nothing behind
