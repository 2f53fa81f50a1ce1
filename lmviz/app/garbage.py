"""Python's garbage collection after a page's run (Streamlit's own, after every run, is off in
.streamlit/config.toml), made cheap by freezing what lives as long as the process.

A run may leave tensors in reference cycles (a stopped page's traceback holds its frames), which only a full
collection frees; but a full collection walks every object the process tracks, and with torch, transformers,
plotly and pandas imported that is about 460,000 objects and 0.3-0.5 s of CPU, on every run of every lesson.
Nearly all of them are the libraries' modules, classes and functions, which never die: ``gc.freeze()`` moves them
out of the collector's sight, and the collections after it walk only what was made since (benchmarks/perf.py,
"a page run's garbage collection", measures both).

A freeze also takes in what the sessions hold at that moment, and some of it dies later in a cycle that a frozen
object never leaves: each session's last page run (its module's dictionary and the functions in it reference each
other, and its widgets' callbacks keep them alive until the session's next run), with that run's tables and
tensors. So a freeze is never for good: the next one unfreezes first, and its full collection frees whatever died
since. One comes whenever modules were imported since the last (torch in the warm start's thread, a lesson's own
libraries at its first visit in this process), and at least every REFREEZE_SECONDS while pages run."""

from __future__ import annotations

import gc
import sys
import threading
import time

# How long at most a frozen object that has become garbage waits for the next refreeze's full collection: a full
# collection's 0.3 s of CPU once a minute, where it was on every run
REFREEZE_SECONDS = 60.0

_clock = time.monotonic
_lock = threading.Lock()  # the sessions' script threads end their runs at the same time
_modules_when_frozen = 0  # how many modules were imported at the last freeze
_frozen_at = float("-inf")


def collect_after_run() -> None:
    """Collect every generation that is not frozen; then, if modules were imported since the last freeze or it is
    REFREEZE_SECONDS old, unfreeze, collect everything (what died since the last freeze included) and freeze all
    that is left."""
    global _modules_when_frozen, _frozen_at
    with _lock:
        imported, now = len(sys.modules), _clock()
        if imported <= _modules_when_frozen and now - _frozen_at < REFREEZE_SECONDS:
            gc.collect()
            return
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _modules_when_frozen, _frozen_at = imported, now
