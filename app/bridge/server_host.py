"""The local server inside the app: started and stopped from Settings → Local server,
shown in the status bar, serving the window's loaded model.

Two halves, one per thread:
- :class:`ServerHost` lives on the GUI thread. It owns the LocalServer (its
  HTTP thread), follows the settings, and draws the status-bar indicator.
- :class:`Serving` is touched only on the engine thread (as the loaded engine
  is). While the server is on it holds a Scheduler over the loaded engine (its
  queue limit; the engine's KV pool grown to hold ``parallel`` API requests beside
  the window's). The window's replies and the API's run in the same engine core,
  the window's first. A model switch closes the scheduler first (the server
  answers 503 "a model is loading") and opens a new one over the new engine.
API requests never reach the store: they are not chats.
"""
from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QLabel

from engine import HearthError, StreamEvent, openai_finish_reason
from engine.serve import AudioRoutes, FinishedRequest, LocalServer, Scheduler, ServerMetrics, exposure, library_pool
from engine.library import ServedDefaults, memo_dir
from engine.voice import VoiceKit

from app.bridge.engine_host import EngineHost
from app.core.paths import data_dir
from app.core.settings import Settings
from app.bridge.generation_runner import SharedEngine

REFRESH_MS = 1000
LOADING = "a model is loading in Hearth; try again when it is ready"


class Serving:
    """The engine-thread half: a scheduler over the loaded engine, attached to the server."""

    parallel = 4  # API sequences decoded together (the window's model and those the API loads)

    def __init__(self, server: LocalServer, parallel: int | None = None) -> None:
        self.server = server
        if parallel is not None:
            self.parallel = parallel
        self.scheduler: Scheduler | None = None

    @property
    def active(self) -> bool:
        return self.scheduler is not None

    def engine_loaded(self, engine) -> None:
        """A model is ready: serve it."""
        self.close(LOADING)
        self.scheduler = Scheduler(engine, parallel=self.parallel)
        self.server.attach(self.scheduler)

    def count_window_reply(self, final: StreamEvent) -> None:
        """The window's reply ran in the same engine core as the API's: the Server panel counts it too."""
        if final.stats is not None:
            began = time.time() - final.stats.e2e_ms / 1e3
            self.server.metrics.record(FinishedRequest.from_stats(
                final.stats, openai_finish_reason(final.finish_reason), submitted=began, priority="window"))

    def close(self, reason: str) -> None:
        """Stop serving (before the engine closes): API requests in flight are cancelled."""
        self.server.detach(reason)
        if self.scheduler is not None:
            self.scheduler.close()
            self.scheduler = None


class ServingRunner(QObject):
    """Runs on the engine thread, between loads and replies."""

    def __init__(self, shared: SharedEngine) -> None:
        super().__init__()
        self._shared = shared

    @Slot(object)
    def set_serving(self, serving: Serving | None) -> None:
        old = self._shared.serving
        if old is not None:
            old.close("the local server was turned off")
        self._shared.serving = serving
        if serving is not None and self._shared.engine is not None:
            serving.engine_loaded(self._shared.engine)


class ServerHost(QObject):
    """The GUI-thread half: starts and stops the server as the settings say."""

    _request_serving = Signal(object)

    def __init__(self, host: EngineHost, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.server: LocalServer | None = None
        self._config: tuple | None = None
        self._settings = Settings()  # the window's, as apply() last saw them: each model's own settings too
        self.voice_kit: Callable[[], VoiceKit] | None = None  # the window's speech models, which the API shares
        self.metrics = ServerMetrics()  # every server this window runs counts here: the Server panel's history
        self._runner = ServingRunner(host.shared)
        host.run_on_engine_thread(self._runner)
        self._request_serving.connect(self._runner.set_serving)
        self.label = QLabel()
        self.label.hide()
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.running

    def apply(self, s: Settings) -> str | None:
        """Start, stop, restart or re-key the server to match ``s``; a message if it cannot start."""
        self._settings = s
        config = (s.server_port, tuple(s.server_cors), s.server_listen)
        if self.server is not None and (not s.server_enabled or config != self._config):
            self.stop()
        if self.server is not None:
            self.server.api_key = s.server_api_key or None  # a new key applies to the next request
            self.server.max_queue_wait = s.server_max_queue_wait  # and a new longest wait
            self.server.defaults.changed()  # and the models' own settings as they are now
            return None
        if not s.server_enabled:
            return None
        # Any library model a request names is loaded beside the window's (planned for the memory
        # left) and unloaded after 10 idle minutes; the window's own model is never unloaded.
        pool = library_pool(data_dir(), parallel=Serving.parallel, queue_limit=16)
        try:
            # Off loopback (Settings: "Let other devices…"): TLS and a key on every request, or no start at all.
            # What a request leaves out: the window's defaults (Settings → Sampling), the model's own
            # recommendations and the user's settings for it, as the window's replies get them.
            defaults = ServedDefaults(hearth=lambda: self._settings.sampling, entries=lambda: self._settings.models,
                                      memo=memo_dir(data_dir()))
            server = LocalServer(port=s.server_port, api_key=s.server_api_key or None, cors_origins=s.server_cors,
                                 pool=pool, audio=AudioRoutes(self.voice_kit) if self.voice_kit else None,
                                 metrics=self.metrics, defaults=defaults, max_queue_wait=s.server_max_queue_wait,
                                 **exposure(data_dir(), s.server_listen or None))
            server.start()
        except HearthError as e:
            self.refresh()
            return str(e)
        server.detach(LOADING)
        self.server, self._config = server, config
        self._request_serving.emit(Serving(server))
        self._timer.start()
        self.refresh()
        return None

    def stop(self) -> None:
        """Stop listening (API requests in flight are cancelled) and release the scheduler."""
        if self.server is None:
            return
        self.server.stop()
        self.server = None
        self._request_serving.emit(None)  # after any reply in flight: it finishes on the scheduler
        self._timer.stop()
        self.refresh()

    def refresh(self) -> None:
        """The status-bar indicator: port, requests served, and whether a model is being served."""
        srv = self.server
        if srv is None:
            self.label.hide()
            return
        self.metrics.sample()  # the queue and the KV, once a second, for the Server panel's charts
        state = f"{srv.served} served" if srv.model_id else "waiting for the model"
        busy = f" · {srv.in_flight} now" if srv.in_flight else ""
        others = [h for h in (srv.pool.describe() if srv.pool is not None else []) if not h["pinned"]]
        also = f" · +{len(others)} model{'s' if len(others) > 1 else ''}" if others else ""
        where = f"{srv.host}:{srv.port} (other devices can connect)" if srv.exposed else f":{srv.port}"
        self.label.setText(f"API {where} · {state}{busy}{also}")
        held = "".join(f"\n• {h['id']}: loaded by a request, " + (
            "answering now" if h["busy"] else f"idle {h['idle_s'] / 60:.0f} of "
            + ("∞" if h["ttl_s"] is None else f"{h['ttl_s'] / 60:.0f}") + " min") for h in others)
        self.label.setToolTip(f"The local OpenAI-compatible server is on at {srv.url}"
                              f"{' (API key required)' if srv.api_key or srv.exposed else ''}. Settings → Local server "
                              "turns it off."
                              + (f"\nIt serves {srv.model_id} (this window's model)" if srv.model_id else "")
                              + (f" and also holds:{held}" if held else "")
                              + "\nPerformance → Local server… shows its last minutes.")
        self.label.show()

    def shutdown(self) -> None:
        self.stop()
