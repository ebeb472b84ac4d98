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
