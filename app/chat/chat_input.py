"""The chat's input box and the conversation's system-prompt bar."""
from __future__ import annotations

from PySide6.QtCore import QBuffer, QIODevice, QMimeData, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QKeyEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from app.ui.shortcuts import matches

CUSTOM = "Custom"


class InputBox(QPlainTextEdit):
    """Enter sends, Shift+Enter adds a new line, Escape cancels an edit (or stops a reply),
    Up in an empty box asks to edit the last message. The box grows with its text,
    from MIN_LINES up to MAX_LINES, then scrolls."""

    submitted = Signal()
    escaped = Signal()
    up_in_empty = Signal()
    files_dropped = Signal(list)  # local paths dropped on the box: documents and images to attach
    image_pasted = Signal(bytes)  # an image pasted from the clipboard, as PNG bytes
    MIN_LINES, MAX_LINES = 2, 10

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document().documentLayout().documentSizeChanged.connect(self._grow)
        self._grow()

    def lines_shown(self) -> int:
        """How many lines of text the box is tall enough for now."""
        return min(max(int(self.document().size().height()), self.MIN_LINES), self.MAX_LINES)

    def _grow(self, *_args) -> None:
        # A plain-text document measures its height in lines (wrapped lines included).
        m = self.contentsMargins()
        pad = 2 * int(self.document().documentMargin()) + m.top() + m.bottom()
        self.setFixedHeight(self.lines_shown() * self.fontMetrics().lineSpacing() + pad)

    def dragEnterEvent(self, e: QDragEnterEvent) -> None:  # noqa: N802 (Qt override)
        if e.mimeData().hasUrls() and any(u.isLocalFile() for u in e.mimeData().urls()):
            e.acceptProposedAction()
            return
        super().dragEnterEvent(e)

    def dragMoveEvent(self, e) -> None:  # noqa: N802 (Qt override)
        if e.mimeData().hasUrls():
            e.acceptProposedAction()
            return
        super().dragMoveEvent(e)

    def dropEvent(self, e: QDropEvent) -> None:  # noqa: N802 (Qt override)
        paths = [u.toLocalFile() for u in e.mimeData().urls() if u.isLocalFile()] if e.mimeData().hasUrls() else []
        if paths:
            e.acceptProposedAction()
            self.files_dropped.emit(paths)
            return
        super().dropEvent(e)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt override)
        return source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt override)
        """Pasting an image (a screenshot, a copied picture) attaches it; pasting files attaches them."""
        files = [u.toLocalFile() for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []
        if files:
            self.files_dropped.emit(files)
            return
        if source.hasImage():
            img = source.imageData()
            if isinstance(img, QImage) and not img.isNull():
                buf = QBuffer()
                buf.open(QIODevice.OpenModeFlag.WriteOnly)
                img.save(buf, "PNG")
                self.image_pasted.emit(bytes(buf.data().data()))
                return
        super().insertFromMimeData(source)

    def keyPressEvent(self, e: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if e.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if e.key() == Qt.Key.Key_Escape:
            self.escaped.emit()
            return
        if not self.toPlainText() and matches("edit_last", e):
            self.up_in_empty.emit()
            return
        super().keyPressEvent(e)


class SystemPromptBar(QWidget):
    """Preset picker plus an editor for the conversation's own system prompt."""

    changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._presets: list[dict[str, str]] = []
        self._quiet = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("System prompt:"))
        self.combo = QComboBox()
        self.combo.setToolTip("Start from a preset, or choose Custom and write your own")
        self.combo.activated.connect(self._picked)
        row.addWidget(self.combo, 1)
        self.toggle = QToolButton()
        self.toggle.setText("Edit")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Show or hide this conversation's system prompt")
        row.addWidget(self.toggle)
        lay.addLayout(row)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Instructions the model sees before every message in this conversation")
        self.editor.setMaximumHeight(90)
        self.editor.hide()
        self.toggle.toggled.connect(self.editor.setVisible)
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(400)  # save after a pause in typing, not on every key
        self._save_timer.timeout.connect(lambda: self.changed.emit(self.text()))
        self.editor.textChanged.connect(self._edited)
        lay.addWidget(self.editor)

    def set_presets(self, presets: list[dict[str, str]]) -> None:
        self._presets = list(presets)
        self._sync_combo()

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str) -> None:
        """Show a conversation's prompt without reporting it as a change."""
        self._quiet = True
        self.editor.setPlainText(text)
        self._quiet = False
        self._sync_combo()

    def flush(self) -> None:
        """Report a pending edit now (e.g. before switching conversation or sending)."""
        if self._save_timer.isActive():
            self._save_timer.stop()
            self.changed.emit(self.text())

    def _edited(self) -> None:
        if self._quiet:
            return
        self._sync_combo()
        self._save_timer.start()

    def _sync_combo(self) -> None:
        text = self.text()
        self.combo.blockSignals(True)
        self.combo.clear()
        for p in self._presets:
            self.combo.addItem(p["name"])
        self.combo.addItem(CUSTOM)
        match = next((i for i, p in enumerate(self._presets) if p["prompt"] == text), None)
        self.combo.setCurrentIndex(match if match is not None else len(self._presets))
        self.combo.blockSignals(False)

    def _picked(self, index: int) -> None:
        if index < len(self._presets):
            self.editor.setPlainText(self._presets[index]["prompt"])
            self.flush()
        else:
            self.toggle.setChecked(True)
            self.editor.setFocus()
