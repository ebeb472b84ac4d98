"""Settings → Local server: the OpenAI-compatible API on 127.0.0.1, off by default.

The tab edits the port, the API key (made with ``secrets.token_urlsafe``, shown,
copied or regenerated here) and the web origins allowed to call it (CORS);
the dialog hands its values to Settings, which checks them. "Let other devices…"
listens beyond loopback (TLS and a key always), with the keys other devices use:
each made here is shown once and kept only as a hash (engine/serve/http/keys.py), each
with the priority its device's requests get when they name none. The longest wait in
the queue is how long a request may wait for the model before a 503 says to retry.
"""
from __future__ import annotations

import secrets
import time
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QPlainTextEdit, QPushButton, QSpinBox, QWidget)

from engine import HearthError
from engine.serve import PRIORITIES, key_ring

from app.core import server_settings
from app.core.paths import data_dir
from app.core.settings import Settings


def new_api_key() -> str:
    """A fresh key: 32 random bytes, URL-safe (what clients paste as their OpenAI key)."""
    return secrets.token_urlsafe(32)


class ServerTab(QWidget):
    def __init__(self, s: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        intro = QLabel("Lets programs on this computer (editors, scripts, Open WebUI…) use the loaded model "
                       "through the OpenAI API, while Hearth runs. It listens on 127.0.0.1 unless you let other "
                       "devices in below; the window's own replies always go first. API requests are not saved in "
                       "your chats.")
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

        self.max_wait = QSpinBox()
        self.max_wait.setRange(0, server_settings.MAX_QUEUE_WAIT_LIMIT)
        self.max_wait.setSuffix(" s")
        self.max_wait.setSpecialValueText("No limit")
        self.max_wait.setValue(s.server_max_queue_wait)
        self.max_wait.setToolTip("A request that waits longer than this for the model to start it (other "
                                 "requests, or the window's reply, hold it) is answered 503 with Retry-After, "
                                 "which clients retry, rather than left waiting")
        form.addRow("Longest wait in the queue", self.max_wait)

        self.cors = QPlainTextEdit("\n".join(s.server_cors))
        self.cors.setPlaceholderText("none: web pages cannot call the server\nhttp://localhost:3000")
        self.cors.setToolTip("Web pages (origins) allowed to call the server from a browser, one per line. "
                             "Programs outside a browser need no entry.")
        self.cors.setMaximumHeight(70)
        form.addRow("Allowed web origins", self.cors)
        self._network_rows(form, s)
        self.example = QLabel()
        self.example.setWordWrap(True)
        self.example.setTextInteractionFlags(self.example.textInteractionFlags().TextSelectableByMouse)
        form.addRow(self.example)
        for sig in (self.enabled.toggled, self.require_key.toggled, self.port.valueChanged, self.key.textChanged,
                    self.listen.toggled, self.listen_addr.textChanged):
            sig.connect(self._refresh)
        self._refresh()

    def _network_rows(self, form: QFormLayout, s: Settings) -> None:
        """"Let other devices…": the address, and the keys those devices use (each shown once, revocable)."""
        self.listen = QCheckBox("Let other devices on my network use this model")
        self.listen.setChecked(bool(s.server_listen))
        self.listen.setToolTip("Listen beyond this computer, over TLS, answering only requests with one of the "
                               "keys below. Another Hearth pins this server's certificate on first use.")
        form.addRow(self.listen)
        self.listen_addr = QLineEdit(s.server_listen or "0.0.0.0")
        self.listen_addr.setToolTip("0.0.0.0: every network of this computer; or one of its addresses")
        form.addRow("Listen on", self.listen_addr)
        self.ring = key_ring(data_dir())
        self.device_keys = QListWidget()
        self.device_keys.setMaximumHeight(70)
        self.new_key = QLineEdit()
        self.new_key.setReadOnly(True)
        self.new_key.setPlaceholderText("a new key appears here once; it is stored only as a hash")
        self.make_key, self.revoke_key = make, revoke = QPushButton("New key"), QPushButton("Revoke")
        make.clicked.connect(self._make_key)
        revoke.clicked.connect(self._revoke_key)
        # The class of a device's requests that name no priority: for the key picked in the list (a change
        # applies to its next request), and for the next new key.
        self.key_priority = QComboBox()
        for name in PRIORITIES:
            self.key_priority.addItem(name.capitalize(), name)
        self.key_priority.setToolTip("The priority of this device's requests that name none: interactive (someone "
                                     "waits for it) or background (runs after interactive requests, and is raised "
                                     "while it waits). The window's own replies always go first.")
        self.key_priority.activated.connect(self._set_priority)
        self.device_keys.currentItemChanged.connect(self._show_priority)
        row = QHBoxLayout()
        row.addWidget(self.new_key, 1)
        row.addWidget(self.key_priority)
        row.addWidget(make)
        row.addWidget(revoke)
        self.device_rows = (self.listen_addr, self.device_keys, self.new_key, self.key_priority, make, revoke)
        form.addRow("Keys for devices", self.device_keys)
        form.addRow("", row)
        self._list_keys()

    def _list_keys(self, select: str | None = None) -> None:
        """The key ring's keys (each with its priority); ``select``: the id of the key to keep picked."""
        self.device_keys.clear()
        try:
            entries = self.ring.entries()
        except HearthError as e:
            self.device_keys.addItem(str(e))
            return
        for e in entries:
            item = QListWidgetItem(f"{e.name} · made {time.strftime('%Y-%m-%d', time.localtime(e.created))} · "
                                   f"{e.priority} · {e.id}")
            item.setData(Qt.ItemDataRole.UserRole, e.id)
            item.setData(Qt.ItemDataRole.UserRole + 1, e.priority)
            self.device_keys.addItem(item)
            if e.id == select:
                self.device_keys.setCurrentItem(item)

    def _make_key(self) -> None:
        entry, key = self.ring.create(f"device {len(self.ring.entries()) + 1}", self.key_priority.currentData())
        self.new_key.setText(key)
        self._list_keys(select=entry.id)

    def _show_priority(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        if item is not None and item.data(Qt.ItemDataRole.UserRole + 1):
            self.key_priority.setCurrentIndex(self.key_priority.findData(item.data(Qt.ItemDataRole.UserRole + 1)))

    def _set_priority(self, _index: int = 0) -> None:
        """The user picked a priority: the picked key gets it (a new key will get it too)."""
        item = self.device_keys.currentItem()
        if item is not None and item.data(Qt.ItemDataRole.UserRole):
            entry = self.ring.set_priority(item.data(Qt.ItemDataRole.UserRole), self.key_priority.currentData())
            self._list_keys(select=entry.id)

    def _revoke_key(self) -> None:
        item = self.device_keys.currentItem()
        if item is not None and item.data(Qt.ItemDataRole.UserRole):
            self.ring.revoke(item.data(Qt.ItemDataRole.UserRole))
            self.new_key.clear()
            self._list_keys()

    def _refresh(self, *_: Any) -> None:
        on = self.enabled.isChecked()
        for w in (self.port, self.require_key, self.max_wait, self.cors, self.listen):
            w.setEnabled(on)
        for w in self.device_rows:
            w.setEnabled(on and self.listen.isChecked())
        keyed = on and self.require_key.isChecked()
        for w in (self.key, self.copy_key, self.regenerate):
            w.setEnabled(keyed)
        key = self.key.text() if keyed else "unused"
        base = f"http://127.0.0.1:{self.port.value()}/v1"
        if on and self.listen.isChecked():
            base = f"https://{self.listen_addr.text().strip() or '0.0.0.0'}:{self.port.value()}/v1"
            key = "one of the keys for devices"
        self.example.setText(f"Base URL {base} · in Python: OpenAI(base_url=\"{base}\", api_key=\"{key}\")")

    def values(self) -> dict[str, Any]:
        """The server fields of Settings, as edited."""
        origins = [o.strip().rstrip("/") for o in self.cors.toPlainText().splitlines() if o.strip()]
        return {"server_enabled": self.enabled.isChecked(), "server_port": self.port.value(),
                "server_api_key": self.key.text() if self.require_key.isChecked() else "",
                "server_cors": origins, "server_max_queue_wait": self.max_wait.value(),
                "server_listen": self.listen_addr.text().strip() if self.listen.isChecked() else ""}
