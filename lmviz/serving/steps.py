"""Training steps for a whole class: as many at once as memory allows, the rest in line, each told its place.

A step of training (One step of learning's SGD and AdamW, RL fine-tuning's updates) holds a second set of the
model's weights and their activations while it runs: about twice the weights' bytes at the page's longest text
(benchmarks.gradient_step: SmolLM2's 513 MiB of weights, +943 MiB for a 256-token step). One ``StepGate`` per
process admits steps while the memory they would hold fits in what is free (the machine's, or a container's
cgroup limit, whichever is less; on a GPU, the device's), and at most ``most_at_once`` of them; the others wait
in the order they came. A waiting step's place and an estimate of its wait, from the times the gate measured,
can be read at any moment (``place``), so that a page tells a student "2 steps ahead of yours, about 6 s".

Identical requests are not the gate's business: a page's cached function (st.cache_data) computes one key once
while the other sessions asking for it wait for its result, so 30 students on the teacher's settings cost one
step (benchmarks.class_steps measures it).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

STEP_MEMORY_PER_WEIGHT_BYTE = 2.0  # a step's peak ÷ the weights' bytes: 943 ÷ 513 = 1.84 at 256 tokens, rounded up
# Steps running together at most, whatever the memory. One step on a CPU keeps its cores about 70 % busy; two keep
# them busy, and beyond that each only slows the others (benchmarks.class_steps, 30 students on 2 cores: p50 17.5 s
# one at a time, 10.6 s two at a time, 13.0 s four at a time)
MOST_AT_ONCE = 2
MEASURED_STEPS = 20  # the step times an estimate is made from: the last ones of that kind
CGROUP_FILES = (  # (limit, usage): cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def free_memory(device: str = "cpu") -> int:
    """Bytes a new step may use now: on a GPU the device's free memory; on the CPU the machine's available memory,
    or what is left under this container's cgroup limit when that is less."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info(torch.device(device))[0]
    free = psutil.virtual_memory().available
    for limit_file, usage_file in CGROUP_FILES:
        try:
            limit, usage = (Path(name).read_text().strip() for name in (limit_file, usage_file))
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit():  # "max" (v2) or a huge number (v1): no limit of its own
            free = min(free, max(0, int(limit) - int(usage)))
        break
    return free


def step_memory(model) -> int:
    """Bytes one step on ``model`` is expected to hold at its peak, from the weights' bytes."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return math.ceil(STEP_MEMORY_PER_WEIGHT_BYTE * weights)


@dataclass(frozen=True)
class Place:
    """Where a step stands: ``ahead`` steps before it (running, or waiting longer), or running itself."""
    running: bool
    ahead: int
    wait_s: float | None  # the estimated wait before it starts; None until a step of its kind has been timed
    running_s: float  # how long it has run, or waited


class StepGate:
    """Admits steps into ``step(kind, needs)`` in the order they come, while ``free()`` leaves room for the bytes
    each ``needs`` and fewer than ``most_at_once`` run; any thread may call it. The first step waiting is always
    admitted when nothing runs, so that a step larger than the memory the gate sees still runs (and may fail with
    the page's sentence) rather than wait for ever."""

    def __init__(self, most_at_once: int = MOST_AT_ONCE, free=free_memory):
        self.most_at_once, self._free = most_at_once, free
        self._changed = threading.Condition()
        self._waiting: collections.deque = collections.deque()  # tickets, in order
        self._running: dict[object, tuple[str, float, int]] = {}  # ticket: (kind, started, bytes)
        self._since: dict[object, float] = {}
        self._seconds: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=MEASURED_STEPS))
        self._local = threading.local()

    @contextlib.contextmanager
    def owned_by(self, owner: str):
        """Steps this thread takes inside are ``owner``'s (a session), so that ``place(owner)`` finds them."""
        self._local.owner = owner
        try:
            yield
        finally:
            self._local.owner = None

    @contextlib.contextmanager
    def step(self, kind: str, needs: int = 0, device: str = "cpu"):
        """Wait for the turn of a step of ``kind`` that will hold ``needs`` bytes on ``device``; run it; time it."""
        ticket = getattr(self._local, "owner", None) or object()
        with self._changed:
            self._waiting.append(ticket)
            self._since[ticket] = time.monotonic()
            while not self._admits(ticket, needs, device):
                self._changed.wait(timeout=0.5)  # memory freed by something else is seen within half a second
            self._waiting.popleft()
            self._running[ticket] = (kind, time.monotonic(), needs)
        try:
            yield
        finally:
            with self._changed:
                kind, started, _ = self._running.pop(ticket)
                self._since.pop(ticket, None)
                self._seconds[kind].append(time.monotonic() - started)
                self._changed.notify_all()

    def _admits(self, ticket, needs: int, device: str) -> bool:
        if self._waiting[0] is not ticket:
            return False
        if not self._running:
            return True
        held = sum(n for _, _, n in self._running.values())  # what the running steps will still take, at most
        return len(self._running) < self.most_at_once and needs <= self._free(device) - held

    def place(self, owner: str, kind: str) -> Place | None:
        """Where ``owner``'s step stands now; None when it has none in the gate (not yet there, or done)."""
        with self._changed:
            now = time.monotonic()
            if owner in self._running:
                return Place(True, 0, 0.0, now - self._running[owner][1])
            if owner not in self._waiting:
                return None
            ahead = len(self._running) + list(self._waiting).index(owner)
            return Place(False, ahead, self._wait_estimate(kind, ahead), now - self._since[owner])

    def _wait_estimate(self, kind: str, ahead: int) -> float | None:
        """The steps ahead, run as many at a time as now, each as long as the median of the last ones timed."""
        timed = self._seconds.get(kind) or next((s for s in self._seconds.values() if s), None)
        if not timed:
            return None
        at_once = max(1, len(self._running))
        return math.ceil(ahead / at_once) * statistics.median(timed)


def steps_at_once_setting() -> int:
    """LMVIZ_STEPS_AT_ONCE, when a host sets it (a whole number from 1), else MOST_AT_ONCE."""
    value = os.environ.get("LMVIZ_STEPS_AT_ONCE", "")
    return int(value) if value.isdigit() and int(value) >= 1 else MOST_AT_ONCE
