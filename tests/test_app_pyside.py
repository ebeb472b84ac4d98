"""Guards against a Qt binding that would crash the app during long replies.

PySide6 6.12.0's ``SignalInstance.emit()`` drops one reference to ``True`` on
every call. Python 3.11's bools are ordinary refcounted objects, so after a
few thousand emits (one per streamed token) the interpreter aborts with
"bool_dealloc". pyproject.toml excludes that version; this test fails loudly
if a version with the same bug is ever allowed back in.
"""
from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class _Source(QObject):
    ping = Signal(int, str)


def test_signal_emit_keeps_the_refcount_of_true(qtbot):
    src = _Source()
    got: list[int] = []
    src.ping.connect(lambda i, _s: got.append(i))
    before = sys.getrefcount(True), sys.getrefcount(False)
    for i in range(200):
        src.ping.emit(i, "x")
    after = sys.getrefcount(True), sys.getrefcount(False)
    assert len(got) == 200
    # A few references can come and go elsewhere; 200 lost ones cannot.
    assert abs(after[0] - before[0]) < 50 and abs(after[1] - before[1]) < 50, (before, after)
