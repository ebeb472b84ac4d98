"""Hugging Face models through transformers (+ bitsandbytes, accelerate).

The shared decode loop drives this backend exactly like the llama.cpp one.
torch and transformers are imported in this package only, and the package is
imported only when the user picks this backend.

Sources: a local transformers folder (safetensors; pickled weights and
remote code only when explicitly allowed), a Hub id (downloaded by
``engine.models.hub``), or a GGUF file, dequantized by transformers once and kept as
a safetensors folder in Hearth's cache so the next load takes seconds.

One job per module: ``sources`` (what may be loaded, GGUF conversion, content
identity), ``placement`` (quantization, dtype, device map), ``load`` (reference
-> torch model + tokenizer), ``tokens`` (token bytes, end-of-turn ids), ``kv``
(the growing cache and its snapshots), ``backend`` (HFBackend and ``load()``).
"""
from __future__ import annotations

import logging

import transformers

from ...errors import ContextFullError
from .backend import HFBackend, load
from .kv import STATE_FORMAT, GrowingLayer, HearthCache, HFState
from .load import DEFAULT_CTX, HFModel, load_hf_model
from .placement import DEVICES, QUANTS, HFPlacement, compute_dtype, default_placement, kv_bytes_per_token, quant_config
from .sources import PICKLE_SUFFIXES, check_folder, gguf_as_folder, source_sha256

# Progress bars go to the terminal, which the window does not have; load times are logged instead.
transformers.utils.logging.disable_progress_bar()


class _DropInt8CastNotice(logging.Filter):
    """bitsandbytes logs, on every int8 matmul, that fp32 activations are cast to
    fp16 for LLM.int8; that is the documented behaviour and would flood the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "inputs will be cast from" not in record.getMessage()


logging.getLogger("bitsandbytes.autograd._functions").addFilter(_DropInt8CastNotice())

__all__ = ["ContextFullError", "DEFAULT_CTX", "DEVICES", "GrowingLayer", "HFBackend", "HFState", "HearthCache",
           "HFModel", "PICKLE_SUFFIXES", "HFPlacement", "QUANTS", "STATE_FORMAT", "check_folder",
           "compute_dtype", "default_placement", "gguf_as_folder", "kv_bytes_per_token", "load", "load_hf_model",
           "quant_config", "source_sha256"]
