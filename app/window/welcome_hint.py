"""The welcome page's model and its larger-model hint, worked out after each model load.

``UpgradeHint`` is one of MainWindow's controllers: it names the model loaded on the
welcome page (app/chat/welcome.py's WelcomePanel), asks the planner whether this
machine's GPU could run a larger model than that one, and shows the answer there.
Listing ggml's devices takes seconds on some machines, so it runs through
app/bridge/background.py.
"""
from __future__ import annotations

import sys

from PySide6.QtCore import QObject

from engine import ModelInfo

from app.bridge.background import Background
from app.chat.welcome import WelcomePanel


def work_out_hint(model_path: str) -> str | None:
    """On a worker thread: the hint's text, or None when there is nothing larger to suggest."""
    import engine.loading as plan_load
    from app.core.upgrade_hint import hint_for

    return hint_for(model_path, plan_load.machine("gguf"))


class UpgradeHint:
    """Puts the hint for each loaded model on ``panel``; the answers' calls belong to ``owner``."""

    def __init__(self, *, panel: WelcomePanel, owner: QObject) -> None:
        self.panel = panel
        self.loads = 0  # models loaded so far: numbers each question
        self.answered = 0  # the number of the last load whose hint came back
        self._bg = Background(owner)

    def model_loaded(self, model: ModelInfo) -> None:
        """Name ``model`` (the host's loaded) on the page and ask about it; a newer load's question
        supersedes an older one's."""
        self.panel.set_model(model.label, model.bundled)
        self.loads += 1
        n, path = self.loads, model.path
        if model.capabilities.on_server:  # its server's GPU, not this machine's, decides what else would run
            self._ready(n, None)
            return
        self._bg.run(lambda: work_out_hint(path), on_done=lambda text: self._ready(n, text),
                     on_failed=lambda e: self._failed(n, e), kind="hint", name="hearth-hint")

    def _ready(self, n: int, text: str | None) -> None:
        self.panel.set_hint(text)
        self.answered = n

    def _failed(self, n: int, e: BaseException) -> None:
        # Only the hint is missing; the chat works. Say why where bug reports look.
        print(f"hearth: no larger-model hint ({type(e).__name__}: {e})", file=sys.stderr)
        self._ready(n, None)
