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

Import from the module that defines a name (``from engine.sizing.plan import plan_for``);
this file imports nothing, so using one part never loads the rest.
"""
