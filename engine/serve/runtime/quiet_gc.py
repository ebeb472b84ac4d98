"""Keeping Python's cyclic garbage collector out of a server's replies.

A full collection walks every object alive and holds the GIL while it does: once a model is loaded (its
vocabulary tables, the server's modules) one took 12-23 ms in ``engine serve`` on the bundled model (this
2-core VM), so a request whose first token fell in one waited that long, a p99 TTFT the client sees.
What is alive once a model is loaded lives as long as the model: frozen, it leaves the collector's
reach, and later collections walk only what was made since. The window does the same (its model
loading freezes around each load), and so does ``bench serve``'s client process, whose own full
collections took 15-56 ms and landed in whichever side's request was in flight.
"""
from __future__ import annotations

import gc


def settle() -> None:
    """Once what lives long is made (a model loaded; a benchmark's client set up): collect the garbage
    made so far now, not during a reply, then freeze everything alive, so later collections walk only
    newer objects. What an earlier call froze is thawed and collected first: a model the pool has
    unloaded since may have left reference cycles there, which no collection reaches while frozen."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
