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


def test_reset_forgets_a_phase_so_the_next_reply_is_measured_alone(qtbot):
    m = LoopMonitor()
    m.begin("streaming")
    qtbot.wait(30)
    time.sleep(0.15)
    qtbot.wait(30)
    m.end("streaming", linger_ms=0)
    qtbot.wait(20)
    assert m.worst_ms["streaming"] > 120
    m.reset("streaming")
    assert "streaming" not in m.worst_ms and "streaming" not in m.ticks
    m.begin("streaming")  # a new reply starts from nothing, not from the last one's stall
    assert m.worst_ms["streaming"] == 0.0 and m.ticks["streaming"] == 0
    qtbot.wait(40)
    assert m.ticks["streaming"] > 0
    m.end("streaming", linger_ms=0)
    m.begin("loading")
    qtbot.wait(30)
    m.reset("loading")  # while the phase runs: it goes on, counted from zero
    assert m.worst_ms["loading"] == 0.0 and m.ticks["loading"] == 0
    qtbot.wait(40)
    assert m.ticks["loading"] > 0
    m.end("loading", linger_ms=0)
