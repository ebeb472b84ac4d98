"""GGUF models on llama.cpp, through llama-cpp-python's low-level API.

backend.py is the Backend the shared loop drives; batch.py the several-sequence
context the server batches in; grammar.py GBNF constraints; log.py llama.cpp's
captured log and the errors read from it; devices.py the devices ggml reports.

``init()`` starts llama.cpp once per process, in the one order that works: the
log callback first (so the load's buffer lines are captured), then the backend.
Every entry point that touches llama.cpp calls it; importing a module of this
package starts nothing.
"""
from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_started = False


def init() -> None:
    """Set llama.cpp up for this process (idempotent, thread-safe)."""
    global _started
    if _started:
        return
    with _lock:
        if _started:
            return
        # ggml's CPU backend runs K-quant matmuls of 8+ rows through a tiled kernel
        # and smaller ones through the row-by-row dot product; the two round
        # differently, so a token's logits depended on its batch's size (0.2-0.5 logit
        # on Q4_K_M: a 1-5 token draft verification or short new message against an
        # 8+ token prefill). Hearth promises the prefix cache and speculative
        # decoding never change the output, so the tiled kernel is off: decode and
        # verification batches (< 8 rows) are unaffected, K-quant prompt prefill runs
        # ~35% slower on this CPU (27 vs 37-49 tok/s on the 1.5B Q4_K_M). ggml reads
        # the variable once, at the first matmul in the process; set it to 1 before
        # starting Hearth to trade exactness for prefill speed.
        os.environ.setdefault("GGML_CPU_TILED_MM", "0")
        import llama_cpp as lc

        from . import log
        log.install()
        lc.llama_backend_init()
        _started = True
