"""Runs the engine's sizing planner off the GUI thread for the settings dialog.

``engine.sizing.plan.plan_for`` reads the model file and searches the memory
model (most of a second for a small GGUF), too slow for the GUI thread.
Each request gets a number; the dialog shows only the newest answer.
"""
from __future__ import annotations

import threading
import traceback

from PySide6.QtCore import QObject, Signal


class PlanRunner(QObject):
    ready = Signal(int, object)   # request number, engine.sizing.plan.Plan
    failed = Signal(int, str)     # request number, one-line message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._n = 0
        self._hardware = None
        self._lock = threading.Lock()

    def request(self, model: str | None, n_ctx: int | None, draft: str | None, quant: str | None = None) -> int:
        """Plan ``model`` (None = bundled) with these choices (``quant`` None = Auto);
        returns the request number."""
        self._n += 1
        n = self._n
        threading.Thread(target=self._run, args=(n, model, n_ctx, draft, quant), daemon=True,
                         name=f"hearth-plan-{n}").start()
        return n

    def _run(self, n: int, model: str | None, n_ctx: int | None, draft: str | None, quant: str | None) -> None:
        from engine import HearthError
        from engine.sizing.hardware import probe
        from engine.sizing.plan import Choices, plan_for

        try:
            with self._lock:  # one probe per dialog; it never changes while the dialog is open
                if self._hardware is None:
                    self._hardware = probe(allow_torch=False)
            plan = plan_for(model, hardware=self._hardware, choices=Choices(quant=quant, n_ctx=n_ctx, draft=draft))
            result = (self.ready, (n, plan))
        except HearthError as e:
            result = (self.failed, (n, str(e)))
        except Exception as e:  # a planner bug must not take the dialog down; say so instead
            traceback.print_exc()
            result = (self.failed, (n, f"the memory planner failed ({type(e).__name__}: {e})"))
        try:
            result[0].emit(*result[1])
        except RuntimeError:  # the dialog was closed while planning
            pass
