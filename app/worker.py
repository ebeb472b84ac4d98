"""Model loading and generation off the GUI thread.

Both workers live on one "engine thread", so a load and a generation can
never overlap (the engine allows one stream at a time, and a new model should
replace the old one, not sit next to it in memory). They only emit signals;
they never touch widgets. Stopping sets a ``threading.Event`` that the engine
checks between tokens and while it reads a long prompt; the thread is never killed.

The generation worker writes the reply to the database itself, on its own
connection, as it streams (throttled). So the stream keeps saving to *its*
conversation whatever the window is showing, and a crash loses at most the
last half second.

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

from engine import HearthError, Message, SamplingParams

from . import gpu_guard, plan_load
from .model_choice import model_ref, model_title
from .store import Store
from .text_utils import COMPLETE_REASONS

FLUSH_SECONDS = 0.5   # commit partial text at least this often...
FLUSH_DELTAS = 32     # ...or after this many deltas, whichever comes first
PROGRESS_SECONDS = 0.25


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


@dataclass(slots=True)
class GenerationJob:
    conversation_id: int
    message_id: int
    messages: list[Message]
    params: SamplingParams
    db_path: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    context_policy: str = "drop_oldest"  # a chat longer than the context: "drop_oldest" or "stop"


def app_threads() -> int:
    """CPU threads for generation when the settings say Auto: the physical cores less one.

    llama.cpp's worker threads spin-wait at every barrier, so when they use
    every core, anything else that wants a core (the GUI thread, the OS, a
    compiler in the background) stalls a whole barrier: on a busy 2-core
    machine we measured 1-21 tok/s with 2 threads and a steady 60-70 tok/s
    with 1. Leaving a core free keeps the window responsive too.
    """
    from engine.backends.llama_cpp import default_threads

    return max(1, default_threads() - 1)


class SharedEngine:
    """The loaded engine, touched only on the engine thread."""

    engine = None
    serving = None  # app/server_host.Serving while the local server is on: the scheduler over the engine


def _device_memory() -> dict[str, int]:
    """Each ggml device's free and total bytes now (empty where ggml cannot say)."""
    try:
        from engine.backends.devices import memory_entries

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


class GenerationWorker(QObject):
    delta = Signal(int, str)         # message id, new text
    # message id, live numbers: {tokens, tok_s, ttft_ms} while the reply streams, and
    # {prompt_done, prompt_total} (prompt tokens read so far) while a long prompt is read first
    progress = Signal(int, object)
    finished = Signal(int, object)     # message id, {text, finish_reason, complete, metrics}
    failed = Signal(int, str, str)   # message id, error message, partial text

    def __init__(self, shared: SharedEngine) -> None:
        super().__init__()
        self._shared = shared
        self._stores: dict[Path, Store] = {}

    def _store(self, path: Path) -> Store:
        # One connection per database, opened on this thread (sqlite3's rule).
        if path not in self._stores:
            self._stores[path] = Store(path, recover=False)
        return self._stores[path]

    @Slot(object)
    def generate(self, job: GenerationJob) -> None:
        mid = job.message_id
        parts: list[str] = []
        store = None
        try:
            store = self._store(job.db_path)
            engine = self._shared.engine
            if engine is None:
                raise HearthError("no model is loaded")
            t0 = time.perf_counter()
            t_first = None
            last_flush = last_progress = t0
            unflushed = 0
            def reading(done: int, total: int) -> None:  # called on this thread, between prefill chunks
                self.progress.emit(mid, {"prompt_done": done, "prompt_total": total})

            serving = self._shared.serving
            # With the local server on, the reply goes through its scheduler, ahead of API requests.
            events = serving.window_reply(job) if serving is not None and serving.active else engine.stream(
                job.messages, job.params, cancel=job.cancel, progress=reading, context_policy=job.context_policy)
            for ev in events:
                if ev.kind == "delta":
                    now = time.perf_counter()
                    if t_first is None:
                        t_first = now
                    parts.append(ev.text)
                    unflushed += 1
                    self.delta.emit(mid, ev.text)
                    if unflushed >= FLUSH_DELTAS or now - last_flush >= FLUSH_SECONDS:
                        store.update_reply(mid, "".join(parts))
                        unflushed, last_flush = 0, now
                    if now - last_progress >= PROGRESS_SECONDS:
                        last_progress = now
                        n = len(parts)  # one delta is about one token; the final metrics are exact
                        rate = (n - 1) / (now - t_first) if n > 1 and now > t_first else 0.0
                        self.progress.emit(mid, {"tokens": n, "tok_s": rate,
                                                 "ttft_ms": (t_first - t0) * 1e3})
                else:
                    complete = ev.finish_reason in COMPLETE_REASONS
                    metrics = ev.stats.as_dict() if ev.stats is not None else None
                    store.finish_reply(mid, ev.text, complete=complete,
                                       finish_reason=ev.finish_reason, metrics=metrics)
                    self.finished.emit(mid, {"text": ev.text, "finish_reason": ev.finish_reason,
                                             "complete": complete, "metrics": metrics})
                    return
            raise HearthError("the engine ended the reply without a final event")
        except Exception as e:
            if not isinstance(e, HearthError):
                traceback.print_exc()
            msg = str(e) if isinstance(e, HearthError) else f"unexpected error: {type(e).__name__}: {e}"
            partial = "".join(parts)
            if store is not None:
                try:
                    store.finish_reply(mid, partial, complete=False, finish_reason="error", error=msg)
                except Exception as db_err:  # keep the first error; the window still gets the text
                    msg += f" (and saving the partial reply failed: {db_err})"
            self.failed.emit(mid, msg, partial)

    @Slot()
    def close_stores(self) -> None:
        for s in self._stores.values():
            s.close()
        self._stores.clear()
