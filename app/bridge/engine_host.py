"""The window's handle on the engine thread: it owns the thread and its two runners,
and turns the window's requests into queued calls on that thread.

It lives on the GUI thread. It tracks the newest load and the generation in
flight, so the window can ask whether the model is ready, loading or busy.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal

from engine import HearthError, ModelInfo, count_image_tokens
from engine.reply_formats import ThinkControl
from engine.library import ModelEntry
from engine.loading import LoadSpec

from app.bridge.generation_runner import GenerationJob, GenerationRunner, SharedEngine
from app.bridge.load_runner import LoadJob, LoadRunner, Opener, open_model
from app.core.model_defaults import NO_MODEL, ModelIdentity


class EngineHost(QObject):
    """The window's handle on the engine thread. Lives on the GUI thread."""

    load_started = Signal(str)
    download_progress = Signal(object, object, str)
    loaded = Signal(object)
    load_failed = Signal(str)
    load_cancelled = Signal()
    delta = Signal(int, str)
    reasoning = Signal(int, str)
    progress = Signal(int, object)
    finished = Signal(int, object)
    failed = Signal(int, str, str)

    _request_load = Signal(object)
    _request_generate = Signal(object)
    _request_close = Signal()
    _request_unload = Signal()
    _request_release_threads = Signal()

    def __init__(self, parent: QObject | None = None, *, opener: Opener = open_model) -> None:
        super().__init__(parent)
        self._shared = SharedEngine()
        self._thread = QThread()
        self._thread.setObjectName("hearth-engine")
        self._loader = LoadRunner(self._shared, opener)
        self._generator = GenerationRunner(self._shared)
        for w in (self._loader, self._generator):
            w.moveToThread(self._thread)
        # Cross-thread connections are queued: the slots run on the engine thread.
        self._request_load.connect(self._loader.load)
        self._request_generate.connect(self._generator.generate)
        self._request_close.connect(self._generator.close_stores)
        self._request_close.connect(self._loader.close_engine)
        self._request_unload.connect(self._loader.close_engine)
        self._request_release_threads.connect(self._generator.release_threads)
        self._loader.started.connect(self._on_load_started)
        self._loader.download_progress.connect(self._on_download_progress)
        self._loader.loaded.connect(self._on_loaded)
        self._loader.failed.connect(self._on_load_failed)
        self._loader.cancelled.connect(self._on_load_cancelled)
        self._generator.delta.connect(self.delta)
        self._generator.reasoning.connect(self.reasoning)
        self._generator.progress.connect(self.progress)
        self._generator.finished.connect(self._on_finished)
        self._generator.failed.connect(self._on_failed)
        self._thread.start()
        self.model: ModelInfo | None = None   # what is loaded, and where it runs
        self.think: ThinkControl | None = None  # the loaded engine's Think control (None: its template has none)
        self.identity: ModelIdentity = NO_MODEL  # the loaded model as its own settings know it
        self._load: LoadJob | None = None
        self._job: GenerationJob | None = None

    # -- state --------------------------------------------------------------

    @property
    def loading(self) -> bool:
        return self._load is not None

    @property
    def ready(self) -> bool:
        return self.model is not None and self._load is None

    @property
    def sees_images(self) -> bool:
        """The loaded model has its vision projector: a message may carry images."""
        return self.model is not None and self.model.sees_images

    def count_image_tokens(self, data: bytes) -> int | None:
        """An image's tokens for the loaded model (None: no model that sees images, or a server's model,
        whose server counts them). Call it off the GUI thread: the projector reads the image (it waits
        while the engine thread encodes one)."""
        engine, model = self._shared.engine, self.model
        if engine is None or model is None or not self.sees_images:
            return None
        return count_image_tokens(engine, data)  # None where the model's server counts it

    @property
    def shared(self) -> SharedEngine:
        """The engine-thread state (touch it only from a runner on that thread)."""
        return self._shared

    def release_compute_threads(self) -> None:
        """Before another thread computes (a benchmark): the engine thread gives back its
        idle OpenMP workers once it is free, so the two never share a throttled libgomp."""
        self._request_release_threads.emit()

    def run_on_engine_thread(self, runner: QObject) -> None:
        """Move ``runner`` to the engine thread: its queued slots run between loads and replies."""
        runner.moveToThread(self._thread)

    @property
    def job(self) -> GenerationJob | None:
        """The generation in flight, if any."""
        return self._job

    # -- loading ------------------------------------------------------------

    def load(self, req: LoadSpec, models: dict[str, ModelEntry] | None = None) -> None:
        """Load ``req`` on the engine thread (``models``: each model's own settings, Settings.models)."""
        if self._load is not None:
            self._load.cancel.set()
        self.model = None
        self.think = None
        self.identity = NO_MODEL
        self._load = LoadJob(req, models=dict(models or {}))
        self._request_load.emit(self._load)

    def cancel_load(self) -> None:
        if self._load is not None:
            self._load.cancel.set()

    def _current(self, rid: int) -> bool:
        """Whether a load's signal belongs to the newest request. A superseded load still
        runs to its end on the engine thread (cancelled, or its model closed by the next
        load), and none of that is news to the window."""
        return self._load is not None and self._load.id == rid

    def _on_load_started(self, rid: int, what: str) -> None:
        if self._current(rid):
            self.load_started.emit(what)

    def _on_download_progress(self, rid: int, done: int, total: int, name: str) -> None:
        if self._current(rid) and not self._load.cancel.is_set():
            self.download_progress.emit(done, total, name)

    def _on_loaded(self, rid: int, model: ModelInfo, think: ThinkControl | None, ident: ModelIdentity) -> None:
        if not self._current(rid):
            return
        self._load = None
        self.model = model
        self.think = think
        self.identity = ident
        self.loaded.emit(model)

    def _on_load_failed(self, rid: int, msg: str) -> None:
        if not self._current(rid):
            return
        self._load = None
        self.load_failed.emit(msg)

    def _on_load_cancelled(self, rid: int) -> None:
        if not self._current(rid):
            return
        self._load = None
        self.load_cancelled.emit()

    # -- generation ---------------------------------------------------------

    def generate(self, job: GenerationJob) -> None:
        if self._job is not None:
            raise HearthError("a reply is already being written")
        if not self.ready:
            raise HearthError("the model is not loaded yet")
        self._job = job
        self._request_generate.emit(job)

    def stop(self) -> None:
        if self._job is not None:
            self._job.cancel.set()

    def _on_finished(self, mid: int, result: dict) -> None:
        self._job = None
        self.finished.emit(mid, result)

    def _on_failed(self, mid: int, msg: str, partial: str) -> None:
        self._job = None
        self.failed.emit(mid, msg, partial)

    def unload(self) -> None:
        """Free the loaded model (the model library's Unload). A reply in flight stops
        first and keeps its text; a load in progress is cancelled."""
        self.stop()
        self.cancel_load()
        self._load = None
        self.model = None
        self.think = None
        self._request_unload.emit()

    def shutdown(self) -> None:
        """Stop any reply, free the model and end the thread (waits for a load in progress)."""
        self.stop()
        self.cancel_load()
        self._request_close.emit()
        self._thread.quit()
        self._thread.wait()
