"""The one planned load every caller uses: the window, ``engine serve``/``chat``/``plan``, the benchmarks.

request.py      ModelCheck: what can be known about a model choice before it loads
load.py         load_model(): resolve, plan, open, retry once on out-of-memory, check -> ModelInfo
gpu_guard.py    the marker that says layers are on a device (a GPU that stops the process)
estimate.py     a quick one-configuration memory estimate, for a dialog's first number

This package is public: the app loads a model through the names below (docs/layout.md, "The engine's
face"), with what it loads: a LoadSpec and its AUTO, planned by plan_load (engine/sizing/load_spec.py
and load_plan.py: the one shape change, a spec to an EngineConfig), and a load's other choices: llama.cpp's
CPU threads (backends/llama/threadpool.py) and the prefix cache on disk (kv/disk_store.py).
Each is imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from ..backends.llama.threadpool import ThreadChoice, check_poll, thread_option
    from ..kv.disk_store import DEFAULT_DISK_BUDGET, clear_store, store_usage
    from .estimate import quick_estimate
    from .gpu_guard import GpuGuard, crash_text
    from .load import PLAN_LOG, load_model
    from ..sizing.load_plan import plan_load, plan_spec, prefix_store_dir
    from ..sizing.load_spec import (AUTO, AUTO_FIELDS, BACKENDS, BUNDLED, HUB_PLACEHOLDER, KV_TYPES, QUANTS, SOURCES,
                                    Auto, LoadSpec, check_model_string, effective_backend, infer_source, remote_model,
                                    runs_gguf, split_remote)
    from .request import ModelCheck
    from ..sizing.load_machine import machine, shortfall_text, with_workers

_WHERE = {
    **dict.fromkeys(["ThreadChoice", "check_poll", "thread_option"], "..backends.llama.threadpool"),
    **dict.fromkeys(["DEFAULT_DISK_BUDGET", "clear_store", "store_usage"], "..kv.disk_store"),
    "quick_estimate": ".estimate", "GpuGuard": ".gpu_guard", "crash_text": ".gpu_guard",
    "PLAN_LOG": ".load", "load_model": ".load",
    **dict.fromkeys(["AUTO", "AUTO_FIELDS", "Auto", "BACKENDS", "BUNDLED", "HUB_PLACEHOLDER", "KV_TYPES", "QUANTS",
                     "SOURCES", "LoadSpec", "check_model_string", "effective_backend", "infer_source", "remote_model",
                     "runs_gguf", "split_remote"], "..sizing.load_spec"),
    **dict.fromkeys(["plan_load", "plan_spec", "prefix_store_dir"], "..sizing.load_plan"),
    "ModelCheck": ".request",
    **dict.fromkeys(["machine", "shortfall_text", "with_workers"], "..sizing.load_machine"),
}
__all__ = ["AUTO", "AUTO_FIELDS", "Auto", "BACKENDS", "BUNDLED", "DEFAULT_DISK_BUDGET", "GpuGuard", "HUB_PLACEHOLDER",
           "KV_TYPES", "LoadSpec", "ModelCheck", "PLAN_LOG", "QUANTS", "SOURCES", "ThreadChoice", "check_model_string",
           "check_poll", "clear_store", "crash_text", "effective_backend", "infer_source", "load_model", "machine",
           "plan_load", "plan_spec", "prefix_store_dir", "quick_estimate", "remote_model", "runs_gguf",
           "shortfall_text", "split_remote", "store_usage", "thread_option", "with_workers"]
__getattr__ = lazy_exports(__name__, _WHERE)
