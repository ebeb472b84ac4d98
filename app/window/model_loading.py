"""Loading the model from the window: status bar, cancel, and rollback on failure.

``LoadingController`` is one of MainWindow's controllers: it owns the status-bar
parts of a load (bar, Cancel, model and memory labels) and the load's own state,
and gets the host, the monitor and the info bar in its constructor; the settings
stay the window's, read and replaced through callbacks.
A load that fails or is cancelled goes back to the model set-up that last
worked, saves that as the choice again, and says so. A Hub model downloads
first: the bar then shows bytes, and Cancel stops the download.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QProgressBar, QPushButton, QStatusBar, QWidget

from engine import ModelInfo, default_exactness
from engine.loading import GpuGuard, LoadSpec, crash_text
from engine.sizing import is_device_failure, is_out_of_memory

from app.bridge.engine_host import EngineHost
from app.core.model_defaults import settle_tuning
from app.core.paths import data_dir
from app.core.settings import Settings, SettingsFile
from app.core.text_utils import human_bytes
from app.settings_ui.memory_details import MemoryDetails, MemoryFigure, memory_tooltip
from app.ui.info_bar import InfoArea
from app.ui.loop_monitor import LoopMonitor
from app.ui.part_label import PartLabel

FAST_NOTE = ("Exactness: fast. With llama.cpp's faster kernels, replies served from the prompt cache or "
             "sped up by a draft may differ slightly from plain decoding.")
BAR_STEPS = 1000  # QProgressBar counts in int; byte totals pass 2 GiB, so the bar counts per mille
MODEL_TAG = "model"  # the info bars a load said: the next load takes them away (app/ui/info_bar.py)


@dataclass
class LoadState:
    """Where the window's model loading stands."""

    req: LoadSpec | None = None  # the load in flight (or the last one)
    what: str = ""  # its title, as the status bar shows it
    started: float = 0.0  # time.monotonic() when it began
    downloading: bool = False  # a Hub download comes first; the bar shows bytes meanwhile
    rolling_back: bool = False  # this load goes back to what last worked after a failure
    requested: int = 0  # loads asked for since the window opened
    free_replaced: bool = False  # a model was (or may have been) closed since the last collection
    oom_retried: bool = False  # a reply that runs out of memory reloads a smaller plan, once per load


