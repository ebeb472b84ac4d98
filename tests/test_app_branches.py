"""Regenerations and edits become branches: every version kept, the one on screen persists."""
from __future__ import annotations

import sqlite3

import pytest

from app.core.store import Store
from app.core.store_schema import MIGRATIONS, statements


@pytest.fixture
def path(tmp_path):
    return tmp_path / "h.sqlite3"


def contents(store: Store, cid: int) -> list[str]:
    return [m.content for m in store.messages(cid)]


def reply(store: Store, cid: int, text: str, replace_from: int | None = None, user: str | None = None):
    umid, mid = store.start_turn(cid, user, replace_from=replace_from)
    store.finish_reply(mid, text, complete=True, finish_reason="eos")
    return umid, mid


def test_regenerate_and_edit_add_siblings_and_keep_every_branch(path):
    s = Store(path)
    c = s.create_conversation()
    u1, a1 = reply(s, c.id, "A1", user="Q1")
    _, a2 = reply(s, c.id, "A2", replace_from=a1)         # regenerate
    assert contents(s, c.id) == ["Q1", "A2"]
    assert s.siblings(a2) == [a1, a2]
    assert s.branch_positions(c.id, [u1, a2]) == {a2: (2, 2)}
    u2, b1 = reply(s, c.id, "B1", user="Q2")              # follow-up on the second version
    assert contents(s, c.id) == ["Q1", "A2", "Q2", "B1"]
    e1, _ = reply(s, c.id, "E1", replace_from=u1, user="Q1 edited")  # edit the first message
    assert contents(s, c.id) == ["Q1 edited", "E1"]
    assert s.siblings(e1) == [u1, e1]
    s.show_branch(c.id, u1)  # back to the first version: its newest continuation comes with it
    assert contents(s, c.id) == ["Q1", "A2", "Q2", "B1"]
    s.show_branch(c.id, a1)
    assert contents(s, c.id) == ["Q1", "A1"]
    with pytest.raises(KeyError):
        s.show_branch(c.id + 1, a1)  # a message of another conversation is refused
    s.close()

    again = Store(path)  # the choice survives a restart
    assert contents(again, c.id) == ["Q1", "A1"]
    ids = [m.id for m in again.messages(c.id)]
    assert again.branch_positions(c.id, ids) == {u1: (1, 2), a1: (1, 2)}
    again.close()


def test_a_failed_send_hides_its_branch_and_shows_the_one_beside_it(path):
    s = Store(path)
    c = s.create_conversation()
    u1, a1 = reply(s, c.id, "A1", user="Q1")
    u_new, _ = s.start_turn(c.id, "Q1 edited", replace_from=u1)
    s.hide_from(c.id, u_new)  # what the window does when nothing came back
    assert contents(s, c.id) == ["Q1", "A1"]
    assert s.siblings(u1) == [u1]
    assert s.message(u_new).content == "Q1 edited"  # flagged, not destroyed
    s.close()


def test_the_migration_links_existing_messages_into_one_branch(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    for stmt in statements(MIGRATIONS[0]):
        conn.execute(stmt)
    conn.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'Old', 1, 1)")
    rows = [(1, "user", "bread?", 0), (2, "assistant", "hidden old reply", 1), (3, "assistant", "knead it", 0)]
    for mid, role, text, deleted in rows:
        conn.execute("INSERT INTO messages (id, conversation_id, role, content, created, deleted) "
                     "VALUES (?, 1, ?, ?, 1, ?)", (mid, role, text, deleted))
    conn.close()
    s = Store(path)
    assert contents(s, 1) == ["bread?", "knead it"]
    assert [h.message_id for h in s.search_messages("knead")] == [3]  # existing rows are indexed
    assert s.search_messages("hidden") == []
    _, mid = reply(s, 1, "more", user="and then?")
    assert contents(s, 1) == ["bread?", "knead it", "and then?", "more"]
    s.close()


# -- in the window (real model, real SQLite, reopened from the same data folder) -------------

@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def make_window(qtbot, data_dir):
    from app.window.main_window import MainWindow
    from app.window.selftest import write_settings

    made: list = []

    def make(start: bool = True, write: bool = True):
        if write:
            write_settings(max_tokens=8)
        w = MainWindow()
        made.append(w)
        w.show()
        if start:
            w.start()
            qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=60_000)
            assert w.host.ready, w.info.messages()
        return w

    yield make
    for w in made:
        w.close()


def send(qtbot, w, text: str) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    w.chat.input.setPlainText(text)
    QTest.keyClick(w.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)


def test_branch_navigation_in_the_window_survives_a_restart_and_feeds_the_next_turn(qtbot, make_window):
    w = make_window()
    send(qtbot, w, "Name a colour.")
    first = w.store.messages(w.current)
    w.chat.widget(first[1].id).btn_regen.click()
    qtbot.waitUntil(lambda: w.stream is None, timeout=60_000)
    second = w.store.messages(w.current)[1]
    nav = w.chat.widget(second.id)
    assert nav.branch_label.isVisibleTo(w) and nav.branch_label.text() == "2/2"
    assert nav.btn_prev.isEnabled() and not nav.btn_next.isEnabled()
    assert not w.chat.widget(first[0].id).branch_label.isVisibleTo(w)  # one version of the question
    nav.btn_prev.click()
    back = w.chat.widget(first[1].id)
    assert back is not None and back.branch_label.text() == "1/2"
    assert [x.id for x in w.store.messages(w.current)] == [first[0].id, first[1].id]
    cid = w.current
    w.close()

    w2 = make_window(write=False)  # the same data folder: the chosen version is still on screen
    w2.select_conversation(cid)
    assert [x.mid for x in w2.chat.message_widgets()] == [first[0].id, first[1].id]
    assert w2.chat.widget(first[1].id).branch_label.text() == "1/2"
    send(qtbot, w2, "Another one?")  # the next turn follows the version on screen
    path = w2.store.messages(cid)
    assert [m.id for m in path[:2]] == [first[0].id, first[1].id] and len(path) == 4
    assert path[3].metrics["prompt_tokens"] > first[1].metrics["prompt_tokens"]
    w2.chat.widget(first[1].id).btn_next.click()  # the other version, with nothing after it
    assert [m.id for m in w2.store.messages(cid)] == [first[0].id, second.id]
    assert len(w2.chat.message_widgets()) == 2
