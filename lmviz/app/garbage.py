"""Python's garbage collection after a page's run (Streamlit's own, after every run, is off in
.streamlit/config.toml), made cheap by freezing what lives as long as the process.

A run may leave tensors in reference cycles (a stopped page's traceback holds its frames), which only a full
collection frees; but a full collection walks every object the process tracks, and with torch, transformers,
plotly and pandas imported that is about 460,000 objects and 0.3-0.5 s of CPU, on every run of every lesson.
Nearly all of them are the libraries' modules, classes and functions, which never die: ``gc.freeze()`` moves them
out of the collector's sight, and the collections after it walk only what was made since (benchmarks/perf.py,
"a page run's garbage collection", measures both)."""

from __future__ import annotations

import gc
import sys

_modules_when_frozen = 0  # how many modules were imported at the last freeze


def collect_after_run() -> None:
    """Collect every generation; then, if modules were imported since the last freeze (torch in the warm start's
    thread, a lesson's own libraries at its first visit in this process), freeze all that is left.

    What a freeze keeps is never collected again: an object alive at a freeze that later becomes garbage in a
    reference cycle stays in memory (one freed by its reference count is freed as ever). Freezing only when
    modules were imported bounds that to a few moments in a process's life (each page's first visit, at most),
    each right after a full collection, when what is alive is the libraries and the sessions' state of that
    moment. A model is loaded on the run that first imports its modules, so it is frozen with them: it and its
    batcher hold no reference cycle, and leave memory when Streamlit's cache drops them (tests/app/test_garbage.py)."""
    global _modules_when_frozen
    gc.collect()
    imported = len(sys.modules)
    if imported > _modules_when_frozen:
        _modules_when_frozen = imported
        gc.freeze()
