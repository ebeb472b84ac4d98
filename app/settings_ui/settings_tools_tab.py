"""Settings → Tools: the MCP servers whose tools the model may call, and the rules for calling.

No server is there by default; "Add a known server" fills in one people use (fetch, git,
time, files) with the command that starts it here. A server is a program started on this computer (stdio:
a command and its arguments) or a Streamable HTTP URL. A URL on another machine is
added only after the user confirms it. Each server can be switched off without
removing it. The page also lists the tools the user allowed always, each with Revoke,
and sets how many calls one reply may make, each call's time limit, and whether a
reply's first step must call a tool. The dialog hands the values to Settings, which
checks them (app/core/mcp_servers.py).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QMessageBox, QPushButton, QSpinBox, QWidget)

from app.core import known_servers, mcp_servers as mcp
from app.core.settings import Settings

CHOICES = {"auto": "The model decides whether to call a tool", "required": "The first step must call a tool"}


class ToolsTab(QWidget):
    def __init__(self, s: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        intro = QLabel("MCP servers give the model tools: reading files, searching, a calculator… Hearth asks "
                       "before every call (Allow, Allow always, Deny) and shows its arguments and result. "
                       "A server is a program you chose: add only ones you trust.")
        intro.setWordWrap(True)
        form.addRow(intro)
        self.servers = QListWidget()
        self.servers.setToolTip("Ticked servers are connected and offer their tools; untick one to switch it off")
        for d in s.mcp_servers:
            self._add_item(mcp.McpServer.from_dict(d))
        form.addRow("Servers", self.servers)
        self.remove = QPushButton("Remove")
        self.remove.clicked.connect(lambda: self.servers.takeItem(self.servers.currentRow()))
        form.addRow("", self.remove)

        self.known = QComboBox()
        self.known.addItem("Add a known server…")
        for k in known_servers.KNOWN:
            self.known.addItem(f"{k.name}: {k.about}", k)
        self.known.setToolTip("Fills in the name and the command; check them, then Add")
        self.known.activated.connect(self.pick_known)
        form.addRow("", self.known)
        self.name = QLineEdit()
        self.name.setPlaceholderText("files")
        self.kind = QComboBox()
        self.kind.addItems(["Program (stdio)", "URL (Streamable HTTP)"])
        self.where = QLineEdit()
        self.where.setPlaceholderText("uvx mcp-server-fetch   or   http://127.0.0.1:8000/mcp")
        self.add = QPushButton("Add")
        self.add.clicked.connect(self.add_server)
        row = QHBoxLayout()
        row.addWidget(self.name, 1)
        row.addWidget(self.kind)
        row.addWidget(self.where, 3)
        row.addWidget(self.add)
        form.addRow("New server", row)
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #d9480f;")
        self.problem.hide()
        form.addRow(self.problem)

        self.allowed = QListWidget()
        self.allowed.setToolTip("Tools that run without asking; each is asked again when its server's tools change")
        for key, print_ in sorted(s.tool_allow.items()):
            item = QListWidgetItem(key.replace("/", " → ", 1))
            item.setData(Qt.ItemDataRole.UserRole, (key, print_))
            self.allowed.addItem(item)
        form.addRow("Allowed always", self.allowed)
        self.revoke = QPushButton("Revoke")
        self.revoke.setToolTip("Ask again before this tool runs")
        self.revoke.clicked.connect(lambda: self.allowed.takeItem(self.allowed.currentRow()))
        form.addRow("", self.revoke)

        self.max_calls = QSpinBox()
        self.max_calls.setRange(1, 100)
        self.max_calls.setValue(s.max_tool_calls)
        self.max_calls.setToolTip("A reply that reaches this many calls is finished without more")
        form.addRow("Calls per reply", self.max_calls)
        self.timeout = QDoubleSpinBox()
        self.timeout.setRange(1, 3600)
        self.timeout.setDecimals(0)
        self.timeout.setSuffix(" s")
        self.timeout.setValue(s.tool_timeout_s)
        self.timeout.setToolTip("A call that takes longer gives the model an error result")
        form.addRow("Time limit per call", self.timeout)
        self.choice = QComboBox()
        self.choice.addItems(list(CHOICES.values()))
        self.choice.setCurrentIndex(list(CHOICES).index(s.tool_choice))
        form.addRow("Calling", self.choice)

    def pick_known(self, index: int) -> None:
        """Fill the fields with a known server's name and the command that starts it here."""
        k = self.known.itemData(index)
        if k is None:
            return
        program, args, note = known_servers.command_for(k, folder=str(Path.home()))
        self.kind.setCurrentIndex(0)
        self.name.setText(k.name)
        self.where.setText(shlex.join([program, *args]))
        self._say(f"{k.name}: {note}." if note else "")
        self.known.setCurrentIndex(0)

    def _add_item(self, server: mcp.McpServer) -> None:
        item = QListWidgetItem(f"{server.name} — {server.where()}")
        item.setData(Qt.ItemDataRole.UserRole, server)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if server.enabled else Qt.CheckState.Unchecked)
        self.servers.addItem(item)

    def _say(self, text: str) -> None:
        self.problem.setText(text)
        self.problem.setVisible(bool(text))

    def confirm_remote(self, host: str) -> bool:
        """Ask before adding a URL on another machine (tests replace this)."""
        answer = QMessageBox.warning(
            self, "A server on another machine",
            f"{host} is not this computer. Its tools would see the arguments the model writes, which can "
            "include your conversation. Add it anyway?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def add_server(self) -> bool:
        """Add the server the fields describe; the problem is shown below them if it cannot be."""
        name, where = self.name.text().strip(), self.where.text().strip()
        if any(self._server(i).name == name for i in range(self.servers.count())):
            self._say(f"There is already a server called “{name}”.")
            return False
        if self.kind.currentIndex() == 0:
            try:
                words = shlex.split(where)
            except ValueError as e:
                self._say(f"The command cannot be read: {e}.")
                return False
            d: dict[str, Any] = {"name": name, "kind": "stdio", "command": words[0] if words else "",
                                 "args": words[1:]}
        else:
            d = {"name": name, "kind": "http", "url": where}
            if not mcp.is_local_url(where) and urlsplit(where).hostname:
                if not self.confirm_remote(urlsplit(where).hostname or where):
                    return False
                d["remote_ok"] = True
        try:
            server = mcp.McpServer.from_dict(d, "server")
        except ValueError as e:
            self._say(str(e).removeprefix("server."))
            return False
        self._add_item(server)
        self._say("")
        self.name.clear()
        self.where.clear()
        return True

    def _server(self, i: int) -> mcp.McpServer:
        item = self.servers.item(i)
        server = item.data(Qt.ItemDataRole.UserRole)
        return mcp.McpServer(server.name, server.kind, server.command, server.args, server.url,
                             item.checkState() == Qt.CheckState.Checked, server.remote_ok)

    def values(self) -> dict[str, Any]:
        """The tool fields of Settings, as edited."""
        servers = [self._server(i) for i in range(self.servers.count())]
        names = {s.name for s in servers}
        allow = dict(self.allowed.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.allowed.count()))
        allow = {k: v for k, v in allow.items() if k.split("/", 1)[0] in names}  # a removed server's go too
        return {"mcp_servers": [s.as_dict() for s in servers],
                "tool_allow": allow, "max_tool_calls": self.max_calls.value(),
                "tool_timeout_s": float(self.timeout.value()), "tool_choice": list(CHOICES)[self.choice.currentIndex()]}
