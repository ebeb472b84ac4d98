"""Runs the engine's sizing planner off the GUI thread for the settings dialog.

``engine.sizing.plan.plan_for`` reads the model file and searches the memory
model (most of a second for a small GGUF), too slow for the GUI thread. It
plans a LoadRequest the way the load itself will (engine.loading.request_plan), on the same
machine view, so the dialog shows the plan that is carried out.
Each request gets a number; a newer request supersedes the older ones
(app/bridge/background.py), and the dialog shows only the newest answer.
"""
from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal

import engine.loading as plan_load
from engine.loading import LoadRequest
from engine.sizing import Hardware

from app.bridge.background import Background


class _Machines:
    """One probe per kind of machine per dialog; it never changes while the dialog is open.
    Plain data, so the planning threads share it without holding the dialog."""

    def __init__(self) -> None:
        self._hardware: dict[str, Hardware] = {}
        self._lock = threading.Lock()

    def plan(self, req: LoadRequest):
        """On a worker thread: the plan for a load, as the load will make it."""
        from engine import HearthError

        fmt = req.plan_format
        if fmt is None:
            raise HearthError("the memory plan covers GGUF files on llama.cpp and transformers checkpoints; "
                              "a GGUF file on transformers is dequantized, which it does not plan")
        with self._lock:
            if fmt not in self._hardware:
                self._hardware[fmt] = plan_load.machine(fmt, torch_ok=False)
            hw = self._hardware[fmt]
        if req.workers and fmt == "gguf":  # other machines' devices, as their last check found them
            from app.core.machine_list import MachineList
            from app.core.paths import data_dir

            rows = {r.address: r for r in MachineList(data_dir()).all()}  # one read of the file
            found = [(a, rows.get(a)) for a in req.workers]
            hw = plan_load.with_workers(hw, [(r.machine.label if r else a, r.memory if r else ()) for a, r in found])
        return plan_load.plan_request(req, hardware=hw)


class PlanRunner(QObject):
    """The planner for one dialog: ``request(req)`` now, ``ready`` or ``failed`` later."""

    ready = Signal(int, object)   # request number, engine.sizing.plan.Plan
    failed = Signal(int, str)     # request number, one-line message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._n = 0
        self._machines = _Machines()
        self._bg = Background(self)

    def request(self, req: LoadRequest) -> int:
        """Plan a load (engine.loading.request_plan.plan_request, as the load will); returns the request number."""
        self._n += 1
        n, machines = self._n, self._machines
        self._bg.run(lambda: machines.plan(req), on_done=lambda plan: self.ready.emit(n, plan),
                     on_failed=lambda e: self.failed.emit(n, _message(e)), kind="plan", name=f"hearth-plan-{n}")
        return n


def _message(e: BaseException) -> str:
    from engine import HearthError

    if isinstance(e, HearthError):
        return str(e)
    return f"the memory planner failed ({type(e).__name__}: {e})"  # a planner bug must not take the dialog down
