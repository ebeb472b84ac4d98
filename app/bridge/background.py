"""One way to run a call off the GUI thread and have its answer back on it (after Anki's QueryOp).

    self._bg = Background(self)                      # self: the widget the answers are for
    self._bg.run(lambda: library.scan(), on_done=self._show, on_failed=self._say, kind="scan")

``fn`` runs on a daemon thread. Its result (or its exception) comes back on the
GUI thread through a queued signal, to ``on_done`` (or ``on_failed``). Progress
works the same way: with ``on_progress`` given, ``fn`` is called with a
``report(*values)`` it may call from the worker, and each report reaches
``on_progress(*values)`` on the GUI thread, always before the result. ``report``
returns whether the answer is still wanted, so a long loop can stop early once
it is not.

An answer is dropped, never delivered, when
- a newer call of the same ``kind`` was started on the same Background (or
  ``drop(kind)`` was called): the older call is out of date;
- the owner was destroyed before the answer arrived: nobody is left to show it.

Why the worker only ever sees a call number and one relay object that lives as
long as the application: everything the answer is delivered to (the owner, the
callbacks, the bookkeeping) is created, read and released on the GUI thread
alone, so no widget is touched, nor its last reference dropped, on a worker.
``fn`` itself runs on the worker: it must not touch or hold widgets.

Cancellation is the caller's own threading.Event, passed as ``cancel``: a
superseded call has it set, and ``Call.cancel()`` sets it; the call still
answers (often with the error its work raises on cancel), so the caller sees
how it ended.
"""
from __future__ import annotations

import itertools
import sys
import threading
import traceback
import weakref
from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal
from shiboken6 import isValid

from engine import HearthError


def error_text(e: BaseException) -> str:
    """The one-line message for a failed call: a HearthError says what happened in its own words;
    anything else is a bug or a native failure, named by its type so a report can find it."""
    return str(e) if isinstance(e, HearthError) else f"{type(e).__name__}: {e}"


class Call:
    """One background call as its caller sees it; use it on the GUI thread only."""

    __slots__ = ("background", "kind", "on_done", "on_failed", "on_progress", "cancel_event", "dropped")

    def __init__(self, background: Background, kind: str | None, on_done: Callable[[Any], None],
                 on_failed: Callable[[BaseException], None], on_progress: Callable[..., None] | None,
                 cancel_event: threading.Event | None) -> None:
        self.background, self.kind = background, kind
        self.on_done, self.on_failed, self.on_progress = on_done, on_failed, on_progress
        self.cancel_event = cancel_event
        self.dropped = threading.Event()  # superseded or dropped: its answer is not delivered (workers read it)

    def cancel(self) -> None:
        """Ask the work to stop (sets the ``cancel`` event it was given); it still answers."""
        if self.cancel_event is not None:
            self.cancel_event.set()

    @property
    def stale(self) -> bool:
        """Superseded by a newer call of its kind, or dropped: its answer will not be delivered."""
        return self.dropped.is_set()

    def _supersede(self) -> None:
        self.dropped.set()
        self.cancel()


class _Relay(QObject):
    """The one object the workers emit on. It belongs to the application, so it outlives every
    worker, and its slots run on the GUI thread (the connections are queued)."""

    done = Signal(int, object)
    failed = Signal(int, object)
    progress = Signal(int, object)

    def __init__(self, app: QCoreApplication) -> None:
        super().__init__(app)
        self.calls: dict[int, Call] = {}
        queued = Qt.ConnectionType.QueuedConnection  # even a fast answer arrives after run() returns
        self.done.connect(self._done, queued)
        self.failed.connect(self._failed, queued)
        self.progress.connect(self._progress, queued)

    def _finish(self, cid: int) -> Call | None:
        call = self.calls.pop(cid, None)
        if call is None:
            return None
        call.background._pending.discard(call)
        return call if call.background.live(call) else None

    def _done(self, cid: int, value: object) -> None:
        call = self._finish(cid)
        if call is not None:
            call.on_done(value)

    def _failed(self, cid: int, error: BaseException) -> None:
        call = self._finish(cid)
        if call is not None:
            call.on_failed(error)

    def _progress(self, cid: int, values: tuple) -> None:
        call = self.calls.get(cid)
        if call is not None and call.on_progress is not None and call.background.live(call):
            call.on_progress(*values)


_relay: _Relay | None = None
_ids = itertools.count(1)


def _the_relay() -> _Relay:
    global _relay
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("a background call needs the Qt application to deliver its answer")
    if QThread.currentThread() is not app.thread():
        raise RuntimeError("start background calls on the GUI thread")
    if _relay is None or not isValid(_relay):
        _relay = _Relay(app)
    return _relay


def _emit(signal, *args) -> None:
    try:
        signal.emit(*args)
    except RuntimeError:  # the application is gone: nobody to tell
        pass


def _work(relay: _Relay, cid: int, fn: Callable[..., Any], report: Callable[..., None] | None) -> None:
    try:
        value = fn(report) if report is not None else fn()
    except Exception as e:
        if not isinstance(e, (HearthError, OSError)):  # a bug: its traceback goes where bug reports look
            traceback.print_exc(file=sys.stderr)
        _emit(relay.failed, cid, e)
    else:
        _emit(relay.done, cid, value)


class Background:
    """Background calls on behalf of one owner QObject (usually the widget that shows the answers).

    Keep one per owner, on the owner; the kinds of call are its own (a newer "scan" of this
    Background supersedes its older one, never another widget's)."""

    def __init__(self, owner: QObject) -> None:
        self._owner = weakref.ref(owner)
        self._pending: set[Call] = set()
        gone = self._gone = threading.Event()  # what a worker may read of its owner: whether it is gone
        owner.destroyed.connect(lambda *_: gone.set())

    def live(self, call: Call) -> bool:
        """Whether ``call``'s answer is still wanted: not superseded, and its owner still exists."""
        owner = self._owner()
        return not call.stale and not self._gone.is_set() and owner is not None and isValid(owner)

    def run(self, fn: Callable[..., Any], *, on_done: Callable[[Any], None],
            on_failed: Callable[[BaseException], None], on_progress: Callable[..., None] | None = None,
            kind: str | None = None, cancel: threading.Event | None = None,
            name: str = "hearth-background") -> Call:
        """Start ``fn()`` (``fn(report)`` with ``on_progress``) on a thread; call on the GUI thread.

        ``on_failed`` is required: every failure reaches the caller, which says what went wrong.
        A ``kind`` makes this call supersede the pending calls of that kind (their ``cancel``
        events are set and their answers dropped)."""
        relay = _the_relay()
        if kind is not None:
            self.drop(kind)
        call = Call(self, kind, on_done, on_failed, on_progress, cancel)
        cid = next(_ids)
        relay.calls[cid] = call
        self._pending.add(call)
        report = None
        if on_progress is not None:
            dropped, gone = call.dropped, self._gone  # the worker sees these events, never the call itself

            def report(*values: Any) -> bool:
                _emit(relay.progress, cid, values)
                return not (dropped.is_set() or gone.is_set())
        threading.Thread(target=_work, args=(relay, cid, fn, report), name=name, daemon=True).start()
        return call

    def drop(self, kind: str) -> None:
        """Drop the answers of the pending calls of ``kind`` (they are out of date) and cancel them."""
        for call in self._pending:
            if call.kind == kind:
                call._supersede()

    def running(self, kind: str | None = None) -> int:
        """Calls started and not yet answered (superseded ones included: their threads still run),
        of ``kind`` or of every kind."""
        return sum(1 for c in self._pending if kind is None or c.kind == kind)
