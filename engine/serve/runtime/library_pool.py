"""The model pool over the real library and the real planned load (pool.py says what it does).

The ids are the ones clients put in ``model``: a GGUF's file name without
``.gguf``, a Hub cache checkpoint's repository id, a folder's name. Two files
with one name: the first the library lists (bundled, models folder, added
folders, Hub cache) keeps it.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from ...errors import HearthError
from .pool import DEFAULT_TTL_S, ModelPool, Opened, reduced
from .targets import file_model_id

CATALOG_TTL_S = 5.0   # a scan reads every model's header: /v1/models and a burst of requests share one


def library_ids(models: Iterable) -> dict[str, str]:
    """{API model id: the model as a LoadSpec names it} for the library's models."""
    out: dict[str, str] = {}
    for m in models:
        if m.error:
            continue
        mid = file_model_id(m.path) if m.kind == "gguf" else (m.repo_id or Path(m.path).name)
        out.setdefault(mid, str(m.path))
    return out


def library_pool(data_dir: Path, *, parallel: int, queue_limit: int, n_ctx: int | None = None,
                 n_threads: int | None = None, default_ttl: float = DEFAULT_TTL_S,
                 library=None, exactness: str | None = None) -> ModelPool:
    """A pool that loads the library's models as ``engine serve``'s own model is loaded: planned
    (for the memory the held models leave), with a batch context of ``parallel`` sequences."""
    from ...config import default_exactness
    from ...sizing import load_machine as planning  # planning.machine: tests put a simulated machine there
    from ...loading.load import load_model
    from ...sizing.load_machine import shortfall_text
    from ...sizing.load_plan import plan_spec
    from ...sizing.load_spec import LoadSpec, or_auto
    from ...library.local import LIBRARY_FILE, Library
    from .scheduler import Scheduler

    lib = library or Library(Path(data_dir) / LIBRARY_FILE)
    cached: list = [0.0, {}]

    def catalog() -> dict[str, str]:
        if time.monotonic() - cached[0] > CATALOG_TTL_S:
            cached[:] = [time.monotonic(), library_ids(lib.scan())]
        return cached[1]

    def request(model: str) -> LoadSpec:
        return LoadSpec(model=model, context=or_auto(n_ctx), n_threads=or_auto(n_threads), server_parallel=parallel,
                        exactness=exactness or default_exactness())

    def fits(model: str, held: int) -> str | None:
        req = request(model)
        try:
            plan = plan_spec(req, reduced(planning.machine(req.plan_format), held))
        except HearthError:
            return None  # a model the planner cannot read: its load says why
        return None if plan is None or plan.fits else shortfall_text(plan)

    def open_model(model: str, held: int) -> Opened:
        req = request(model)
        loaded = load_model(req, data_dir=data_dir, hardware=reduced(planning.machine(req.plan_format), held))
        info = loaded.model
        assert info is not None and info.local is not None  # load_model describes what it loaded, here
        return Opened(Scheduler(loaded.engine, parallel=parallel, queue_limit=queue_limit, window=False),
                      info.local.memory_total, info.n_ctx)

    return ModelPool(catalog, fits=fits, open_model=open_model, default_ttl=default_ttl)
