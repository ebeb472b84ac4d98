"""The settings dialog's Draft model box: Auto, None, and by name the draft models on disk that suit
the chosen model.

Finding them reads the GGUF header of every model on disk (app.library.library_view.draft_choices),
too slow for the GUI thread each time Settings opens, so the list is worked out in the background
(app/bridge/background.py). Until it arrives the box holds Auto, None and the user's current choice,
selected, so the dialog can be read, planned and accepted meanwhile without losing that choice.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QComboBox

from app.bridge.background import Background, error_text
from app.core.settings import DRAFTS


class DraftList:
    """Keeps ``combo`` listing the drafts for a model; ``changed()`` is called when the list that
    arrives no longer holds the chosen draft, which then falls back to Auto."""

    def __init__(self, combo: QComboBox, owner: QObject, changed: Callable[[], None]) -> None:
        self.combo, self._changed = combo, changed
        self._bg = Background(owner)

    @property
    def pending(self) -> bool:
        """Whether a list is still being worked out (tests wait on this)."""
        return self._bg.running("drafts") > 0

    def chosen(self) -> str:
        """"auto", "none" or the path of the draft GGUF picked by name."""
        return self.combo.currentData() or "auto"

    def fill(self, model: str, current: str) -> None:
        """List the drafts for ``model`` in the background; ``current`` stays chosen meanwhile."""
        from app.library.library_view import draft_choices

        kept = [] if current in DRAFTS else [(Path(current).name, current)]
        self._show(kept, current)
        self._bg.run(lambda: draft_choices(model), on_done=self._arrived, on_failed=self._failed,
                     kind="drafts", name="hearth-drafts")  # a newer model's list supersedes this one

    def _show(self, choices: list[tuple[str, str]], current: str) -> bool:
        """Fill the box; returns whether ``current`` is still the choice (else Auto is)."""
        self.combo.blockSignals(True)  # filling the box is not the user choosing: _arrived says what changed
        self.combo.clear()
        for label, data in [(d.title(), d) for d in DRAFTS] + choices:
            self.combo.addItem(label, data)
        i = self.combo.findData(current)
        self.combo.setCurrentIndex(max(i, 0))  # one that does not suit: Auto
        self.combo.blockSignals(False)
        return i >= 0

    def _arrived(self, choices: list[tuple[str, str]]) -> None:
        current = self.chosen()  # what the user picks meanwhile counts, not what was chosen at the start
        if not self._show(choices, current):
            self._changed()

    def _failed(self, e: BaseException) -> None:
        current = self.chosen()
        kept = self._show([], current)
        self.combo.addItem(f"Could not list the draft models on disk: {error_text(e)}")
        self.combo.model().item(self.combo.count() - 1).setEnabled(False)
        if not kept:
            self._changed()
