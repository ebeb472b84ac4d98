"""GGUF models on llama.cpp, through llama-cpp-python's low-level API.

backend.py is the Backend the engine core drives; sequences.py the context's KV
streams and the step's one batch; params.py a load's parameters and the exactness
switches; state.py a sequence's snapshot; grammar.py GBNF constraints; mtmd.py a
vision projector (images into token positions and encoded rows); image_decode.py
those rows read into the context; log.py llama.cpp's captured log and the errors
read from it; devices.py the devices ggml reports; threadpool.py the CPU thread
pool; rpc.py the RPC workers.

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
        # differently, so a token's logits depend on its batch's size (0.2-0.5 logit
        # on Q4_K_M). Hearth's build switches it, with tinyBLAS, per graph
        # (ExactKernels: off while an exact-profile model is loaded). A build without
        # that switch can only turn it off for the whole process, which ggml reads once,
        # at the first matmul: off then, so the exact profile keeps its promise.
        from .params import ExactKernels

        if not ExactKernels.available():
            os.environ.setdefault("GGML_CPU_TILED_MM", "0")
        import llama_cpp as lc

        from . import log
        log.install()
        lc.llama_backend_init()
        _started = True
