"""The event-loop monitor sees a stall, attributes it to the phase, and lingers past its end."""
from __future__ import annotations

import time

from app.ui.loop_monitor import LoopMonitor


def test_a_stall_is_measured_in_its_phase(qtbot):
    m = LoopMonitor()
    m.begin("streaming")
    qtbot.wait(50)
    time.sleep(0.15)  # the GUI thread is blocked: the next tick is ~150 ms late
    qtbot.wait(30)
    m.end("streaming")
    assert 120 < m.worst_ms["streaming"] < 2000  # upper bound: only that it is this stall, not noise-sized
    assert m.ticks["streaming"] > 2


def test_work_right_at_the_end_of_a_phase_still_counts(qtbot):
    m = LoopMonitor()
    m.begin("loading")
    qtbot.wait(30)
    m.end("loading")
    time.sleep(0.12)  # e.g. rendering the finished reply
    qtbot.wait(100)
    assert m.worst_ms["loading"] > 90
    assert not m._timer.isActive()  # and then it stops ticking


def test_beginning_again_cancels_a_pending_end(qtbot):
    m = LoopMonitor()
    m.begin("streaming")
    m.end("streaming")
    m.begin("streaming")
    qtbot.wait(100)
    assert m._timer.isActive()
    m.end("streaming", linger_ms=0)
    qtbot.wait(20)
    assert not m._timer.isActive()
