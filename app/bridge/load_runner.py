"""Model loading off the GUI thread.

The load runner lives on the "engine thread" (app/bridge/engine_host.py) beside
the generation runner, so a load and a generation never overlap (the engine
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
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from PySide6.QtCore import QObject, Signal, Slot

from engine import ChatEngine, HearthError, ModelInfo
from engine.loading import GpuGuard, LoadSpec, ThreadChoice, load_model, thread_option
from engine.library import ModelEntry

from app.bridge.generation_runner import SharedEngine
from app.core.model_defaults import ModelIdentity, identify, own_load, own_load_note, with_model_load
from app.core.paths import data_dir

_JOB_IDS = itertools.count(1)


@dataclass(slots=True)
class LoadJob:
    """One model load. Every signal of its load carries ``id``, so the host can tell a
    superseded load's late answers from the newest one's. ``models``: each model's own settings
    (Settings.models, a copy): the loaded model's own load settings (its context, what "Apply best" chose)
    apply over the request's."""
    request: LoadSpec
    cancel: threading.Event = field(default_factory=threading.Event)
    id: int = field(default_factory=lambda: next(_JOB_IDS))
    models: dict[str, ModelEntry] = field(default_factory=dict)


# The window's thread rule when the settings say Auto: one of engine.backends.llama.threadpool's
# THREAD_OPTIONS, chosen by measurement (docs/benchmarks.md, "Threads"): `python -m app --bench-stream` on a
# quiet 2-core machine, bundled model, 256 tokens, 3 rounds: 1 thread ("cores-1") 50.2 tok/s in
# the window, 2 threads ("all") 84.6 tok/s (engine alone 88.5, ratio 0.956, GUI thread 5.8% of a
# core, worst event-loop gap 4.1 ms); Qwen2.5-Coder 1.5B: 6.0 against 11.8 tok/s (ratio 0.978).
# The old "cores-1" rule blamed llama.cpp's spin-waiting for 2 threads doing worse; the cause
# was libgomp (this llama.cpp's CPU backend is built with OpenMP): each thread that computes
# keeps its own team of workers, and once the process holds more than the cores, every
# barrier sleeps (libgomp's throttled spin), 28 tok/s instead of 88. So all llama.cpp work
# of the window runs on the one engine thread (loads and replies), and a second computing
# thread is what to avoid, not a second core.
APP_THREADS = "all"


def app_threads() -> ThreadChoice:
    """CPU threads for generation (and the thread pool's poll level, None for none) when the
    settings say Auto: :data:`APP_THREADS`'s rule on this machine's physical cores."""
    return thread_option(APP_THREADS)


Progress = Callable[[int, int, str], None]   # bytes done, bytes total, file name (a Hub download)


class Opener(Protocol):
    """How the window gets an engine for a load request: any implementation of the engine
    interface, and what it says it is. Raises HearthError with the reason it cannot."""

    def __call__(self, req: LoadSpec, *, cancel: threading.Event,
                 progress: Progress) -> tuple[ChatEngine, ModelInfo]: ...


def open_local(req: LoadSpec, *, cancel: threading.Event, progress: Progress) -> tuple[ChatEngine, ModelInfo]:
    """The local engine, by the planned load: Auto settings come from the memory plan, and an
    out-of-memory load retries with a smaller one."""
    threads = app_threads()
    result = load_model(req, data_dir=data_dir(), n_threads=threads.n_threads, threads_poll=threads.poll,
                        cancel=cancel, progress=progress)
    assert result.model is not None  # load_model describes what it loaded
    return result.engine, result.model


def open_server_model(req: LoadSpec, *, cancel: threading.Event,
                      progress: Progress) -> tuple[ChatEngine, ModelInfo]:
    """A model on a server (``req.model`` is ``url#id``): the remote engine, with the key the
    user stored for that server and the certificate pins of the data folder."""
    from engine.loading import split_remote
    from engine.remote import open_remote

    from app.core.connections import Connections

    url, model_id = split_remote(req.model)
    engine = open_remote(url, Connections(data_dir()).key(url), model_id, data_dir=data_dir(), cancel=cancel)
    return engine, engine.describe()


def open_split_model(req: LoadSpec, *, cancel: threading.Event,
                     progress: Progress) -> tuple[ChatEngine, ModelInfo]:
    """A model with layers on other machines (``req.workers``, as Settings → Machines saved them): planned
    and loaded in a private child process, which a machine lost mid-reply cannot take the window with."""
    from engine.workers import open_split

    from app.core.machine_list import MachineList

    machines = MachineList(data_dir())
    engine = open_split(req, machines.machines(req.workers), data_dir=data_dir(), cancel=cancel,
                        n_threads=app_threads().n_threads)
    return engine, engine.describe()


