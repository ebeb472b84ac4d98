"""The one planned load every caller uses: the window, ``engine serve``/``chat``/``plan``, the benchmarks.

request.py   LoadRequest: what the user chose (Auto included), and the model's source
plan.py      the memory plan for a request, and the EngineConfig that carries it out
load.py      load_model(): resolve, plan, open, retry once on out-of-memory, check -> ModelInfo
gpu_guard.py the marker that says layers are on a device (a GPU that stops the process)
estimate.py  a quick one-configuration memory estimate, for a dialog's first number
"""
