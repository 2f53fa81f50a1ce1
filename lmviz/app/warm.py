"""The bundled model warmed up in the background as soon as anyone opens the app, so that the first
visit to a causal-LM page finds it ready. Imported by app.py on every page: torch is imported in the
warming thread, never on the page's."""

from __future__ import annotations

import os
import threading
import time
import weakref

import streamlit as st

from lmviz.core.text import escape_markdown


class _Warmer:
    """Loads the bundled model once per process, in a thread of its own, so that the
    first visit to a causal-LM page finds it ready instead of waiting for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fraction, self.message, self.seconds, self.error = 0.0, "starting", None, None
        self.model = "the bundled model"
        self.batcher = None  # a weak reference to what was loaded
        self.defaults_error = None  # why the training lessons' defaults could not be computed in advance

    def start(self) -> None:
        if os.environ.get("LMVIZ_WARM_START", "1") == "0":
            return
        with self._lock:
            if self._thread is not None:
                return
            from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

            self._thread = threading.Thread(target=self._warm, name="lmviz-warm-start", daemon=True)
            add_script_run_ctx(self._thread, get_script_run_ctx())  # Streamlit's caches need a session
            self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def _progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def _warm(self) -> None:
        start = time.perf_counter()
        try:
            from lmviz.app import caches  # torch and transformers are imported here, off the page's thread
            from lmviz.lessons.causal_lm import REFERENCE_TEXT
            from lmviz.models.bundled import prepare_bundled
            from lmviz.models.loading import DEFAULT_MODEL
            from lmviz.models.settings import allowed_models, default_dtype

            self.model = DEFAULT_MODEL
            allowed = allowed_models()
            if allowed is not None and DEFAULT_MODEL not in allowed:
                self.message = "not needed: this deployment does not offer the bundled model"
                return
            prepare_bundled(self._progress)
            self._progress(0.95, f"Loading {DEFAULT_MODEL}…")
            # the key the pages load with; a weak reference, so that Streamlit's cache alone decides its life
            batcher = caches.get_batcher(DEFAULT_MODEL, "auto", default_dtype(), None)
            self.batcher = weakref.ref(batcher)
            self._progress(0.98, "A first forward pass…")
            batcher.analyse(REFERENCE_TEXT)  # a model's first forward pass is several times slower than the next
            self._progress(0.99, "Computing the default results of One step of learning and RL fine-tuning…")
            self._warm_training_defaults(batcher, default_dtype())
            self.fraction, self.message = 1.0, f"{DEFAULT_MODEL} is ready"
        except Exception as error:  # a page that needs the model will say what went wrong
            self.error = f"{type(error).__name__}: {error}"
            self.message = "could not prepare the bundled model; the pages will say why"
        finally:
            self.seconds = time.perf_counter() - start


    def _warm_training_defaults(self, batcher, dtype: str) -> None:
        """The two training lessons' results for their defaults, into the caches their pages read (a class that
        opens the page together finds them ready); counted against no visitor. A failure here leaves the model
        ready: the page computes them itself, and says why it cannot."""
        from lmviz.app import caches
        from lmviz.app.training import warm_defaults
        from lmviz.serving.scorer import CausalScorer

        try:
            warm_defaults(CausalScorer(batcher.loaded, batcher, caches.process_fair_share(), "the warm start", dtype,
                                       None))
        except Exception as error:  # said in the sidebar's line (ready_line); the pages compute them themselves
            self.defaults_error = f"{type(error).__name__}: {error}"

    def ready_line(self) -> str:
        """The sidebar's line once the warm start has ended."""
        line = f"Model: {self.message}."
        if self.defaults_error:
            line += (" The training lessons' default results could not be computed in advance "
                     f"({self.defaults_error}): their pages compute them when opened.")
        return line


warmer = _Warmer()


def warm_start() -> None:
    """Start warming the bundled model (once per process) and say how far it is, in the sidebar."""
    warmer.start()
    if not warmer.started:
        return
    with st.sidebar:
        if warmer.seconds is None:
            _warming_status()  # redrawn every 2 s until the next full run of the page finds it done
        else:
            st.caption(escape_markdown(warmer.ready_line()))


@st.fragment(run_every=2)
def _warming_status() -> None:
    if warmer.seconds is None:
        st.progress(warmer.fraction, text=f"Preparing {warmer.model} for the causal-LM pages in the background: "
                                          f"{warmer.message}")
    else:
        st.caption(escape_markdown(warmer.ready_line()))
