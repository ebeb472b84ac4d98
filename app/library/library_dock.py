"""The Models dock of the main window: the library and the Hub browser, wired to the window.

``attach(window)`` adds the dock (File → Model library…), a Recent models menu,
drag-and-drop of .gguf files onto the window, and keeps the library in step with
the engine: a model that loads is marked as used, its drafts are listed, and a
finished download appears in the library. Servers added there (Add server…) list
their models below the ones on disk; picking one makes the window's engine remote. Loading from the library changes the
window's settings the way the Settings dialog would (so the rollback on a failed
load still applies); a draft model chosen there is carried to Engine.load.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMenu, QTabWidget

from engine.library import ORIGIN_BUNDLED, Library, LibraryModel, bundled_model_path
from engine.voice import voice_installed
from engine.loading import AUTO

from app.library.downloads import DownloadQueue
from app.library.hub_browser import HubBrowser
from app.library.library_view import LibraryView
from app.library.servers import ServerList
from app.core.connections import Connections
from app.core.paths import LIBRARY_FILE, data_dir
from app.core.settings import SettingsError
from app.ui.shortcuts import keys


class _DropImport(QObject):
    """Accepts .gguf files dragged onto the window and adds them to the library."""

    def __init__(self, window, view: LibraryView) -> None:
        super().__init__(window)
        self.window, self.view = window, view

    @staticmethod
    def _ggufs(event) -> list[str]:
        md = event.mimeData()
        if md is None or not md.hasUrls():
            return []
        return [u.toLocalFile() for u in md.urls() if u.isLocalFile() and u.toLocalFile().lower().endswith(".gguf")]

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt override)
        t = event.type()
        if t == QEvent.Type.Close:
            self.window.models_dock.queue.stop_all()  # a transfer never outlives its window
            return False
        if t in (QEvent.Type.DragEnter, QEvent.Type.DragMove) and self._ggufs(event):
            event.acceptProposedAction()
            return True
        if t == QEvent.Type.Drop:
            files = self._ggufs(event)
            if files:
                event.acceptProposedAction()
                self.window.show_library()
                self.view.import_files(files)  # imported() reports the result
                return True
        return False


class ModelsDock(QDockWidget):
    """The dock: a Library tab and a Hub tab."""

    def __init__(self, window, library: Library, *, hardware=None) -> None:
        super().__init__("Models", window)
        self.setObjectName("models-dock")
        self.window_ = window
        self.queue = DownloadQueue(self)
        self.library_view = LibraryView(library, hardware=hardware)
        self.library_view.model_entries = lambda: window.settings.models  # each model's own settings
        self.hub = HubBrowser(self.queue, hardware=hardware)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.library_view, "Library")
        self.tabs.addTab(self.hub, "Hugging Face Hub")
        self.setWidget(self.tabs)
        self.servers = ServerList(Connections(data_dir()), self)
        self.library_view.attach_servers(self.servers)
        self.library_view.remote_load_requested.connect(self.load_remote)
        self.library_view.load_requested.connect(self.load)
        self.library_view.unload_requested.connect(self.unload)
        self.library_view.imported.connect(
            lambda msg, ok: window.info.show_message(msg, "info" if ok else "error", timeout_ms=8000))
        self.queue.finished.connect(self._downloaded)
        self.speech = None
        if voice_installed():  # without voice there is nothing to list, and no button that cannot work
            from app.library.speech_list import SpeechList

            self.speech = SpeechList(lambda: (window.settings.voice["whisper"], window.settings.voice["piper"]),
                                     hardware=hardware)
            self.speech.use_requested.connect(self.use_speech)
            self.library_view.attach_speech(self.speech)

    def load(self, m: LibraryModel) -> None:
        """Load a model from the library: the window's settings now name it (Auto everything else)."""
        w = self.window_
        if m.origin == ORIGIN_BUNDLED or m.path == _bundled():
            model, source = "bundled", "bundled"
        else:
            model, source = str(m.path), m.kind
        draft = w.settings.draft if w.settings.draft in ("auto", "none") else "auto"  # a draft belongs to its target
        try:
            new = replace(w.settings, model=model, source=source, backend="auto", quant="auto", draft=draft,
                          context=AUTO, gpu_layers=AUTO, kv_type=AUTO).validate()
        except SettingsError as e:
            w.info.show_message(f"Cannot load {m.name}: {e}", "error")
            return
        w.apply_settings(new)

    def use_speech(self, kind: str, spec: str) -> None:
        """Make a speech model the one Settings → Voice names ("whisper" dictates, "piper" reads aloud);
        it loads off the GUI thread on its next use."""
        w = self.window_
        try:
            new = replace(w.settings, voice=dict(w.settings.voice, **{kind: spec})).validate()
        except SettingsError as e:
            w.info.show_message(f"Cannot use {spec}: {e}", "error")
            return
        w.apply_settings(new)
        if self.speech is not None:
            self.speech.refresh()

    def load_remote(self, model: str) -> None:
        """Use a server's model (``url#id``): the window's engine becomes a remote one. If the server
        cannot be reached, the load fails with the reason and the model before it stays."""
        w = self.window_
        try:
            new = replace(w.settings, model=model, source="remote", backend="auto", quant="auto", draft="none",
                          mmproj=AUTO, context=AUTO, gpu_layers=AUTO, kv_type=AUTO).validate()
        except SettingsError as e:
            w.info.show_message(f"Cannot use {model}: {e}", "error")
            return
        w.apply_settings(new)

    def unload(self) -> None:
        w = self.window_
        w.host.unload()  # the engine thread clears the GPU marker as it closes the model
        w.model_label.setText("No model loaded")
        self.library_view.set_loaded(None)

    def loaded(self, model) -> None:
        """The window loaded ``model`` (an engine.interface.ModelInfo): mark it used and selected."""
        path = model.path
        if path and not model.capabilities.on_server:  # a server's model is no file of the library
            self.library_view.library.mark_used(path)
        self.library_view.set_loaded(path or None)

    def _downloaded(self, d) -> None:
        self.library_view.refresh(select=d.path)
        self.window_.info.show_message(f"Downloaded {d.title}; it is in the model library.", "info",
                                       timeout_ms=8000)


