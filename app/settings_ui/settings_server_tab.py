"""Settings → Local server: the OpenAI-compatible API on 127.0.0.1, off by default.

The tab edits the port, the API key (made with ``secrets.token_urlsafe``, shown,
copied or regenerated here) and the web origins allowed to call it (CORS);
the dialog hands its values to Settings, which checks them.
"""
from __future__ import annotations

import secrets
from typing import Any

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
                               QPushButton, QSpinBox, QWidget)

from app.core.settings import Settings


def new_api_key() -> str:
    """A fresh key: 32 random bytes, URL-safe (what clients paste as their OpenAI key)."""
    return secrets.token_urlsafe(32)


class ServerTab(QWidget):
    def __init__(self, s: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        intro = QLabel("Lets programs on this computer (editors, scripts, Open WebUI…) use the loaded model "
                       "through the OpenAI API, while Hearth runs. It listens on 127.0.0.1 only; the "
                       "window's own replies always go first. API requests are not saved in your chats.")
        intro.setWordWrap(True)
        form.addRow(intro)
        self.enabled = QCheckBox("Run the local server")
        self.enabled.setChecked(s.server_enabled)
        form.addRow(self.enabled)
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(s.server_port)
        form.addRow("Port", self.port)

        self.require_key = QCheckBox("Require an API key")
        # A first-time set-up starts with a key: a program must be told it before it can call.
        self.require_key.setChecked(bool(s.server_api_key) or not s.server_enabled)
        form.addRow(self.require_key)
        self.key = QLineEdit(s.server_api_key or new_api_key())
        self.key.setReadOnly(True)
        self.copy_key = QPushButton("Copy")
        self.copy_key.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.key.text()))
        self.regenerate = QPushButton("Regenerate")
        self.regenerate.setToolTip("Make a new key; programs using the old one must be given the new one")
        self.regenerate.clicked.connect(lambda: self.key.setText(new_api_key()))
        row = QHBoxLayout()
        row.addWidget(self.key, 1)
        row.addWidget(self.copy_key)
        row.addWidget(self.regenerate)
        form.addRow("API key", row)

        self.cors = QPlainTextEdit("\n".join(s.server_cors))
        self.cors.setPlaceholderText("none: web pages cannot call the server\nhttp://localhost:3000")
        self.cors.setToolTip("Web pages (origins) allowed to call the server from a browser, one per line. "
                             "Programs outside a browser need no entry.")
        self.cors.setMaximumHeight(70)
        form.addRow("Allowed web origins", self.cors)
        self.example = QLabel()
        self.example.setWordWrap(True)
        self.example.setTextInteractionFlags(self.example.textInteractionFlags().TextSelectableByMouse)
        form.addRow(self.example)
        for sig in (self.enabled.toggled, self.require_key.toggled, self.port.valueChanged, self.key.textChanged):
            sig.connect(self._refresh)
        self._refresh()

    def _refresh(self, *_: Any) -> None:
        on = self.enabled.isChecked()
        for w in (self.port, self.require_key, self.cors):
            w.setEnabled(on)
        keyed = on and self.require_key.isChecked()
        for w in (self.key, self.copy_key, self.regenerate):
            w.setEnabled(keyed)
        key = self.key.text() if keyed else "unused"
        self.example.setText(f"Base URL http://127.0.0.1:{self.port.value()}/v1 · in Python: "
                             f"OpenAI(base_url=\"http://127.0.0.1:{self.port.value()}/v1\", api_key=\"{key}\")")

    def values(self) -> dict[str, Any]:
        """The server fields of Settings, as edited."""
        origins = [o.strip().rstrip("/") for o in self.cors.toPlainText().splitlines() if o.strip()]
        return {"server_enabled": self.enabled.isChecked(), "server_port": self.port.value(),
                "server_api_key": self.key.text() if self.require_key.isChecked() else "",
                "server_cors": origins}
