"""A summary compaction wrote, in the chat where it stands for the messages above it.

Collapsed to one line by default (the messages it stands for are still there, above); expanded it
shows the whole summary, which the user may edit: the model is given their words from the next
reply on. An edit that would leave it empty is refused (the model would lose what it stood for).
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from app.core.store import Summary


class SummaryBlock(QFrame):
    """One summary: a header (what it stands for), its text folded, Show/Hide and Edit."""

    edited = Signal(int, str)  # summary id, the user's new text

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("summary")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet("QFrame#summary { border: 1px dashed palette(mid); border-radius: 6px; }")
        self.summary: Summary | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        head = QHBoxLayout()
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: 600;")
        head.addWidget(self.title, 1)
        self.toggle = QToolButton()
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self._folded)
        self.edit_button = QToolButton()
        self.edit_button.setText("Edit")
        self.edit_button.setAutoRaise(True)
        self.edit_button.setToolTip("Change what the model remembers of the messages above")
        self.edit_button.clicked.connect(self.start_edit)
        for b in (self.toggle, self.edit_button):
            head.addWidget(b)
        lay.addLayout(head)
        self.body = QLabel()
        self.body.setTextFormat(Qt.TextFormat.PlainText)  # the model's words: never markup
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.body)
        self.editor = QPlainTextEdit()
        self.editor.hide()
        lay.addWidget(self.editor)
        row = QHBoxLayout()
        self.save_button = QToolButton()
        self.save_button.setText("Save")
        self.save_button.clicked.connect(self._save)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.clicked.connect(self.cancel_edit)
        self.problem = QLabel()
        self.problem.setStyleSheet("color: palette(link);")
        for w in (self.save_button, self.cancel_button, self.problem):
            row.addWidget(w)
            w.hide()
        row.addStretch(1)
        lay.addLayout(row)

    def show_summary(self, summary: Summary) -> None:
        """Show ``summary`` (folded, unless the same one was open)."""
        same = self.summary is not None and self.summary.id == summary.id
        self.summary = summary
        edited = " · edited by you" if summary.edited else ""
        self.title.setText(f"Summary of {summary.covers:,} earlier messages (written by the model{edited})")
        self.title.setToolTip("The model is given this summary instead of the messages above it, which stay "
                              "here. Pinned messages are never summarized.")
        self.body.setText(summary.text)
        if not same:
            self.cancel_edit()
            self.toggle.setChecked(False)
        self._folded(self.toggle.isChecked())

    def _folded(self, open_: bool) -> None:
        self.toggle.setText("Hide" if open_ else "Show")
        text = self.summary.text if self.summary is not None else ""
        first = text.strip().splitlines()[0] if text.strip() else ""
        self.body.setText(text if open_ else (first[:120] + ("…" if len(first) > 120 or "\n" in text.strip() else "")))

    def start_edit(self) -> None:
        if self.summary is None:
            return
        self.editor.setPlainText(self.summary.text)
        self.body.hide()
        for w in (self.editor, self.save_button, self.cancel_button):
            w.show()
        self.edit_button.setEnabled(False)
        self.editor.setFocus()

    def cancel_edit(self) -> None:
        for w in (self.editor, self.save_button, self.cancel_button, self.problem):
            w.hide()
        self.body.show()
        self.edit_button.setEnabled(True)

    def _save(self) -> None:
        text = self.editor.toPlainText()
        if not text.strip():
            self.problem.setText("A summary cannot be empty: the model would lose what it stands for.")
            self.problem.show()
            return
        if self.summary is not None:
            self.edited.emit(self.summary.id, text)
        self.cancel_edit()
