"""Automatic sizing: choose how to load a model so that it fits, and say why.

One job per module; each imports only modules listed above it, so there are no cycles:

- ``hardware``: what this machine has (GPUs, RAM, cores), or a simulated machine.
- ``spec``: the memory-relevant shape of a model (GGUF header, safetensors headers, catalogue).
- ``memory``: bytes per pool for one concrete configuration.
- ``search``: the give-up order and the greedy search over the knobs; it records, for each
  knob it did not set to its best, the better value and that value's shortfall.
- ``plan``: ``plan_for(model, hardware, choices)`` -> ``Plan``, the search's result as plain data.
- ``report``: rendering only: one-line reasons, the breakdown table, JSON.
- ``reality``: the plan against what the backend allocated; the out-of-memory retry.
- ``cli``: ``python -m engine plan``.

Inside the engine, import from the module that defines a name (``from engine.sizing.plan import
plan_for``). This package is public: the app uses the names below (docs/layout.md, "The engine's
face"), each imported from its module when first asked, so using one part never loads the rest.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .bandwidth import measure_read_bandwidth
    from .hardware import Hardware, format_size, probe
    from .plan import STATUS_FITS, Choices, Plan, plan_for
    from .reality import is_device_failure, is_out_of_memory
    from .report import knob_values, render_table
    from .resolve import Resolved, known_models, resolve_spec

_WHERE = {
    "measure_read_bandwidth": ".bandwidth",
    **dict.fromkeys(["Hardware", "format_size", "probe"], ".hardware"),
    **dict.fromkeys(["STATUS_FITS", "Choices", "Plan", "plan_for"], ".plan"),
    **dict.fromkeys(["is_device_failure", "is_out_of_memory"], ".reality"),
    **dict.fromkeys(["knob_values", "render_table"], ".report"),
    **dict.fromkeys(["Resolved", "known_models", "resolve_spec"], ".resolve"),
}
__all__ = ["Choices", "Hardware", "Plan", "Resolved", "STATUS_FITS", "format_size", "is_device_failure",
           "is_out_of_memory", "knob_values", "known_models", "measure_read_bandwidth", "plan_for", "probe",
           "render_table", "resolve_spec"]
__getattr__ = lazy_exports(__name__, _WHERE)
