"""The Model tab's "Prompt cache" row: what the disk prompt cache holds, and its Clear button."""
from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from engine.loading import DEFAULT_DISK_BUDGET, store_usage

from app.core.paths import prefix_store_dir
from app.core.text_utils import human_bytes
from app.settings_ui.memory_details import clear_prefix_store


class CacheRow(QWidget):
    """The saved system-prompt snapshots' count and size, with "Clear cache"."""

    def __init__(self) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setToolTip(f"KV snapshots of system prompts, kept in {prefix_store_dir()} so a restart "
                              "does not read them again; the least recently used go first past the cap")
        self.button = QPushButton("Clear cache")
        self.button.clicked.connect(lambda: self.show_usage(clear_prefix_store()))
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        self.show_usage()

    def show_usage(self, freed: int | None = None) -> None:
        n, size = store_usage(prefix_store_dir())
        text = (f"{n} saved system-prompt snapshot{'s' if n != 1 else ''}: {human_bytes(size)} on disk "
                f"(at most {human_bytes(DEFAULT_DISK_BUDGET)})")
        self.label.setText(text if freed is None else f"Freed {human_bytes(freed)}. {text}")
