"""Documents waiting to be sent with the next message: the attach (paperclip) button, a chip per document
(its name, pages and tokens, ✕ to remove it), and what they cost of the context.

Files are read off the GUI thread (a 2,000-page PDF takes a while): the tray says which
page it is on and offers Cancel. A file that cannot be read gets one line, and nothing
else attached or typed is touched.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMenu, QPushButton, QToolButton, QWidget

from app.bridge.background import Background, error_text
from app.chat.image_strip import thumbnail
from app.core.attached_docs import Pending, PendingImage, estimate_tokens
from app.ui import theme
from engine.inputs import ImageError, decode, document_block, read_file, read_folder

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")

TokenCounter = Callable[[str], "int | None"]


class AttachTray(QWidget):
    notify = Signal(str)        # a line for the user (a file that could not be read)
    changed = Signal()

    def __init__(self, count_tokens: TokenCounter | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.count_tokens = count_tokens
        self.n_ctx = 0                      # the loaded model's context, for the cost line
        self.conversation_tokens = 0        # what the conversation so far takes: read again after a new document
        self.items: list[Pending] = []
        self.images: list[PendingImage] = []
        self.count_image: Callable[[bytes], "int | None"] | None = None  # the model's count of an image's tokens
        self.image_tokens: dict[str, int] = {}  # counted, by hash
        self._bg = Background(self)
        self._cancel: threading.Event | None = None
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.button = QToolButton()
        self.button.setIcon(theme.attach_icon())
        self.button.setAccessibleName("Attach")
        self.button.setToolTip("Attach documents (PDF, Word, text, Markdown, code, HTML) or a folder; "
                               "you can also drop files on the message box")
        menu = QMenu(self.button)
        menu.addAction("Attach files…", self._pick_files)
        menu.addAction("Attach a folder…", self._pick_folder)
        self.button.setMenu(menu)
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        lay.addWidget(self.button)
        self.chips = QHBoxLayout()
        self.chips.setSpacing(4)
        lay.addLayout(self.chips)
        self.status = QLabel()
        self.status.setStyleSheet("color: palette(placeholder-text);")
        lay.addWidget(self.status)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._cancel_reading)
        self.cancel_button.hide()
        lay.addWidget(self.cancel_button)
        lay.addStretch(1)

    # -- adding ------------------------------------------------------------------

    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach documents or images", "",
                                                "Documents and images (*.pdf *.docx *.md *.txt *.html *.htm *.py *.js "
                                                "*.ts *.c *.cpp *.h *.rs *.go *.java *.json *.yaml *.toml *.csv *.png "
                                                "*.jpg *.jpeg *.webp *.gif);;All files (*)")
        if paths:
            self.add_paths(paths)

    def _pick_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Attach a folder")
        if folder:
            self.add_paths([folder])

    def add_image(self, data: bytes, name: str) -> bool:
        """An image for the next message, checked (engine.images) before it is shown; False and one
        line where it cannot be used. The same image twice is attached once."""
        try:
            img = decode(data, name)
        except ImageError as e:
            self.notify.emit(str(e))
            return False
        if all(p.sha256 != img.sha256 for p in self.images):
            self.images.append(PendingImage(img.sha256, img.mime, data, name, img.width, img.height))
            count = self.count_image
            if count is not None and img.sha256 not in self.image_tokens:
                self._bg.run(lambda: count(data), on_done=lambda n, s=img.sha256: self._counted(s, n),
                             on_failed=lambda e: self.notify.emit(error_text(e)))
        self._redraw()
        return True

    def _counted(self, sha256: str, n: int | None) -> None:
        if n is not None:
            self.image_tokens[sha256] = n
            self._redraw()

    def add_paths(self, paths: list[str]) -> None:
        """Read ``paths`` (files or folders) in the background, then show them as chips; image
        files are attached as images."""
        pictures = [p for p in paths if Path(p).suffix.lower() in IMAGE_SUFFIXES and Path(p).is_file()]
        for p in pictures:
            try:
                self.add_image(Path(p).read_bytes(), Path(p).name)
            except OSError as e:
                self.notify.emit(f"{Path(p).name} cannot be read: {e}")
        paths = [p for p in paths if p not in pictures]
        if not paths:
            return
        self._cancel = cancel = threading.Event()
        count = self.count_tokens

        def work(report) -> tuple[list[Pending], list[str]]:
            out, problems = [], []
            for p in map(Path, paths):
                if cancel.is_set():
                    break
                try:
                    if p.is_dir():
                        docs, skipped = read_folder(p)
                        problems += [f"{p.name}/{s}" for s in skipped[:3]]
                        if len(skipped) > 3:
                            problems.append(f"{p.name}: {len(skipped) - 3} more files left out")
                        found = [(d, p / d.name) for d in docs]
                    else:
                        d = read_file(p, cancel=cancel.is_set,
                                      progress=lambda i, n, name=p.name: report(name, i, n))
                        found = [(d, p)]
                except Exception as e:  # one file's failure is that file's line, never the others'
                    problems.append(error_text(e))
                    continue
                for d, f in found:
                    block = document_block(d)
                    n = count(block) if count is not None else None
                    out.append(Pending(d, f, n if n is not None else estimate_tokens(block)))
            return out, problems

        self.status.setText("Reading…")
        self.cancel_button.show()
        self._bg.run(work, on_done=self._read, on_failed=self._failed, on_progress=self._progress,
                     cancel=cancel)

    def _progress(self, name: str, done: int, total: int) -> None:
        self.status.setText(f"Reading {name}: page {done:,} of {total:,}…")

    def _read(self, result: tuple[list[Pending], list[str]]) -> None:
        self.cancel_button.hide()
        found, problems = result
        known = {p.doc.sha256 for p in self.items}
        for item in found:
            if item.doc.sha256 not in known:
                known.add(item.doc.sha256)
                self.items.append(item)
        for line in problems:
            self.notify.emit(line)
        self._redraw()

    def _failed(self, e: BaseException) -> None:
        self.cancel_button.hide()
        self.notify.emit(error_text(e))
        self._redraw()

    def _cancel_reading(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    # -- the chips -----------------------------------------------------------------

    def measure(self, n_ctx: int, metrics: dict | None) -> None:
        """The context the documents would go into, and what the conversation so far takes of it
        (the last reply's prompt and reply): a new document is read before those turns, so they are
        read once more."""
        m = metrics or {}
        self.n_ctx, self.conversation_tokens = n_ctx, m.get("prompt_tokens", 0) + m.get("generated_tokens", 0)
        self._redraw()

    def remove(self, sha256: str) -> None:
        self.items = [p for p in self.items if p.doc.sha256 != sha256]
        self.images = [p for p in self.images if p.sha256 != sha256]
        self._redraw()

    def clear(self) -> None:
        self.items, self.images = [], []
        self._redraw()

    def tokens(self) -> int | None:
        """What the attached documents cost of the context (None: no model to count with)."""
        counts = [p.tokens for p in self.items]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def _redraw(self) -> None:
        while self.chips.count():
            w = self.chips.takeAt(0).widget()
            if w is not None:
                w.deleteLater()
        for p in self.items:
            chip = QToolButton()
            pages = f"{len(p.doc.pages)} pages · " if p.doc.paged else ""
            tokens = f"{'' if self.count_tokens else '≈'}{p.tokens:,} tokens"
            chip.setText(f"📄 {p.doc.name} ✕")
            chip.setToolTip(f"{p.doc.name}: {pages}{tokens}. Click to remove it from this message.")
            chip.clicked.connect(lambda _=False, s=p.doc.sha256: self.remove(s))
            self.chips.addWidget(chip)
        for im in self.images:
            self.chips.addWidget(thumbnail(im.data, im.name))
            x = QToolButton()
            x.setText("✕")
            x.setToolTip(f"Remove {im.name} from this message")
            x.clicked.connect(lambda _=False, s=im.sha256: self.remove(s))
            self.chips.addWidget(x)
        total = self.tokens()
        if self.images and not self.items:
            counts = [self.image_tokens.get(p.sha256) for p in self.images]
            n = sum(c for c in counts if c is not None)
            share = f" ({100 * n / self.n_ctx:.0f}% of the {self.n_ctx:,}-token context)" if self.n_ctx else ""
            cost = f" · {n:,} tokens{share}" if None not in counts else ""
            self.status.setText(f"{len(self.images)} image{'s' if len(self.images) > 1 else ''} attached{cost}")
        elif not self.items:
            self.status.setText("")
        elif total is not None:
            share = f" ({100 * total / self.n_ctx:.0f}% of the {self.n_ctx:,}-token context)" if self.n_ctx else ""
            about = "" if self.count_tokens else "≈"
            # Documents sit before the conversation's first turn, so adding one means reading those turns again.
            again = (f" · then the {self.conversation_tokens:,} tokens of this conversation are read once more"
                     if self.conversation_tokens else "")
            self.status.setText(f"{len(self.items)} attached · {about}{total:,} tokens{share}{again}")
        self.changed.emit()
