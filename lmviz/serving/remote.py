"""A replica's causal-LM scoring sent to one shared scorer (lmviz.serving.ray_scorer), which batches the
requests of every replica into one forward pass, instead of this process's own Batcher.

Only the standard library here: a replica talks plain HTTP and JSON, and needs no Ray."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Callable

from lmviz.errors import NotEnoughMemory, NothingToScore, ScorerUnavailable
from lmviz.lessons.causal_lm import ClmAnalysis, Request, TokenRow, make_request
from lmviz.serving.batcher import Batcher

# How long a replica waits for the shared scorer before it scores the text itself: a class's batch on the
# bundled model takes about 2 s on 2 CPU cores (docs/development/measurements.md), so 10 s means the scorer is
# down or far behind, not busy.
TIMEOUT_SECONDS = 10.0
INSTEAD = "this text was scored by this server's own copy of the model instead."
# The learner errors the scorer may answer with (their sentence, as it would have been raised here)
KINDS = {"NothingToScore": NothingToScore, "NotEnoughMemory": NotEnoughMemory}


def request_json(request: Request, model: str, dtype: str) -> dict:
    """What is sent for one text: the text and its settings, and the model it must be scored with."""
    return {"text": request.text, "add_bos": request.add_bos, "top_k": request.top_k, "model": model, "dtype": dtype}


def analysis_from_json(data: dict) -> ClmAnalysis:
    """ClmAnalysis.to_dict() read back: the same dataclasses, each top-k guess a (token, p) pair again."""
    rows = [TokenRow(**{**row, "top_k": [tuple(guess) for guess in row["top_k"]]}) for row in data["rows"]]
    return ClmAnalysis(**{**data, "rows": rows})


def error_json(problem: NothingToScore | NotEnoughMemory) -> dict:
    """A learner error as the scorer answers it, for raise_answered_error to raise again in the replica."""
    return {"error": str(problem), "kind": type(problem).__name__, "device": getattr(problem, "device", None)}


def raise_answered_error(data: dict) -> None:
    kind = KINDS.get(data.get("kind"))
    if kind is NotEnoughMemory:
        raise NotEnoughMemory(data["error"], data["device"])
    if kind is not None:
        raise kind(data["error"])


class RemoteBatcher:
    """The Batcher's interface (``loaded``, ``analyse``, ``close``), answered by the shared scorer at ``url``.

    Only ``analyse`` goes to the scorer. CausalScorer.run (next-token logits, SFT, a gradient step: any other
    forward pass) computes on ``loaded`` in this process, so a replica still loads its own copy of the model for
    those pages, and for the fallback: when the scorer does not answer within ``timeout`` seconds, or cannot be
    reached, ``told`` gets one sentence (a ScorerUnavailable) and the text is scored by ``local``, this process's
    Batcher, on the same model. Each text goes in a request of its own, and its answer comes back on that
    request's connection: only to the caller who sent it."""

    def __init__(self, url: str, local: Batcher, told: Callable[[ScorerUnavailable], None],
                 timeout: float = TIMEOUT_SECONDS):
        self.url, self.local, self.told, self.timeout = url, local, told, timeout
        self.loaded = local.loaded

    def analyse(self, text: str, add_bos: bool = False, top_k: int = 5) -> ClmAnalysis:
        """Like Batcher.analyse; bad input raises here, in the caller's thread, before anything is sent."""
        request = make_request(self.loaded, text, add_bos, top_k)
        try:
            return self.ask(request)
        except ScorerUnavailable as problem:
            self.told(problem)
            return self.local.analyse(text, add_bos, top_k)

    def ask(self, request: Request) -> ClmAnalysis:
        """The scorer's records for ``request``; ScorerUnavailable when it does not give them in time."""
        body = json.dumps(request_json(request, self.loaded.name, self.loaded.dtype)).encode()
        http = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(http, timeout=self.timeout) as response:
                data = json.load(response)
        except urllib.error.HTTPError as error:  # before URLError, of which it is a kind: the scorer did answer
            answered = _json_or_empty(error)
            raise_answered_error(answered)
            said = f" ({answered['error'].rstrip('.')})" if isinstance(answered.get("error"), str) else ""
            raise ScorerUnavailable(f"The shared scorer refused this text with HTTP {error.code}{said}; {INSTEAD}")
        except TimeoutError:
            raise ScorerUnavailable(self._late()) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):  # the connection itself took too long
                raise ScorerUnavailable(self._late()) from None
            # "connection refused", not "[Errno 111] Connection refused"
            reason = getattr(error.reason, "strerror", None) or str(error.reason)
            raise ScorerUnavailable(f"The shared scorer could not be reached ({reason.lower()}); {INSTEAD}") from None
        except (OSError, ValueError):  # the connection dropped, or what came is not JSON
            raise ScorerUnavailable(f"The shared scorer's answer was cut off or unreadable; {INSTEAD}") from None
        try:
            result = analysis_from_json(data)
        except (TypeError, KeyError):
            raise ScorerUnavailable(f"The shared scorer answered something other than records; {INSTEAD}") from None
        if result.text != request.text or result.input_ids != request.ids:  # never another text's, nor tokenizer's
            raise ScorerUnavailable(f"The shared scorer's records are not this text's tokens; {INSTEAD}")
        return result

    def _late(self) -> str:
        return f"The shared scorer did not answer within {self.timeout:g} s; {INSTEAD}"

    def close(self) -> None:
        self.local.close()


def _json_or_empty(error: urllib.error.HTTPError) -> dict:
    try:
        data = json.load(error)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
