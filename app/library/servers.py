"""Servers in the model library: models another machine serves, listed beside the ones on disk.

``ServerList`` keeps the connections (app/core/connections.py), asks each server
for its models off the GUI thread, and fills the library table's last rows with
them, marked with where they run. ``AddServerDialog`` takes a URL and a key, lists
the server's models before it saves anything, and says in one line why a server
cannot be used (refused, timed out, TLS, a changed certificate, 401): what the user
typed stays in the dialog.
"""
from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QTableWidget,
                               QTableWidgetItem, QWidget)

from engine.loading import remote_model
from engine.remote import list_models

from app.bridge.background import Background, error_text
from app.core.connections import Connection, Connections, listed

WHERE_PREFIX = "on "


class ServerList(QObject):
    """The servers' models as library rows: (connection, model id, context) each."""

    changed = Signal()              # the rows changed: the table should be filled again
    message = Signal(str, bool)     # one line for the library's status, and whether it is good news

    def __init__(self, connections: Connections, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.connections = connections
        self.rows: list[tuple[Connection, str, int | None]] = []
        self._bg = Background(self)
        self.reload()

    def reload(self) -> None:
        """The rows from the stored connections (no network)."""
        self.rows = [(c, mid, n) for c in self.connections.all() for mid, n in c.models]

    def fill(self, table: QTableWidget, start: int, loaded: str | None, columns: int) -> None:
        """Rows ``start``... of ``table``: each server model as Name, Context and Where (the rest "—")."""
        for i, (c, mid, n_ctx) in enumerate(self.rows):
            cells = ["—"] * columns
            # Where it runs goes in the name too: the Where column is the last, often scrolled out of view.
            cells[0], cells[5], cells[7] = f"{mid} · on {c.title}", f"{n_ctx:,}" if n_ctx else "—", "on its server"
            cells[-1] = WHERE_PREFIX + c.title
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{mid}\nserved by {c.url}" + (" (with a key)" if c.has_key else ""))
                table.setItem(start + i, col, item)
            if remote_model(c.url, mid) == loaded:
                f = table.item(start + i, 0).font()
                f.setBold(True)
                table.item(start + i, 0).setFont(f)

    def add(self, url: str, key: str, name: str, *, on_done, on_failed) -> None:
        """List ``url``'s models (off the GUI thread); when that works, keep the server and its key."""
        conns, data = self.connections, self.connections.data_dir
        cancel = threading.Event()

        def ask() -> Connection:
            from engine.remote import Endpoint

            normal = Endpoint.parse(url).url
            return listed(normal, list_models(normal, key or None, data_dir=data, cancel=cancel), name.strip(),
                          bool(key))

        def done(conn: Connection) -> None:
            conns.save(conn, key or "")
            self.reload()
            self.changed.emit()
            self.message.emit(f"{conn.title}: {len(conn.models)} model{'s' if len(conn.models) != 1 else ''} "
                              "listed in the library.", True)
            on_done(conn)

        self._bg.run(ask, on_done=done, on_failed=lambda e: on_failed(error_text(e)), cancel=cancel,
                     name="hearth-add-server")

    def refresh(self) -> None:
        """Ask every server again for its models; one that does not answer keeps its last list and says why."""
        conns = self.connections
        servers = conns.all()
        if not servers:
            return

        def ask(report) -> None:
            for c in servers:
                try:
                    fresh = listed(c.url, list_models(c.url, conns.key(c.url), data_dir=conns.data_dir), c.name,
                                   c.has_key)
                    report(fresh, "")
                except Exception as e:  # each server's failure is its own line
                    report(c, f"{c.title}: {error_text(e)}")

        def got(conn: Connection, problem: str) -> None:
            if problem:
                self.message.emit(problem + " (its last list is shown)", False)
            else:
                conns.save(conn)
            self.reload()
            self.changed.emit()

        self._bg.run(ask, on_done=lambda _none: None, on_failed=lambda e: self.message.emit(error_text(e), False),
                     on_progress=got, kind="refresh", name="hearth-servers-refresh")

    def remove(self, url: str) -> None:
        conn = self.connections.get(url)
        self.connections.remove(url)
        self.reload()
        self.changed.emit()
        self.message.emit(f"Forgot {conn.title if conn else url}, its key and its certificate.", True)


class AddServerDialog(QDialog):
    """URL, key and a name; Add lists the server's models first and closes only when that works."""

    def __init__(self, servers: ServerList, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a server")
        self.servers = servers
        form = QFormLayout(self)
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://192.168.1.20:8765/v1  (another Hearth, llama-server, vLLM, SGLang, "
                                    "LM Studio, Ollama's /v1)")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("the server's API key, if it asks for one")
        self.name = QLineEdit()
        self.name.setPlaceholderText("optional: what to call it (\"desktop GPU\")")
        self.status = QLabel("Its models are listed before anything is saved. The key is kept in "
                             f"{servers.connections.keys.where}, never in a conversation.")
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        self.buttons.accepted.connect(self.try_add)
        self.buttons.rejected.connect(self.reject)
        form.addRow("Server URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("Name", self.name)
        form.addRow(self.status)
        form.addRow(self.buttons)
        self.resize(560, self.sizeHint().height())

    def try_add(self) -> None:
        self.buttons.setEnabled(False)
        self.status.setText(f"Asking {self.url.text().strip() or 'the server'} for its models…")
        self.servers.add(self.url.text(), self.key.text().strip(), self.name.text(),
                         on_done=lambda _c: self.accept(), on_failed=self._failed)

    def _failed(self, why: str) -> None:
        self.buttons.setEnabled(True)
        self.status.setText(f"<span style='color:#d9480f'>{_escape(why)}</span>")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
