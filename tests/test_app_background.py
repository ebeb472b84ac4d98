"""app/bridge/background.py: answers come back on the GUI thread, out-of-date and orphaned ones are
dropped, errors and progress arrive. Workers are held on events, never timed."""
from __future__ import annotations

import threading

import pytest
import shiboken6
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from engine import HearthError

from app.bridge.background import Background, error_text

WAIT = 10_000  # ms; an upper bound for waitUntil, never a timing assertion


def test_the_result_arrives_on_the_gui_thread(qtbot):
    owner = QObject()
    bg = Background(owner)
    got = []
    bg.run(threading.get_ident, on_done=lambda worker: got.append((worker, threading.get_ident())),
           on_failed=pytest.fail)
    assert bg.running() == 1  # queued: never answered inside run()
    qtbot.waitUntil(lambda: bool(got), timeout=WAIT)
    (worker, delivered), = got
    assert delivered == threading.main_thread().ident != worker
    assert bg.running() == 0


def test_a_newer_call_of_the_same_kind_drops_the_older_answer_and_cancels_it(qtbot):
    owner = QObject()
    bg = Background(owner)
    release, cancel = threading.Event(), threading.Event()
    got = []

    def old():
        release.wait(WAIT / 1000)
        return "old"

    bg.run(old, on_done=got.append, on_failed=pytest.fail, kind="scan", cancel=cancel)
    other = bg.run(lambda: "other kind", on_done=got.append, on_failed=pytest.fail, kind="fit")
    bg.run(lambda: "new", on_done=got.append, on_failed=pytest.fail, kind="scan")
    assert cancel.is_set() and not other.stale
    assert bg.running("scan") == 2  # the old thread still runs until it answers
    qtbot.waitUntil(lambda: len(got) == 2, timeout=WAIT)
    release.set()
    qtbot.waitUntil(lambda: bg.running() == 0, timeout=WAIT)  # the old answer came back...
    assert sorted(got) == ["new", "other kind"]               # ...and was dropped


def test_drop_makes_pending_answers_of_a_kind_out_of_date(qtbot):
    owner = QObject()
    bg = Background(owner)
    release = threading.Event()
    got = []
    bg.run(lambda: release.wait(WAIT / 1000), on_done=got.append, on_failed=pytest.fail, kind="scan")
    bg.drop("scan")
    release.set()
    qtbot.waitUntil(lambda: bg.running() == 0, timeout=WAIT)
    assert got == []


@pytest.mark.parametrize("error, message", [(HearthError("the file is gone"), "the file is gone"),
                                            (ValueError("bad header"), "ValueError: bad header")])
def test_an_error_reaches_the_caller_on_the_gui_thread(qtbot, error, message):
    owner = QObject()  # held here: a Background keeps only a weak reference to its owner
    bg = Background(owner)
    failed = []

    def boom():
        raise error

    bg.run(boom, on_done=pytest.fail, on_failed=lambda e: failed.append((e, threading.get_ident())))
    qtbot.waitUntil(lambda: bool(failed), timeout=WAIT)
    (e, where), = failed
    assert e is error and where == threading.main_thread().ident and error_text(e) == message


def test_progress_arrives_on_the_gui_thread_in_order_before_the_result(qtbot):
    owner = QObject()
    bg = Background(owner)
    seen = []

    def work(report):
        for i in range(3):
            report(i, 3)
        return "done"

    bg.run(work, on_done=lambda v: seen.append(v),
           on_failed=pytest.fail,
           on_progress=lambda done, total: seen.append((done, total, threading.get_ident())))
    qtbot.waitUntil(lambda: "done" in seen, timeout=WAIT)
    main = threading.main_thread().ident
    assert seen == [(0, 3, main), (1, 3, main), (2, 3, main), "done"]


@pytest.mark.parametrize("make", [QObject, QWidget])
def test_an_answer_for_a_destroyed_owner_is_dropped(qtbot, make):
    owner = make()
    bg = Background(owner)
    started, release = threading.Event(), threading.Event()
    got, wanted = [], []

    def work(report):
        wanted.append(report("early"))
        started.set()
        release.wait(WAIT / 1000)
        wanted.append(report("late"))  # says the answer is no longer wanted: a long loop stops here
        return "late"

    bg.run(work, on_done=got.append, on_failed=got.append, on_progress=got.append)
    assert started.wait(WAIT / 1000)
    shiboken6.delete(owner)  # the widget goes while its answer is on its way
    assert not shiboken6.isValid(owner)
    release.set()
    qtbot.waitUntil(lambda: bg.running() == 0, timeout=WAIT)
    assert wanted == [True, False]
    assert got == []  # "early" was still on its way when the owner went: dropped too


def test_calls_start_on_the_gui_thread_only(qtbot):
    owner = QObject()
    bg = Background(owner)
    raised = []

    def elsewhere():
        try:
            bg.run(lambda: None, on_done=print, on_failed=print)
        except RuntimeError as e:
            raised.append(str(e))

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert raised == ["start background calls on the GUI thread"]
