"""The one planned load every caller uses: the window, ``engine serve``/``chat``/``plan``, the benchmarks.

request.py   LoadRequest: what the user chose (Auto included), and the model's source
plan.py      the memory plan for a request, on the machine as the backend sees it
load.py      load_model(): resolve, plan, open, retry once on out-of-memory, check -> LoadedModel
gpu_guard.py the marker that says layers are on a device (a GPU that stops the process)
backend.py   opening a backend for a resolved model (a draft on disk: engine/spec/find_draft.py)
checks.py    whether a transformers folder may be loaded (no pickles, no remote code), without torch
estimate.py  a quick one-configuration memory estimate, for a dialog's first number

Import from the modules themselves: this package's ``__init__`` imports nothing, so that
engine.engine can use backend.py while load.py uses engine.engine.
"""
