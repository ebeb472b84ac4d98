"""Runs the engine's sizing planner off the GUI thread for the settings dialog.

``engine.sizing.plan.plan_for`` reads the model file and searches the memory
model (most of a second for a small GGUF), too slow for the GUI thread. It
plans a LoadRequest the way the load itself will (engine.loading.plan), on the same
machine view, so the dialog shows the plan that is carried out.
Each request gets a number; the dialog shows only the newest answer.
"""
from __future__ import annotations

import threading
import traceback
from PySide6.QtCore import QObject, Signal

from engine.loading import plan as plan_load
from engine.loading.request import LoadRequest
from engine.sizing.hardware import Hardware


class PlanRunner(QObject):
    ready = Signal(int, object)   # request number, engine.sizing.plan.Plan
    failed = Signal(int, str)     # request number, one-line message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._n = 0
        self._hardware: dict[str, Hardware] = {}
        self._lock = threading.Lock()

    def request(self, req: LoadRequest) -> int:
        """Plan a load (engine.loading.plan.plan_request, as the load will); returns the request number."""
        self._n += 1
        n = self._n
        threading.Thread(target=self._run, args=(n, req), daemon=True, name=f"hearth-plan-{n}").start()
        return n

    def _run(self, n: int, req: LoadRequest) -> None:
        from engine import HearthError

        try:
            fmt = req.plan_format
            if fmt is None:
                raise HearthError("the memory plan covers GGUF files on llama.cpp and transformers checkpoints; "
                                  "a GGUF file on transformers is dequantized, which it does not plan")
            with self._lock:  # one probe per kind of machine per dialog; it never changes while the dialog is open
                if fmt not in self._hardware:
                    self._hardware[fmt] = plan_load.machine(fmt, torch_ok=False)
                hw = self._hardware[fmt]
            result = (self.ready, (n, plan_load.plan_request(req, hardware=hw)))
        except HearthError as e:
            result = (self.failed, (n, str(e)))
        except Exception as e:  # a planner bug must not take the dialog down; say so instead
            traceback.print_exc()
            result = (self.failed, (n, f"the memory planner failed ({type(e).__name__}: {e})"))
        try:
            result[0].emit(*result[1])
        except RuntimeError:  # the dialog was closed while planning
            pass
