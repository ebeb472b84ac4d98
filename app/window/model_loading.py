"""Loading the model from the window: status bar, cancel, and rollback on failure.

A mixin of MainWindow (it uses its host, monitor, settings and info bar); it
lives in its own file so each part of the window can be read on its own.
A load that fails or is cancelled goes back to the model set-up that last
worked, saves that as the choice again, and says so. A Hub model downloads
first: the bar then shows bytes, and Cancel stops the download.
"""
from __future__ import annotations

import gc
import time
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton

from engine.sizing.reality import is_device_failure, is_out_of_memory

from dataclasses import replace

from engine.loading.gpu_guard import GpuGuard, crash_text
from engine.loading.load import LoadedModel
from engine.loading.request import LoadRequest

from app.core.paths import data_dir
from app.core.text_utils import human_bytes
from app.settings_ui.memory_details import MemoryDetails, MemoryFigure, memory_tooltip

FAST_NOTE = ("Exactness: fast. With llama.cpp's faster kernels, replies served from the prompt cache or "
             "sped up by a draft may differ slightly from plain decoding.")
BAR_STEPS = 1000  # QProgressBar counts in int; byte totals pass 2 GiB, so the bar counts per mille


class ModelLoadingMixin:
    def _build_model_status(self, sb) -> None:
        """The status-bar parts that belong to loading (the caller places the labels)."""
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 0)  # llama.cpp loads in one call: a busy bar, not a fake percentage
        self.load_bar.setMaximumWidth(120)
        self.load_bar.hide()
        self._downloading = False
        self._load_started = 0.0
        self._load_what = ""
        self._loads_requested = 0
        self._free_replaced = False  # a model was (or may have been) closed since the last collection
        self._load_clock = QTimer(self)
        self._load_clock.setInterval(1000)  # big models take minutes: show that time is passing
        self._load_clock.timeout.connect(self._show_load_time)
        self.cancel_load_button = QPushButton("Cancel loading")
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.cancel_load_button.hide()
        self.model_label = QLabel("No model loaded")
        self.memory_label = MemoryFigure()
        self.memory_label.clicked.connect(self.show_memory_details)
        self.memory_details: MemoryDetails | None = None
        self._oom_retried = False  # a reply that runs out of memory reloads a smaller plan, once per load
        self.host.failed.connect(self._reply_failed)
        sb.addWidget(self.load_bar)
        sb.addWidget(self.cancel_load_button)

    def start(self) -> None:
        """Begin loading the configured model (call after show(), so the window is up first).

        If the last run stopped while a model was on a GPU, this load runs on the CPU and
        says why; "Use the GPU again" loads the settings as they are."""
        crashed = GpuGuard(data_dir()).take()
        if crashed is None:
            self.load_model(self.settings.load_request())
            return
        text = crash_text(crashed)
        self.info.show_message(text, "error", action=("Use the GPU again", self.reload_on_gpu))
        self.load_model(replace(self.settings.load_request(), cpu_only=text))

    def reload_on_gpu(self) -> None:
        """Load the settings as they are (GPU layers included), after a CPU-only load."""
        self.load_model(self.settings.load_request())

    def load_model(self, req: LoadRequest) -> None:
        if self.host.job is not None:
            self.host.stop()  # the load waits for the reply to end; make that quick
        self._load_req = req
        # Every load but the first replaces a model (or a load's result), which the
        # engine thread closes as this load begins; _settle_memory frees it after.
        self._free_replaced = self._free_replaced or self._loads_requested > 0
        self._loads_requested += 1
        # Everything alive now (the window, imported modules) leaves the cyclic
        # GC's reach, so a full collection triggered by the load's allocations
        # scans only the new objects instead of stopping every thread for
        # 50-200 ms (with torch imported, far more).
        gc.freeze()
        self.monitor.begin("loading")
        self._on_load_started(req.title)  # say so now, not when the thread gets to it
        self.host.load(req)

    def cancel_load(self) -> None:
        self.host.cancel_load()
        self.cancel_load_button.setEnabled(False)
        self.statusBar().showMessage("Cancelling the download…" if self._downloading else
                                     "Cancelling: the current load step has to finish first…")

    def _on_load_started(self, what: str) -> None:
        if self._load_clock.isActive() and what == self._load_what:
            return  # the engine thread confirming what the window already shows
        self._load_what = what
        self._load_started = time.monotonic()
        self._downloading = False
        self.load_bar.setRange(0, 0)
        self._load_clock.start()
        self.load_bar.show()
        self.cancel_load_button.setEnabled(True)
        self.cancel_load_button.show()
        self.model_label.setText(f"Loading {what}…")
        self.memory_label.setText("")

    def _show_load_time(self) -> None:
        if not self._downloading:  # while downloading, the byte count shows that time is passing
            self.model_label.setText(f"Loading {self._load_what}… {time.monotonic() - self._load_started:.0f} s")

    def _on_download_progress(self, done: int, total: int, name: str) -> None:
        """Bytes of a Hub download (the engine reports at most every 50 ms); a final
        call with no file name means the download is complete and loading begins."""
        if total <= 0:
            return  # everything was in the cache already
        if not name and done >= total:
            self._downloading = False
            self.load_bar.setRange(0, 0)
            self.load_bar.setToolTip("")
            self.model_label.setText(f"Loading {self._load_what}…")
            return
        if not self._downloading:
            self._downloading = True
            self.load_bar.setRange(0, BAR_STEPS)
        self.load_bar.setValue(min(BAR_STEPS, int(BAR_STEPS * done / total)))
        self.load_bar.setToolTip(f"Downloading {name}" if name else "")
        self.model_label.setText(f"Downloading {self._load_what}: {human_bytes(done)} of {human_bytes(total)}")

    def _settle_memory(self) -> None:
        """Freeze what is alive after a load, first freeing a model the load replaced.

        Frozen objects are never collected, and the model being replaced was still
        alive at the load's freeze: any reference cycle in it (or any other garbage
        frozen with it) would stay in memory for good, growing with every model
        change. So after a change everything is unfrozen and collected once
        (tens of milliseconds, once per model change, while the window shows the
        load), then frozen again. The first load replaces nothing and skips it.
        """
        if self._free_replaced:
            self._free_replaced = False
            gc.unfreeze()
            gc.collect()
        # Move everything alive now (the model's vocabulary tables, Qt wrappers)
        # out of the cyclic GC's reach: a full collection over them stops every
        # thread for 35-100 ms, and one used to land right as a reply started.
        gc.freeze()

    def _end_loading(self) -> None:
        self._settle_memory()  # loaded, failed or cancelled: the replaced model is gone either way
        self._load_clock.stop()
        self.monitor.end("loading")
        self._downloading = False
        self.load_bar.setRange(0, 0)
        self.load_bar.setToolTip("")
        self.load_bar.hide()
        self.cancel_load_button.hide()
        self.statusBar().clearMessage()

    def _on_loaded(self, model: LoadedModel) -> None:
        self._end_loading()
        fast = model.exactness == "fast"
        self.model_label.setText(f"{model.label} · {model.quant} · context {model.n_ctx:,}"
                                 + (" · fast kernels" if fast else ""))
        draft = model.draft + (f" ({model.draft_model})" if model.draft_model else "")
        self.model_label.setToolTip(f"{model.path}\nbackend: {model.backend}\n"
                                    f"runs on: {model.runtime} ({model.device})\n"
                                    f"GPU layers: {model.n_gpu_layers}, KV cache: {model.kv_type}\n"
                                    f"speculative decoding: {draft}\n"
                                    f"CPU threads: {model.n_threads}\n"
                                    f"loaded in {model.load_ms:.0f} ms"
                                    + (f"\n{FAST_NOTE}" if fast else ""))
        self.memory_label.setText(f"Memory {human_bytes(model.memory_total)}")
        self.memory_label.setToolTip(memory_tooltip(model))
        if fast:
            self.info.show_message(FAST_NOTE, "info")
        for text in model.notes:
            self.info.show_message(text, "info", action=("Details…", self.show_memory_details))
        self._oom_retried = self._load_req is not None and self._load_req.retry_after is not None
        if self._plain_req() == self.settings.load_request():
            try:
                self.settings_file.mark_working(self.settings)
            except OSError as e:
                self.info.show_message(f"Could not save the settings: {e}", "error")
        self._rolling_back = False

    def _on_load_failed(self, msg: str) -> None:
        self._end_loading()
        self._fail_load(f"Could not load {self._load_title()}: {msg}")

    def _on_load_cancelled(self) -> None:
        downloading = self._downloading
        self._end_loading()
        what = self._load_title()
        self._fail_load(f"Downloading {what} was cancelled; the part already fetched is kept, and the "
                        "next try resumes it." if downloading else f"Loading {what} was cancelled.")

    def _fail_load(self, text: str) -> None:
        self.model_label.setText("No model loaded")
        target = self.settings_file.rolled_back(self.settings)
        if not self._rolling_back and target.load_request() != self._plain_req():
            # Go back to what last worked, and make that the saved choice again.
            self._rolling_back = True
            self.settings = target
            self._save_settings()
            self.info.show_message(f"{text} Went back to {target.load_request().title}, "
                                   "the last model that worked.", "error")
            cpu_only = self._load_req.cpu_only if self._load_req is not None else None  # still off a GPU that failed
            self.load_model(replace(target.load_request(), cpu_only=cpu_only))
            return
        self._rolling_back = False
        self.info.show_message(f"{text} No model is loaded; choose one in Settings.", "error",
                               action=("Settings…", self.open_settings))

    def _load_title(self) -> str:
        return self._load_req.title if self._load_req is not None else "the model"

    def _plain_req(self) -> LoadRequest | None:
        """The load in flight without the retries' notes (out of memory, CPU only): the settings' own."""
        return self._load_req.plain() if self._load_req is not None else None

    def show_memory_details(self) -> None:
        """Plan vs allocated, per part, for the loaded model (a window beside the chat)."""
        if self.host.model is None:
            self.statusBar().showMessage("No model is loaded yet.", 3000)
            return
        if self.memory_details is not None:
            self.memory_details.close()
        self.memory_details = MemoryDetails(self.host.model, self)
        self.memory_details.show()

    def _reply_failed(self, _mid: int, msg: str, _partial: str) -> None:
        """A reply failed on the device (load again on the CPU) or ran out of memory (load the
        next smaller plan, once per load). The reply's own failure handling gives back the text
        (or keeps the partial reply)."""
        req, model = self._load_req, self.host.model
        if self._closed or req is None:
            return
        if is_device_failure(msg) and model is not None and model.runtime != "cpu" and req.cpu_only is None:
            # The device failed under the reply (a reset, a GPU gone): go on on the CPU, once.
            text = (f"{model.device or 'The GPU'} failed during the reply ({msg}); the model now runs on "
                    "the CPU and your message is kept.")
            self.info.show_message(text, "error", action=("Use the GPU again", self.reload_on_gpu))
            QTimer.singleShot(0, lambda: self.load_model(replace(req.plain(), cpu_only=text)))
            return
        if self._oom_retried or not is_out_of_memory(Exception(msg)):
            return
        self._oom_retried = True
        # after the reply's failure is shown
        QTimer.singleShot(0, lambda: self.load_model(replace(req, retry_after=msg)))

    def _save_settings(self) -> None:
        try:
            self.settings_file.save(self.settings)
        except (OSError, ValueError) as e:
            self.info.show_message(f"Could not save the settings: {e}", "error")
