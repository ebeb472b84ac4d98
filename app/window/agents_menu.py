"""The Agents menu: start Claude Code, Codex CLI or OpenCode in a terminal, on this window's model.

What ``python -m engine launch`` does from a terminal, from the window: the agent works in a folder
the user picks, against the window's own local server (turned on, on 127.0.0.1, if it was off, so
the model is not loaded twice), with the server's key and the loaded model's name. A missing agent
says how to install it; a context too small for the agent's prompt says so before it starts.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog

from app.core.agent_terminal import context_warning, start_agent
from app.window.menus import add_action
from engine.serve.agents import AGENTS
from engine.serve.runtime.targets import loaded_model_id

if TYPE_CHECKING:
    from app.window.main_window import MainWindow

LOCAL_KEY = "hearth-local"  # what the agent sends when the server asks for no key


class AgentsMenu:
    """``pick_folder()``: the folder the agent works in (a dialog; tests give their own)."""

    def __init__(self, w: "MainWindow", pick_folder: Callable[[], str] | None = None) -> None:
        self.w = w
        self.pick_folder = pick_folder or self._ask_folder
        menu = w.menuBar().addMenu("&Agents")
        self.actions = {name: add_action(menu, w, f"Start {a.title}…", QKeySequence(),
                                         lambda _=False, n=name: self.start(n))
                        for name, a in AGENTS.items()}
        self.last = None  # the last start's result (the script it wrote), for the tests

    def _ask_folder(self) -> str:
        return QFileDialog.getExistingDirectory(self.w, "The folder the agent works in", str(Path.home()))

    def start(self, agent: str) -> bool:
        w = self.w
        model = w.host.model if w.host.ready else None
        if model is None:
            w.info.show_message("Load a model first: the agent uses the window's model.", "error")
            return False
        folder = self.pick_folder()
        if not folder:
            return False
        if not w.server_host.running:  # the agent talks to the window's server: on, on loopback
            w.apply_settings(dataclasses.replace(w.settings, server_enabled=True))
            if not w.server_host.running:
                return False  # apply_settings showed why
        warn = context_warning(agent, model.n_ctx)
        s = w.settings
        port = w.server_host.server.port if w.server_host.server is not None else s.server_port
        self.last = start_agent(agent, f"http://127.0.0.1:{port}", s.server_api_key or LOCAL_KEY,
                                loaded_model_id(model), Path(folder))
        text = self.last.message + (f". {warn}" if warn else "")
        w.info.show_message(text, "info" if self.last.ok and not warn else "error")
        return self.last.ok
