"""A killed app loses nothing it had committed: the real window, SIGKILLed mid-reply."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.core.store import Store

ROOT = Path(__file__).resolve().parent.parent

# Runs in a child process: the real window, the real model, a long greedy reply.
CHILD = textwrap.dedent("""
    import sys
    from PySide6.QtWidgets import QApplication
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from app.window.selftest import write_settings, _start_window, wait_until
    app = QApplication([])
    write_settings(max_tokens=2000)
    win, *_ = _start_window()
    win.chat.input.setPlainText("Write a very long story about a dragon who learns to bake bread.")
    QTest.keyClick(win.chat.input, Qt.Key.Key_Return)
    print("sent", flush=True)
    wait_until(lambda: False, 600)
""")


def _assistant_text(db: Path) -> str:
    # A separate read-only look while the child writes (WAL lets readers in).
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
            row = c.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchone()
            return row[0] if row else ""
    except sqlite3.OperationalError:
        return ""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_stream_keeps_committed_text(tmp_path):
    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = tmp_path / "hearth.sqlite3"
    seen = ""
    try:
        deadline = time.monotonic() + 90
        # Wait until at least two partial commits have landed, so the kill is truly mid-stream.
        while time.monotonic() < deadline and len(seen) < 120 and child.poll() is None:
            seen = _assistant_text(db)
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert len(seen) >= 120, f"the child never streamed enough text; stderr:\n{err[-2000:]}"

    s = Store(db)  # reopening must not treat the killed app's database as damaged
    try:
        assert s.notice is None
        (conv,) = s.list_conversations()
        user, reply = s.messages(conv.id)
        assert user.content.startswith("Write a very long story")
        assert reply.content.startswith(seen), "text committed before the kill was lost"
        assert reply.interrupted and not reply.complete
    finally:
        s.close()
