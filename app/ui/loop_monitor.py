"""Measures how late the GUI event loop runs, per phase (loading, streaming).

A 10 ms precise timer records how much later than due each tick fires. The
worst lateness is the longest the window could not react to the user; the
product budget is 100 ms. The timer runs only while a phase is active, so an
idle window does not wake up a hundred times a second.
"""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer

INTERVAL_MS = 10
BUDGET_MS = 100.0


class LoopMonitor(QObject):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(self._tick)
        self._active: set[str] = set()
        self._ending: dict[str, object] = {}
        self._last = 0.0
        self.worst_ms: dict[str, float] = {}
        self.ticks: dict[str, int] = {}

    def begin(self, phase: str) -> None:
        """Start attributing lateness to ``phase`` (phases may overlap)."""
        self._ending.pop(phase, None)
        self._active.add(phase)
        self.worst_ms.setdefault(phase, 0.0)
        self.ticks.setdefault(phase, 0)
        if not self._timer.isActive():
            self._last = time.perf_counter()
            self._timer.start()

    def end(self, phase: str, linger_ms: int = 4 * INTERVAL_MS) -> None:
        """Stop attributing to ``phase`` after ``linger_ms``.

        The work done right as a phase ends (rendering the finished reply,
        updating the status bar) still counts: a stall only shows up at the
        next tick, so the phase stays open a few ticks longer.
        """
        token = object()
        self._ending[phase] = token

        def close() -> None:
            if self._ending.get(phase) is token:
                del self._ending[phase]
                self._active.discard(phase)
                if not self._active:
                    self._timer.stop()

        QTimer.singleShot(linger_ms, self, close)

    def reset(self, phase: str) -> None:
        """Forget what was measured for ``phase`` (a benchmark measures each reply on its own)."""
        self.worst_ms.pop(phase, None)
        self.ticks.pop(phase, None)
        if phase in self._active:
            self.worst_ms[phase], self.ticks[phase] = 0.0, 0

    def worst(self) -> float:
        return max(self.worst_ms.values(), default=0.0)

    def _tick(self) -> None:
        now = time.perf_counter()
        late = max(0.0, (now - self._last) * 1e3 - INTERVAL_MS)
        self._last = now
        for phase in self._active:
            self.ticks[phase] += 1
            if late > self.worst_ms[phase]:
                self.worst_ms[phase] = late
