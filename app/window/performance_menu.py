"""The window's Performance menu: a reply's Performance panel, the local server's panel and "Benchmark this model".

``PerformanceMenu`` is one of MainWindow's controllers; the panels and the benchmark
dialog themselves are app/performance/'s widgets. A reply's own "Performance" button
opens the panel for that reply; the menu opens it for the newest reply of the
conversation on screen, and the Server panel for the local server (Settings → Local server).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow

from app.bridge.engine_host import EngineHost
from app.bridge.server_host import ServerHost
from app.core.model_defaults import model_load
from app.core.settings import Settings
from app.core.store import Store
from app.ui.info_bar import InfoArea

if TYPE_CHECKING:  # both import QtCharts: only loaded when asked for
    from app.performance.performance_panel import PerformancePanel
    from app.performance.server_panel import ServerPanel
    from app.performance.tune_dialog import TuneDialog

from engine import has_timeline
from engine.loading import AUTO


class PerformanceMenu:
    """Adds the Performance menu to ``window`` and keeps the panel and the benchmark dialog it opened.

    ``current`` says which conversation is on screen; ``settings`` / ``apply_settings`` are the
    window's, for the benchmark dialog to read and to apply a winning row."""

    def __init__(self, *, window: QMainWindow, store: Store, host: EngineHost, info: InfoArea,
                 current: Callable[[], int | None], settings: Callable[[], Settings],
                 apply_settings: Callable[[Settings], None], server: ServerHost) -> None:
        self.window, self.store, self.host, self.info, self.server = window, store, host, info, server
        self._current, self._settings, self._apply_settings = current, settings, apply_settings
        self.performance_panel: PerformancePanel | None = None
        self.server_panel: ServerPanel | None = None
        self.tune_dialog: TuneDialog | None = None
        menu = window.menuBar().addMenu("&Performance")
        self.act_performance = QAction("Performance of the last reply…", window)
        self.act_performance.triggered.connect(self.show_last_performance)
        self.act_server = QAction("Local &server…", window)
        self.act_server.setToolTip("The local server over its last minutes: requests, latency, queue, KV, keys")
        self.act_server.triggered.connect(self.show_server)
        self.act_benchmark = QAction("&Benchmark this model…", window)
        self.act_benchmark.triggered.connect(self.open_benchmark)
        menu.addAction(self.act_performance)
        menu.addAction(self.act_server)
        menu.addAction(self.act_benchmark)

    def close(self) -> None:
        """Close the panel and the benchmark dialog (a run in progress stops and its thread ends)."""
        for w in (self.performance_panel, self.server_panel, self.tune_dialog):
            if w is not None:
                w.close()
        if self.tune_dialog is not None and self.tune_dialog.running:
            self.tune_dialog.done(0)

    def show_last_performance(self) -> None:
        """The panel for the newest reply on screen that has a timeline."""
        current = self._current()
        replies = [m for m in self.store.messages(current) if m.role == "assistant"
                   and has_timeline(m.metrics)] if current is not None else []
        if not replies:
            self.info.show_message("No reply here has a timeline yet: send a message first.", "info")
            return
        self.show_performance(replies[-1].id)

    def show_performance(self, mid: int) -> None:
        """Open the Performance panel for message ``mid``."""
        from app.performance.performance_panel import PerformancePanel  # QtCharts: only loaded when asked for

        msg = self.store.message(mid)
        local = self.host.model.local if self.host.model is not None else None  # this machine's figures
        weights = int(local.memory.get("weights") or 0) if local is not None else 0
        try:
            panel = PerformancePanel(msg.metrics or {}, weights, parent=self.window,
                                     threads=local.n_threads if local is not None else 1)
        except ValueError as e:
            self.info.show_message(str(e), "info")
            return
        if not weights:
            panel.summary.setText(panel.summary.text() + " · no model loaded, so the roofline has no model size")
        if self.performance_panel is not None:
            self.performance_panel.close()
        self.performance_panel = panel
        panel.show()

    def show_server(self) -> None:
        """The Server panel: the local server's requests, latency, queue, KV and keys over the last minutes."""
        from app.performance.server_panel import ServerPanel  # QtCharts: only loaded when asked for

        if self.server_panel is None:
            self.server_panel = ServerPanel(self.server.metrics, self._server_status, parent=self.window)
        self.server_panel.show()
        self.server_panel.raise_()

    def _server_status(self) -> str:
        srv = self.server.server
        if srv is None or not srv.running:
            return ("The local server is off: Settings → Local server turns it on (the figures below are its "
                    "last run's).")
        return (f"The local server is on at {srv.url}" + (f", serving {srv.model_id}" if srv.model_id else "")
                + f" · {srv.served} replies served since it started · GET {srv.url.removesuffix('/v1')}/metrics "
                "has the same figures for Prometheus")

    def open_benchmark(self) -> None:
        """The "Benchmark this model" dialog for the loaded model."""
        from app.performance.tune_dialog import TuneDialog

        model = self.host.model
        if model is None or not model.path:
            self.info.show_message("Benchmark this model: load a model first.", "info")
            return
        if not model.capabilities.tunable:  # its settings are the server's: nothing here to tune
            self.info.show_message(f"Benchmark this model measures settings of a model on this machine; "
                                   f"{model.label} runs on {model.device}. `python -m engine bench remote` "
                                   "compares the window on a server's model with the openai client.", "info")
            return
        if self.tune_dialog is not None and self.tune_dialog.model_path == model.path:
            self.tune_dialog.show()
            self.tune_dialog.raise_()
            return
        if self.tune_dialog is not None:
            self.tune_dialog.close()
        threads = model_load(self._settings(), self.host.identity).n_threads  # the model's own, once tuned
        threads = None if threads is AUTO else threads
        self.tune_dialog = TuneDialog(model.path, model.label, self._settings, self._apply_settings,
                                      self.window, identity=self.host.identity, threads=threads,
                                      before_run=self.host.release_compute_threads)
        self.tune_dialog.show()