def open_model(req: LoadSpec, *, cancel: threading.Event, progress: Progress) -> tuple[ChatEngine, ModelInfo]:
    """The engine for ``req``: on a server for a remote model, in a child process for one that uses other
    machines, else here (open_local)."""
    if req.model_source == "remote":
        return open_server_model(req, cancel=cancel, progress=progress)
    # Other machines' workers take a llama.cpp model's layers; a transformers model stays here.
    opener = open_split_model if req.workers and req.effective_backend == "llama_cpp" else open_local
    return opener(req, cancel=cancel, progress=progress)


class LoadRunner(QObject):
    # Each signal starts with the LoadJob's id.
    started = Signal(int, str)          # what is being loaded
    download_progress = Signal(int, object, object, str)  # bytes done, bytes total (can pass 2 GiB), file
    # engine.interface.ModelInfo, its Think control (engine.formats.ThinkControl or None) and
    # the model's identity (app/core/model_defaults.py ModelIdentity): plain frozen data, so the window may read it
    loaded = Signal(int, object, object, object)
    failed = Signal(int, str)           # one-line message
    cancelled = Signal(int)

    def __init__(self, shared: SharedEngine, opener: Opener = open_model) -> None:
        super().__init__()
        self._shared = shared
        self._open = opener
        # what the engine loaded: its request, what it is, and its identity
        self._current: tuple[LoadSpec, ModelInfo, ModelIdentity] | None = None
        self._kept = False  # a server model failed to open and the model before it is still loaded

    @Slot(object)
    def load(self, job: LoadJob) -> None:
        req, rid = job.request, job.id
        self.started.emit(rid, req.title)
        kept, self._kept = self._kept, False
        if kept and self._current is not None and self._shared.engine is not None and req == self._current[0]:
            # Going back to the model that worked, which a failed connection never closed: it is still here.
            self.loaded.emit(rid, self._current[1], self._current[1].think, self._current[2])
            return
        remote = req.model_source == "remote"
        if not remote:
            # Free the old model first: two models side by side may not fit. A server's model takes no memory
            # here, so the old one stays until the server answers (and stays if it does not).
            self._close_engine()
        asked = req
        # The model's own settings are found by its content (hashed once): its load settings apply.
        ident = identify(req, data_dir())
        req, own = with_model_load(req, job.models, ident), own_load(job.models, ident)
        if self._shared.serving is not None:
            # The local server is on: its batch context (parallel x slot context) goes in the plan too.
            req = replace(req, server_parallel=self._shared.serving.parallel)
        try:
            engine, model = self._open(req, cancel=job.cancel, progress=lambda done, total, name:
                                       self.download_progress.emit(rid, done, total, name))
        except HearthError as e:
            self._kept = remote and self._shared.engine is not None
            if job.cancel.is_set():  # a download stops with DownloadCancelled: that is a cancel
                self.cancelled.emit(rid)
            else:
                self.failed.emit(rid, str(e) + own_load_note(own))
            return
        except Exception as e:  # a bug or an unexpected native failure: still a message, never silence
            self._kept = remote and self._shared.engine is not None
            traceback.print_exc()
            self.failed.emit(rid, f"unexpected error while loading the model: {type(e).__name__}: {e}")
            return
        if job.cancel.is_set():
            # Loading is one native call that cannot be interrupted; cancelling
            # means throwing the result away as soon as it returns.
            engine.close()
            self._kept = remote and self._shared.engine is not None
            if not remote:
                GpuGuard(data_dir()).clear()
            self.cancelled.emit(rid)
            return
        if remote:
            self._close_engine()  # the server answered: now the old model goes
        if ident.key is None:
            ident = identify(asked, data_dir())  # a Hub model: downloaded now, so it has a file to know it by
        self._current = (asked, model, ident)
        self._shared.engine = engine
        if self._shared.serving is not None:
            self._shared.serving.engine_loaded(engine)
        self.loaded.emit(rid, model, model.think, ident)

    @Slot()
    def close_engine(self) -> None:
        self._close_engine()

    def _close_engine(self) -> None:
        self._current = None
        if self._shared.serving is not None:  # its scheduler uses the engine: it goes first
            self._shared.serving.close("a model is loading in Hearth; try again when it is ready")
        if self._shared.engine is not None:
            self._shared.engine.close()
            self._shared.engine = None
            GpuGuard(data_dir()).clear()  # nothing of ours is on a device now
