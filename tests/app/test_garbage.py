"""lmviz.app.garbage: the collection after a page's run frees a run's reference cycles, and freezes the long-lived
objects only when modules were imported or the last freeze is old, never the sessions' objects of an ordinary run;
what a freeze took in and died since is freed by the next."""

import gc
import sys
import types
import weakref

from streamlit.testing.v1 import AppTest

from lmviz.app import garbage


class Node:
    """An object that can sit in a reference cycle and be watched with a weak reference."""


def a_cycle() -> tuple[Node, weakref.ref]:
    node = Node()
    node.self = node
    return node, weakref.ref(node)


def test_a_cycle_made_after_a_freeze_is_collected_by_the_next_run():
    garbage.collect_after_run()  # whatever this process imported so far, frozen
    node, watched = a_cycle()
    del node
    garbage.collect_after_run()
    assert watched() is None


def test_an_ordinary_runs_objects_are_not_frozen_and_are_freed_once_they_become_garbage(monkeypatch):
    monkeypatch.setattr(garbage, "_clock", lambda: 0.0)  # the once-a-minute freeze must not fall between the runs
    garbage.collect_after_run()
    frozen = gc.get_freeze_count()
    node, watched = a_cycle()  # alive during a run: a session's state
    garbage.collect_after_run()  # no module imported since the last freeze: nothing frozen
    assert gc.get_freeze_count() == frozen
    del node  # the session ends
    garbage.collect_after_run()
    assert watched() is None


def test_a_run_that_imported_modules_freezes_what_is_alive_and_a_later_collection_walks_none_of_it(monkeypatch):
    garbage.collect_after_run()
    monkeypatch.setitem(sys.modules, "lmviz_test_just_imported", types.ModuleType("lmviz_test_just_imported"))
    kept = [Node() for _ in range(1000)]
    garbage.collect_after_run()
    assert gc.get_freeze_count() >= len(kept)
    walked = {id(o) for o in gc.get_objects()}  # what a collection walks
    assert not any(id(node) in walked for node in kept)


def test_a_model_frozen_at_its_first_visit_is_still_freed_when_the_cache_lets_it_go(monkeypatch):
    """A model is loaded on the run that first imports its modules, so it is frozen with them; Streamlit's cache keeps
    three models and drops the oldest, which must then leave memory: a model and its batcher hold no reference
    cycle, and their reference counts free them."""
    from lmviz.models.loading import TINY_GPT, load_causal_lm
    from lmviz.serving.batcher import Batcher

    loaded = load_causal_lm(TINY_GPT)
    batcher = Batcher(loaded)
    batcher.analyse("The cat sat on the mat.")
    monkeypatch.setitem(sys.modules, "lmviz_test_just_imported", types.ModuleType("lmviz_test_just_imported"))
    garbage.collect_after_run()
    model, whole = weakref.ref(loaded.model), weakref.ref(loaded)
    batcher.close()  # what the cache's on_release does (lmviz.app.caches.get_batcher)
    del loaded, batcher
    assert model() is None and whole() is None


# A page as the lessons' are: a function defined at its top level is a widget's callback, so the page's dictionary
# outlives its run (until the session's next), in a cycle with that function; it keeps a weak reference to each
# run's object in the session's state.
CALLBACK_PAGE = """
import weakref
import streamlit as st
from lmviz.app.garbage import collect_after_run

class Table:
    pass

table = Table()

def again():
    pass

st.button("Again", on_click=again)
st.session_state.setdefault("tables", []).append(weakref.ref(table))
collect_after_run()
"""


def test_a_page_run_frozen_with_its_callback_is_freed_by_the_next_refreeze(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(garbage, "_clock", lambda: now[0])
    monkeypatch.setattr(garbage, "_frozen_at", float("-inf"))  # the first run freezes
    page = AppTest.from_string(CALLBACK_PAGE)
    page.run()
    now[0] += 1.0
    page.run()  # the first run's page is garbage now, in a cycle, and frozen: this run's collection leaves it
    first = page.session_state["tables"][0]
    assert first() is not None
    now[0] += garbage.REFREEZE_SECONDS
    page.run()  # unfreezes, collects, freezes again
    assert first() is None
    assert not page.exception