class LoadingController:
    """Loads the model for the window and shows how that goes; rolls back and retries."""

    def __init__(self, *, host: EngineHost, monitor: LoopMonitor, info: InfoArea, status_bar: QStatusBar,
                 parent: QWidget, settings_file: SettingsFile, settings: Callable[[], Settings],
                 adopt_settings: Callable[[Settings], None], open_settings: Callable[[], None],
                 closed: Callable[[], bool]) -> None:
        self.host, self.monitor, self.info, self.status_bar = host, monitor, info, status_bar
        self.parent, self.settings_file = parent, settings_file
        self._settings, self._adopt, self._open_settings, self._closed = settings, adopt_settings, open_settings, closed
        self.state = LoadState()
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 0)  # llama.cpp loads in one call: a busy bar, not a fake percentage
        self.load_bar.setMaximumWidth(120)
        self.load_bar.hide()
        self._clock = QTimer(parent)
        self._clock.setInterval(1000)  # big models take minutes: show that time is passing
        self._clock.timeout.connect(self._show_load_time)
        self.cancel_load_button = QPushButton("Cancel loading")
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.cancel_load_button.hide()
        self.model_label = PartLabel("No model loaded")
        self.memory_label = MemoryFigure()
        self.memory_label.clicked.connect(self.show_memory_details)
        self.memory_details: MemoryDetails | None = None
        status_bar.addWidget(self.load_bar)
        status_bar.addWidget(self.cancel_load_button)

    def start(self) -> None:
        """Begin loading the configured model (call after show(), so the window is up first).

        If the last run stopped while a model was on a GPU, this load runs on the CPU and
        says why; "Use the GPU again" loads the settings as they are."""
        crashed = GpuGuard(data_dir()).take()
        if crashed is None:
            self.load_model(self._settings().load_spec())
            return
        text = crash_text(crashed)
        self.info.show_message(text, "error", action=("Use the GPU again", self.reload_on_gpu))
        self.load_model(replace(self._settings().load_spec(), cpu_only=text))

    def reload_on_gpu(self) -> None:
        """Load the settings as they are (GPU layers included), after a CPU-only load."""
        self.load_model(self._settings().load_spec())

    def load_model(self, req: LoadSpec) -> None:
        """Load ``req`` on the engine thread (a reply being written stops first)."""
        st = self.state
        if self.host.job is not None:
            self.host.stop()  # the load waits for the reply to end; make that quick
        st.req = req
        # Every load but the first replaces a model (or a load's result), which the
        # engine thread closes as this load begins; _settle_memory frees it after.
        st.free_replaced = st.free_replaced or st.requested > 0
        st.requested += 1
        # Everything alive now (the window, imported modules) leaves the cyclic
        # GC's reach, so a full collection triggered by the load's allocations
        # scans only the new objects instead of stopping every thread for
        # 50-200 ms (with torch imported, far more).
        gc.freeze()
        self.info.dismiss(MODEL_TAG)  # what the last load said (its notes, a machine lost under it) is past
        self.monitor.begin("loading")
        self.on_load_started(req.title)  # say so now, not when the thread gets to it
        self.host.load(req, self._settings().models)  # the model's own load settings apply over req's

    def cancel_load(self) -> None:
        """Stop the load (or the download) in flight."""
        self.host.cancel_load()
        self.cancel_load_button.setEnabled(False)
        self.status_bar.showMessage("Cancelling the download…" if self.state.downloading else
                                    "Cancelling: the current load step has to finish first…")

    def on_load_started(self, what: str) -> None:
        """The host's load_started: show the busy bar, Cancel and the time so far."""
        st = self.state
        if self._clock.isActive() and what == st.what:
            return  # the engine thread confirming what the window already shows
        st.what, st.started, st.downloading = what, time.monotonic(), False
        self.load_bar.setRange(0, 0)
        self._clock.start()
        self.load_bar.show()
        self.cancel_load_button.setEnabled(True)
        self.cancel_load_button.show()
        self.model_label.setText(f"Loading {what}…")
        self.memory_label.setText("")

    def _show_load_time(self) -> None:
        st = self.state
        if not st.downloading:  # while downloading, the byte count shows that time is passing
            self.model_label.setText(f"Loading {st.what}… {time.monotonic() - st.started:.0f} s")

    def on_download_progress(self, done: int, total: int, name: str) -> None:
        """Bytes of a Hub download (the engine reports at most every 50 ms); a final
        call with no file name means the download is complete and loading begins."""
        st = self.state
        if total <= 0:
            return  # everything was in the cache already
        if not name and done >= total:
            st.downloading = False
            self.load_bar.setRange(0, 0)
            self.load_bar.setToolTip("")
            self.model_label.setText(f"Loading {st.what}…")
            return
        if not st.downloading:
            st.downloading = True
            self.load_bar.setRange(0, BAR_STEPS)
        self.load_bar.setValue(min(BAR_STEPS, int(BAR_STEPS * done / total)))
        self.load_bar.setToolTip(f"Downloading {name}" if name else "")
        self.model_label.setText(f"Downloading {st.what}: {human_bytes(done)} of {human_bytes(total)}")

    def _settle_memory(self) -> None:
        """Freeze what is alive after a load, first freeing a model the load replaced.

        Frozen objects are never collected, and the model being replaced was still
        alive at the load's freeze: any reference cycle in it (or any other garbage
        frozen with it) would stay in memory for good, growing with every model
        change. So after a change everything is unfrozen and collected once
        (tens of milliseconds, once per model change, while the window shows the
        load), then frozen again. The first load replaces nothing and skips it.
        """
        if self.state.free_replaced:
            self.state.free_replaced = False
            gc.unfreeze()
            gc.collect()
        # Move everything alive now (the model's vocabulary tables, Qt wrappers)
        # out of the cyclic GC's reach: a full collection over them stops every
        # thread for 35-100 ms, and one used to land right as a reply started.
        gc.freeze()

    def _end_loading(self) -> None:
        self._settle_memory()  # loaded, failed or cancelled: the replaced model is gone either way
        self._clock.stop()
        self.monitor.end("loading")
        self.state.downloading = False
        self.load_bar.setRange(0, 0)
        self.load_bar.setToolTip("")
        self.load_bar.hide()
        self.cancel_load_button.hide()
        self.status_bar.clearMessage()

    def on_loaded(self, model: ModelInfo) -> None:
        """The host's loaded: show what runs where, its notes, and remember it worked."""
        self._end_loading()
        local = model.local
        if local is None:  # a server's model: its backend's figures are its server's
            self._remote_loaded(model)
            return
        fast = local.exactness == "fast"
        self.model_label.setText(f"{model.label} · {model.quant} · context {model.n_ctx:,}"
                                 + (" · sees images" if model.sees_images else "")
                                 + (" · fast kernels" if fast else ""))
        draft = local.draft + (f" ({local.draft_model})" if local.draft_model else "")
        self.model_label.setToolTip(f"{model.path}\nbackend: {model.backend}\n"
                                    f"runs on: {model.runtime} ({model.device})\n"
                                    f"GPU layers: {local.n_gpu_layers}, KV cache: {local.kv_type}\n"
                                    f"speculative decoding: {draft}\n"
                                    + (f"vision projector: {local.projector}\n" if local.projector else "") +
                                    f"CPU threads: {local.n_threads}\n"
                                    f"loaded in {local.load_ms:.0f} ms"
                                    + (f"\n{FAST_NOTE}" if fast else ""))
        self.memory_label.setText(f"Memory {human_bytes(local.memory_total)}")
        self.memory_label.setToolTip(memory_tooltip(local))
        if fast and default_exactness() != "fast":  # the default profile is said in Settings, not at every start
            self.info.show_message(FAST_NOTE, "info", tags=(MODEL_TAG,))
        for text in model.notes:
            self.info.show_message(text, "info", action=("Details…", self.show_memory_details), tags=(MODEL_TAG,))
        self._mark_working()

    def _mark_working(self) -> None:
        st = self.state
        st.oom_retried = st.req is not None and st.req.retry_after is not None
        settings = self._settings()
        if self._plain_req() == settings.load_spec():
            # An "Apply best" record kept by this model's path (an older settings file) moves to its key.
            settled = settle_tuning(settings, self.host.identity)
            if settled is not settings:
                self._adopt(settled)
                settings = settled
            try:
                self.settings_file.mark_working(settings)
            except OSError as e:
                self.info.show_message(f"Could not save the settings: {e}", "error")
        st.rolling_back = False

    def _remote_loaded(self, model: ModelInfo) -> None:
        """A server's model: where it runs instead of this machine's memory, quant and kernels."""
        self.model_label.setText(f"{model.label} · on {model.device} · context {model.n_ctx:,}")
        self.model_label.setToolTip(f"{model.path}\nruns on {model.runtime} at {model.device}; images go to the "
                                    "server, which decides whether the model reads them")
        self.memory_label.setText("")
        self.memory_label.setToolTip("")
        for text in model.notes:
            self.info.show_message(text, "info", tags=(MODEL_TAG,))
        self._mark_working()

    def on_load_failed(self, msg: str) -> None:
        """The host's load_failed: say why, and go back to what last worked."""
        self._end_loading()
        self._fail_load(f"Could not load {self._load_title()}: {msg}")

    def on_load_cancelled(self) -> None:
        """The host's load_cancelled: as a failure, with what was kept of a download."""
        downloading = self.state.downloading
        self._end_loading()
        what = self._load_title()
        self._fail_load(f"Downloading {what} was cancelled; the part already fetched is kept, and the "
                        "next try resumes it." if downloading else f"Loading {what} was cancelled.")

    def _fail_load(self, text: str) -> None:
        st = self.state
        self.model_label.setText("No model loaded")
        target = self.settings_file.rolled_back(self._settings())
        if not st.rolling_back and target.load_spec() != self._plain_req():
            # Go back to what last worked, and make that the saved choice again.
            st.rolling_back = True
            self._adopt(target)
            self.info.show_message(f"{text} Went back to {target.load_spec().title}, "
                                   "the last model that worked.", "error")
            cpu_only = st.req.cpu_only if st.req is not None else None  # still off a GPU that failed
            self.load_model(replace(target.load_spec(), cpu_only=cpu_only))
            return
        st.rolling_back = False
        self.info.show_message(f"{text} No model is loaded; choose one in Settings.", "error",
                               action=("Settings…", self._open_settings))

    def _load_title(self) -> str:
        return self.state.req.title if self.state.req is not None else "the model"

    def _plain_req(self) -> LoadSpec | None:
        """The load in flight without the retries' notes (out of memory, CPU only): the settings' own."""
        return self.state.req.plain() if self.state.req is not None else None

    def show_memory_details(self) -> None:
        """Plan vs allocated, per part, for the loaded model (a window beside the chat)."""
        model = self.host.model
        if model is None:
            self.status_bar.showMessage("No model is loaded yet.", 3000)
            return
        if model.local is None:  # a server's model: its memory is its server's
            self.status_bar.showMessage(f"{model.label} runs on {model.device}: its memory is its server's.", 3000)
            return
        if self.memory_details is not None:
            self.memory_details.close()
        self.memory_details = MemoryDetails(model, model.local, self.parent)
        self.memory_details.show()

    def on_reply_failed(self, mid: int, msg: str, _partial: str) -> None:
        """A reply failed on the device (load again on the CPU) or ran out of memory (load the
        next smaller plan, once per load). The reply's own failure handling gives back the text
        (or keeps the partial reply)."""
        st = self.state
        req, model = st.req, self.host.model
        if self._closed() or req is None:
            return
        if req.workers and self._offer_without_lost(req, msg, mid):
            return
        if is_device_failure(msg) and model is not None and model.runtime != "cpu" and req.cpu_only is None:
            # The device failed under the reply (a reset, a GPU gone): go on on the CPU, once.
            text = (f"{model.device or 'The GPU'} failed during the reply ({msg}); the model now runs on "
                    "the CPU and your message is kept.")
            self.info.show_message(text, "error", action=("Use the GPU again", self.reload_on_gpu),
                                   tags=(f"reply:{mid}",))
            QTimer.singleShot(0, lambda: self.load_model(replace(req.plain(), cpu_only=text)))
            return
        if st.oom_retried or not is_out_of_memory(Exception(msg)):
            return
        st.oom_retried = True
        # after the reply's failure is shown
        QTimer.singleShot(0, lambda: self.load_model(replace(req, retry_after=msg)))

    def _offer_without_lost(self, req: LoadSpec, msg: str, mid: int) -> bool:
        """A machine the model's layers were on went away mid-reply (the error names it): offer to load the
        model without it. The reply's own failure handling has kept the message and the partial reply."""
        from app.core.machine_list import MachineList

        machines = MachineList(data_dir())
        lost = [a for a in req.workers if f"[{a}]" in msg and "stopped answering" in msg]  # child.lost_text
        if not lost:
            return False
        rest = tuple(a for a in req.workers if a not in lost)
        names = ", ".join(m.label for m in machines.machines(lost))

        def reload() -> None:
            self._adopt(replace(self._settings(), workers=rest))  # the next start leaves it out too
            self.load_model(replace(req.plain(), workers=rest))

        where = "the other machines left" if rest else "this machine alone"
        self.info.show_message(f"{names} stopped answering, and the model's layers there are gone. Your message "
                               f"and the reply so far are kept; the model can be loaded again on {where}.",
                               "error", action=(f"Reload without {names}", reload), tags=(MODEL_TAG, f"reply:{mid}"))
        return True
