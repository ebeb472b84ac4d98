"""Python's cyclic garbage collector kept out of a server's replies (engine/serve/runtime/quiet_gc.py):
what is alive once a model is loaded is frozen, and the garbage made so far is collected then."""
from __future__ import annotations

import gc
import weakref

from engine.serve.runtime.quiet_gc import settle


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_settle_collects_the_garbage_so_far_and_freezes_what_lives():
    gc.unfreeze()
    try:
        alive = Node()
        dead = Node()
        gone = weakref.ref(dead)
        del dead
        settle()
        assert gone() is None  # collected now, not in a later reply
        # What lives is out of every generation a collection walks: a full one scans only newer objects.
        assert gc.get_freeze_count() > 0
        assert not any(o is alive for o in gc.get_objects(generation=2))
        newer = Node()
        assert any(o is newer for o in gc.get_objects())  # and what is made later is collected as ever
    finally:
        gc.unfreeze()


def test_what_an_earlier_settle_froze_is_collected_by_the_next_once_it_is_garbage():
    # A model the pool unloads was frozen when it loaded: its cycles must not stay for good.
    gc.unfreeze()
    try:
        model = Node()
        gone = weakref.ref(model)
        settle()  # loaded: frozen
        del model  # unloaded: garbage, but out of every collection's reach while frozen
        gc.collect()
        assert gone() is not None
        settle()  # the next load
        assert gone() is None
    finally:
        gc.unfreeze()