def _bundled() -> Path | None:
    try:
        return bundled_model_path()
    except Exception:
        return None


def attach(window, *, library: Library | None = None, hardware=None) -> ModelsDock:
    """Add the Models dock, its menu entries and drag-and-drop to ``window`` (a MainWindow)."""
    lib = library or Library(data_dir() / LIBRARY_FILE)
    dock = ModelsDock(window, lib, hardware=hardware)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
    dock.hide()
    if lib.notice:
        window.info.show_message(lib.notice, "error")

    def show_library() -> None:
        already = dock.library_view.isVisible()
        dock.show()
        dock.raise_()
        dock.tabs.setCurrentWidget(dock.library_view)  # shown now: it reads the disk (LibraryView.showEvent)
        if already:
            dock.library_view.refresh()

    window.show_library = show_library
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    before = next((a for a in file_menu.actions() if a.isSeparator()), None)
    act = QAction("Model &library…", window)
    act.setShortcuts(keys("library"))  # the shortcuts table: the Help sheet lists it
    act.triggered.connect(show_library)
    window.act_library = act
    recent = QMenu("&Recent models", window)
    window.recent_menu = recent

    def fill_recent() -> None:
        recent.clear()
        paths = lib.recent()
        for p in paths:
            a = recent.addAction(Path(p).name)
            a.setToolTip(p)
            a.triggered.connect(lambda _=False, p=p: _load_path(dock, p))
        if not paths:
            recent.addAction("(none yet)").setEnabled(False)

    recent.aboutToShow.connect(fill_recent)
    window.fill_recent = fill_recent
    file_menu.insertAction(before, act)
    file_menu.insertMenu(before, recent)
    window.setAcceptDrops(True)
    window.installEventFilter(_DropImport(window, dock.library_view))
    window.host.loaded.connect(dock.loaded)
    return dock


def _load_path(dock: ModelsDock, path: str) -> None:
    """Load a recent model (the menu lists only paths still on disk, but it may have gone since)."""
    p = Path(path)
    if not p.exists():
        dock.window_.info.show_message(f"{path} is no longer on disk.", "error")
        return
    origin = ORIGIN_BUNDLED if p == _bundled() else ""
    dock.load(LibraryModel(p, "gguf" if p.is_file() else "hf_dir", origin, name=p.name))
