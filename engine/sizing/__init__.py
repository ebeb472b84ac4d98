"""Automatic sizing: choose how to load a model so that it fits, and say why.

One job per module; each imports only modules listed above it, so there are no cycles:

- ``load_spec``: LoadSpec, what the user chose for a load, with one AUTO for "let Hearth choose".
- ``hardware``: what this machine has (GPUs, RAM, cores), or a simulated machine.
- ``bandwidth``: this machine's memory read bandwidth, measured (the roofline of a decode step).
- ``shape``: the memory-relevant shape of a model (GGUF header, safetensors headers).
- ``resolve``: what a model reference names for the planner (a file, a folder, a catalogue model).
- ``drafts``: a draft model on disk for speculative decoding, and a draft's vocabulary.
- ``memory``: bytes per pool for one concrete configuration.
- ``search``: the give-up order and the greedy search over the knobs; it records, for each
  knob it did not set to its best, the better value and that value's shortfall.
- ``plan``: ``plan_for(model, hardware, choices)`` -> ``Plan``, the search's result as plain data.
- ``report``: rendering only: one-line reasons, the breakdown table, JSON.
- ``reality``: the plan against what the backend allocated; the next smaller plan after out-of-memory.
- ``load_machine``: the machine a load is planned for, as the backend will see it; a shortfall in words.
- ``load_plan``: ``plan_load(spec, hardware)`` -> (EngineConfig, Plan): the one shape change of a load.

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
