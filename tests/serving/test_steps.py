"""lmviz.serving.steps: steps admitted in order while memory allows, each waiting one told its place, and the
memory a step may use read from the machine or its cgroup."""

import threading
import time

import pytest
import torch

from lmviz.app.steps import place_sentence
from lmviz.serving import steps
from lmviz.serving.steps import Place, StepGate, free_memory, step_memory

GIB = 2**30
BOUND = 10  # seconds any wait here may take at most; far more than it needs


def start_step(gate: StepGate, owner: str, needs: int, release: threading.Event, log: list) -> threading.Thread:
    """A thread that takes a step as ``owner`` and holds it until ``release``; ``log`` gets (owner, "in"/"out")."""
    def run():
        with gate.owned_by(owner), gate.step("sgd", needs):
            log.append((owner, "in"))
            release.wait(BOUND)
            log.append((owner, "out"))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_until(check) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_steps_that_do_not_fit_wait_in_order_and_each_knows_its_place():
    gate, log = StepGate(most_at_once=4, free=lambda device: 3 * GIB), []
    releases = {name: threading.Event() for name in "abcd"}
    threads = {}
    for name in "abcd":  # 1.5 GiB each: two fit in 3 GiB, the other two wait, c before d
        threads[name] = start_step(gate, name, int(1.5 * GIB), releases[name], log)
        wait_until(lambda: gate.place(name, "sgd") is not None)
    wait_until(lambda: len(log) == 2)
    assert log == [("a", "in"), ("b", "in")]
    assert gate.place("a", "sgd").running and not gate.place("c", "sgd").running
    assert (gate.place("c", "sgd").ahead, gate.place("d", "sgd").ahead) == (2, 3)
    assert gate.place("c", "sgd").wait_s is None  # no step timed yet: no estimate
    releases["a"].set()
    wait_until(lambda: ("c", "in") in log)
    assert gate.place("d", "sgd").ahead == 2 and gate.place("d", "sgd").wait_s is not None
    for name in "bcd":
        releases[name].set()
    for thread in threads.values():
        thread.join(BOUND)
    assert [owner for owner, what in log if what == "in"] == list("abcd")
    assert gate.place("d", "sgd") is None  # done


def test_the_estimate_is_the_steps_ahead_run_as_many_at_a_time_as_now_each_the_median_time():
    gate = StepGate(most_at_once=1, free=lambda device: 100 * GIB)
    for seconds in (0.05, 0.2, 0.1):
        with gate.step("grpo"):
            time.sleep(seconds)
    median = sorted(gate._seconds["grpo"])[1]
    assert median == pytest.approx(0.1, abs=0.05)
    release, log = threading.Event(), []
    first = start_step(gate, "first", 0, release, log)
    wait_until(lambda: log)
    second = start_step(gate, "second", 0, release, log)
    wait_until(lambda: gate.place("second", "grpo") is not None)
    place = gate.place("second", "grpo")
    assert (place.ahead, place.wait_s) == (1, pytest.approx(median))  # one ahead, one at a time
    release.set()
    first.join(BOUND), second.join(BOUND)


def test_at_most_most_at_once_run_together_whatever_the_memory():
    gate, log, release = StepGate(most_at_once=2, free=lambda device: 100 * GIB), [], threading.Event()
    threads = [start_step(gate, name, GIB, release, log) for name in "xyz"]
    wait_until(lambda: len(log) == 2)
    time.sleep(0.2)
    assert len(log) == 2  # the third waits
    release.set()
    for thread in threads:
        thread.join(BOUND)
    assert len(log) == 6


def test_a_step_larger_than_the_free_memory_runs_when_nothing_else_does():
    gate = StepGate(free=lambda device: GIB)
    with gate.step("sgd", needs=5 * GIB):
        ran = True
    assert ran


def test_free_memory_is_the_machines_or_what_the_cgroup_leaves_whichever_is_less(tmp_path, monkeypatch):
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    monkeypatch.setattr(steps, "CGROUP_FILES", ((str(limit), str(usage)),))
    machine = steps.psutil.virtual_memory().available
    limit.write_text("max\n"), usage.write_text("123\n")  # no limit of its own
    assert abs(free_memory() - machine) < 256 * 2**20  # the machine's, give or take what changed meanwhile
    limit.write_text(f"{2 * GIB}\n"), usage.write_text(f"{GIB // 2}\n")
    assert free_memory() == int(1.5 * GIB)
    usage.write_text(f"{3 * GIB}\n")  # over its limit: nothing free
    assert free_memory() == 0


def test_a_step_is_expected_to_hold_twice_the_weights():
    model = torch.nn.Linear(100, 10)  # 1 010 float32 weights
    assert step_memory(model) == 2 * 1010 * 4


@pytest.mark.parametrize("place, sentence", [
    (None, "Taking 1 step…"),
    (Place(True, 0, 0.0, 3.7), "Taking 1 step… (3 s so far)"),
    (Place(False, 2, 5.2, 1.0), "2 steps are ahead of yours, about 6 s. Then: Taking 1 step…"),
    (Place(False, 1, None, 1.0), "1 step is ahead of yours: yours starts when it is done. Then: Taking 1 step…"),
])
def test_the_status_says_the_place_and_the_wait(place, sentence):
    assert place_sentence("Taking 1 step…", place) == sentence


def test_the_status_says_how_far_the_computation_has_come_once_it_runs():
    progress = (0.25, "2 of at most 8 tokens drawn.")
    assert place_sentence("Sampling 8 answers…", None, progress) == \
        "Sampling 8 answers… 2 of at most 8 tokens drawn. (25 %)"
    running = Place(True, 0, 0.0, 3.0)
    assert place_sentence("1 update…", running, (0.5, "Update 1 of 1 done; scoring the group again…")) == \
        "1 update… Update 1 of 1 done; scoring the group again… (50 %)"
    waiting = Place(False, 1, 4.0, 1.0)  # a progress left from before it waited is not shown over its place
    assert place_sentence("1 update…", waiting, progress) == "1 step is ahead of yours, about 4 s. Then: 1 update…"
