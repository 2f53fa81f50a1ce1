"""The one way from a causal-LM page to its model.

Every page that scores text with a causal LM (Your sentence, Next token, Chat loss, Batches, and the lessons
to come) holds a ``CausalScorer`` and calls ``analyse`` (a text's records, batched with other sessions'
requests on a shared model) or ``run`` (any other forward pass: next-token logits, SFT, DPO, a padded
batch). Both admit the visitor's text through the process's FairShare first and turn a failed allocation
into NotEnoughMemory; ``cache_key`` is what a page's cache of results is keyed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from lmviz.lessons.causal_lm import ClmAnalysis
from lmviz.models.loading import LoadedModel
from lmviz.serving.batcher import Batcher
from lmviz.serving.fair_share import FairShare
from lmviz.serving.scoring import explaining_out_of_memory, score_text

T = TypeVar("T")


@dataclass(frozen=True)
class CausalScorer:
    """A causal LM as a page reaches it, for one session."""

    loaded: LoadedModel
    batcher: Batcher | None  # the shared model's; None: this session's own (trained) model, scored in its thread
    share: FairShare
    session: str  # whose fair share the texts count against
    dtype: str  # as asked for (the same model again on the CPU keeps it)
    token: str | None  # the hub access token it was loaded with

    @property
    def shared(self) -> bool:
        """One copy for every session, whose requests are batched together."""
        return self.batcher is not None

    @property
    def cache_key(self) -> tuple:
        """What a cache of this model's results is keyed on (never reused by another model)."""
        return self.loaded.name, self.loaded.identity, self.loaded.device, self.loaded.dtype

    def analyse(self, text: str, add_bos: bool = False, top_k: int = 5, counted: bool = True) -> ClmAnalysis:
        """``text``'s records (lmviz.lessons.causal_lm.analyse_clm's). ``counted=False`` for lmviz's own
        texts, which count against no visitor's share."""
        with self.share.admit(self.session, [text] if counted else []):
            if self.batcher is not None:
                return self.batcher.analyse(text, add_bos, top_k)
            return score_text(self.loaded, text, add_bos, top_k)

    def run(self, compute: Callable[[LoadedModel], T], *texts: str | None) -> T:
        """``compute(loaded)``, with the visitor's ``texts`` (None and "" left out) admitted first; a failed
        allocation raises NotEnoughMemory. With LMVIZ_SCORER_URL set only ``analyse`` goes to the shared scorer:
        ``run`` always computes on this process's own copy of the model."""
        with self.share.admit(self.session, [text for text in texts if text]):
            return explaining_out_of_memory(self.loaded, lambda: compute(self.loaded),
                                            lambda: f"The {self.loaded.device} ran out of memory for this text.")
