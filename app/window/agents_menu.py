"""The Agents menu: start Claude Code, Codex CLI or OpenCode in a terminal, on this window's model.

What ``python -m engine launch`` does from a terminal, from the window: the agent works in a folder
the user picks, against the window's own local server (turned on, on 127.0.0.1, if it was off, so
the model is not loaded twice), with the server's key and the loaded model's name. A missing agent
says how to install it; a context too small for the agent's prompt says so before it starts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from app.bridge.engine_host import EngineHost
from app.bridge.server_host import ServerHost
from app.core.agent_terminal import context_warning, start_agent
from app.core.settings import Settings
from app.ui.info_bar import InfoArea
from app.window.menus import add_action
from engine.serve import AGENTS, loaded_model_id

LOCAL_KEY = "hearth-local"  # what the agent sends when the server asks for no key


class AgentsMenu:
    """The menu in ``menu``. ``serve_locally()`` turns the window's local server on (it says why where it
    cannot); ``pick_folder()``: the folder the agent works in (a dialog; tests give their own)."""

    def __init__(self, *, menu: QMenu, parent: QWidget, host: EngineHost, server: ServerHost, info: InfoArea,
                 settings: Callable[[], Settings], serve_locally: Callable[[], None],
                 pick_folder: Callable[[], str] | None = None) -> None:
        self.parent, self.host, self.server, self.info = parent, host, server, info
        self.settings, self.serve_locally = settings, serve_locally
        self.pick_folder = pick_folder or self._ask_folder
        self.actions = {name: add_action(menu, parent, f"Start {a.title}…", QKeySequence(),
                                         lambda _=False, n=name: self.start(n))
                        for name, a in AGENTS.items()}
        self.last = None  # the last start's result (the script it wrote), for the tests

    def _ask_folder(self) -> str:
        return QFileDialog.getExistingDirectory(self.parent, "The folder the agent works in", str(Path.home()))

    def start(self, agent: str) -> bool:
        model = self.host.model if self.host.ready else None
        if model is None:
            self.info.show_message("Load a model first: the agent uses the window's model.", "error")
            return False
        folder = self.pick_folder()
        if not folder:
            return False
        if not self.server.running:  # the agent talks to the window's server: on, on loopback
            self.serve_locally()
            if not self.server.running:
                return False  # turning it on showed why
        warn = context_warning(agent, model.n_ctx)
        s = self.settings()
        port = self.server.server.port if self.server.server is not None else s.server_port
        self.last = start_agent(agent, f"http://127.0.0.1:{port}", s.server_api_key or LOCAL_KEY,
                                loaded_model_id(model), Path(folder))
        text = self.last.message + (f". {warn}" if warn else "")
        self.info.show_message(text, "info" if self.last.ok and not warn else "error")
        return self.last.ok
