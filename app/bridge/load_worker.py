"""Model loading off the GUI thread.

The load worker lives on the "engine thread" (app/bridge/engine_host.py) beside
the generation worker, so a load and a generation never overlap (the engine
allows one stream at a time, and a new model should replace the old one, not
sit next to it in memory). It only emits signals; it never touches widgets.

A Hub model is downloaded inside the load, on the engine thread: the
engine's byte progress is forwarded as a signal (the window draws the bar),
and Cancel stops the download between chunks (the part fetched is kept, so
the next try resumes it).
"""
from __future__ import annotations

import itertools
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from engine import HearthError

from app.bridge.generation_worker import SharedEngine
from app.core import gpu_guard
from app.core import plan_load
from app.core.model_choice import model_ref, model_title



_REQUEST_IDS = itertools.count(1)


@dataclass(slots=True)
class LoadRequest:
    """One model load. Every signal of its load carries ``id``, so the host can tell a
    superseded load's late answers from the newest one's."""
    # Settings.load_key() (model, source, backend, quant, context, draft, n_threads, gpu_layers, kv_type,
    # exactness),
    # plus "retry_after": a reply's out-of-memory message, to load the next smaller plan
    key: dict[str, Any]
    cancel: threading.Event = field(default_factory=threading.Event)
    id: int = field(default_factory=lambda: next(_REQUEST_IDS))


def app_threads() -> int:
    """CPU threads for generation when the settings say Auto: the physical cores less one.

    llama.cpp's worker threads spin-wait at every barrier, so when they use
    every core, anything else that wants a core (the GUI thread, the OS, a
    compiler in the background) stalls a whole barrier: on a busy 2-core
    machine we measured 1-21 tok/s with 2 threads and a steady 60-70 tok/s
    with 1. Leaving a core free keeps the window responsive too.
    """
    from engine.backends.llama.backend import default_threads

    return max(1, default_threads() - 1)


def _device_memory() -> dict[str, int]:
    """Each ggml device's free and total bytes now (empty where ggml cannot say)."""
    try:
        from engine.backends.llama.devices import memory_entries

        return memory_entries()
    except (ImportError, OSError, AttributeError):  # a build without ggml's device API
        return {}


def describe(engine, loaded: plan_load.Loaded | None = None) -> dict[str, Any]:
    """What the window shows about a loaded engine (plain data, safe to send across threads).

    ``memory_total`` counts weights + KV cache + compute buffers as allocated,
    the same parts as the plan's predicted total (``plan``), which also carries
    the per-part relative error."""
    b = engine.backend
    info = b.describe()
    report = b.memory_report()
    draft = engine.draft
    return {"label": engine.model.label if engine.model else info.name,
            "path": str(engine.model.path) if engine.model else "",
            "bundled": bool(engine.model and engine.model.is_bundled),
            "backend": info.backend, "n_ctx": info.n_ctx, "n_threads": info.threads,
            "runtime": info.runtime, "device": info.device,
            "n_gpu_layers": info.n_gpu_layers, "kv_type": info.kv_type, "exactness": info.exactness,
            "draft": engine.spec_kind,
            "draft_model": Path(draft.backend.describe().path).name if draft is not None else None,
            "draft_memory": plan_load.buffers_total(draft.backend.memory_report()) if draft is not None else 0,
            "quant": info.quant, "memory": report, "memory_total": plan_load.buffers_total(report),
            "prefix_budget": int(engine.cache_stats()["budget_bytes"]), "devices": _device_memory(),
            "plan": plan_load.plan_view(loaded) if loaded is not None else None,
            "plan_messages": list(loaded.messages) if loaded is not None else []}


class LoadWorker(QObject):
    # Each signal starts with the LoadRequest's id.
    started = Signal(int, str)          # what is being loaded
    download_progress = Signal(int, object, object, str)  # bytes done, bytes total (can pass 2 GiB), file
    loaded = Signal(int, object)        # describe(engine) + load_ms
    failed = Signal(int, str)           # one-line message
    cancelled = Signal(int)

    def __init__(self, shared: SharedEngine) -> None:
        super().__init__()
        self._shared = shared

    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        from engine import Engine  # imported here so the window can appear first

        key, rid = req.key, req.id
        self.started.emit(rid, model_title(key))
        # Free the old model first: two models side by side may not fit.
        self._close_engine()
        t0 = time.perf_counter()
        try:
            ref = model_ref(key)
            if ref.kind == "hub":
                from engine.models.hub import fetch_ref

                ref = fetch_ref(ref, progress=lambda done, total, name: self.download_progress.emit(
                    rid, done, total, name), cancel=req.cancel)
            if req.cancel.is_set():
                self.cancelled.emit(rid)
                return
            backend = key.get("backend") or "auto"
            if backend == "auto":
                from engine.models.catalogue import default_backend

                backend = default_backend(ref)
            # Auto settings come from the memory plan; an out-of-memory load retries with a smaller one.
            loaded = plan_load.load(ref, key, backend, n_threads=key.get("n_threads") or app_threads(),
                                    loader=Engine.load, retry_after=key.get("retry_after"))
            engine = loaded.engine
        except HearthError as e:
            if req.cancel.is_set():  # a download stops with DownloadCancelled: that is a cancel
                self.cancelled.emit(rid)
            else:
                self.failed.emit(rid, str(e))
            return
        except Exception as e:  # a bug or an unexpected native failure: still a message, never silence
            traceback.print_exc()
            self.failed.emit(rid, f"unexpected error while loading the model: {type(e).__name__}: {e}")
            return
        if req.cancel.is_set():
            # Loading is one native call that cannot be interrupted; cancelling
            # means throwing the result away as soon as it returns.
            engine.close()
            gpu_guard.clear()
            self.cancelled.emit(rid)
            return
        self._shared.engine = engine
        if self._shared.serving is not None:
            self._shared.serving.engine_loaded(engine)
        info = describe(engine, loaded)
        info["load_ms"] = (time.perf_counter() - t0) * 1e3
        note = plan_load.record(loaded, info)
        if note:
            info["plan_messages"].append(note)
        self.loaded.emit(rid, info)

    @Slot()
    def close_engine(self) -> None:
        self._close_engine()

    def _close_engine(self) -> None:
        if self._shared.serving is not None:  # its scheduler uses the engine: it goes first
            self._shared.serving.close("a model is loading in Hearth; try again when it is ready")
        if self._shared.engine is not None:
            self._shared.engine.close()
            self._shared.engine = None
            gpu_guard.clear()  # nothing of ours is on a device now


