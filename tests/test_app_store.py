"""app/core/store.py: conversations, messages, partial replies, soft deletes, damaged files."""
from __future__ import annotations

import sqlite3

import pytest

from app.core.store import DEFAULT_TITLE, SCHEMA_VERSION, Store, StoreError, title_from


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    yield s
    s.close()


def test_new_database_is_wal_with_schema_version(store):
    assert store.journal_mode().lower() == "wal"
    assert store.schema_version() == SCHEMA_VERSION
    assert store.notice is None


def test_conversation_crud_search_and_soft_delete(store):
    a = store.create_conversation(system_prompt="be brief")
    b = store.create_conversation()
    store.rename_conversation(b.id, "  Bread   recipes ")
    assert store.conversation(b.id).title == "Bread recipes"
    assert store.conversation(a.id).system_prompt == "be brief"
    assert [c.title for c in store.list_conversations("bread")] == ["Bread recipes"]
    assert store.list_conversations("100%_") == []  # LIKE wildcards are taken literally
    with pytest.raises(ValueError):
        store.rename_conversation(a.id, "   ")
    store.delete_conversation(b.id)
    assert [c.id for c in store.list_conversations()] == [a.id]
    store.restore_conversation(b.id)
    assert {c.id for c in store.list_conversations()} == {a.id, b.id}
    store.delete_conversation(b.id)
    assert store.purge_deleted() == 1
    with pytest.raises(KeyError):
        store.conversation(b.id)


def test_first_user_message_names_the_conversation_unless_renamed(store):
    c = store.create_conversation()
    assert c.title == DEFAULT_TITLE
    store.add_message(c.id, "user", "\n  How do I bake bread?\nmore")
    assert store.conversation(c.id).title == "How do I bake bread?"
    d = store.create_conversation()
    store.rename_conversation(d.id, "Mine")
    store.add_message(d.id, "user", "hello")
    assert store.conversation(d.id).title == "Mine"
    assert len(title_from("x" * 500)) <= 60


def test_partial_reply_then_finish_keeps_metrics(store):
    c = store.create_conversation()
    store.add_message(c.id, "user", "hi")
    mid = store.begin_reply(c.id)
    m = store.message(mid)
    assert (m.content, m.complete, m.interrupted) == ("", False, True)
    store.update_reply(mid, "Hel")
    assert store.message(mid).content == "Hel"
    store.finish_reply(mid, "Hello", complete=True, finish_reason="eos", metrics={"ttft_ms": 12.5})
    m = store.message(mid)
    assert (m.content, m.complete, m.finish_reason, m.metrics) == ("Hello", True, "eos", {"ttft_ms": 12.5})
    assert not m.interrupted


def test_hide_from_keeps_rows_but_hides_them(store):
    c = store.create_conversation()
    ids = [store.add_message(c.id, r, t) for r, t in (("user", "a"), ("assistant", "b"), ("user", "c"))]
    store.hide_from(c.id, ids[1])
    assert [m.content for m in store.messages(c.id)] == ["a"]
    assert store.message(ids[2]).content == "c"  # still there, only hidden


def test_draft_is_saved(store):
    c = store.create_conversation()
    store.set_draft(c.id, "half a thought")
    assert store.conversation(c.id).draft == "half a thought"


def test_corrupt_database_is_moved_aside_with_a_notice(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not a database, it is a shopping list" * 100)
    s = Store(path)
    try:
        assert s.notice and "damaged" in s.notice
        moved = [p for p in tmp_path.iterdir() if p.name.startswith("h.sqlite3.corrupt-")]
        assert len(moved) == 1
        assert moved[0].read_bytes().startswith(b"this is not a database")  # never overwritten
        assert s.list_conversations() == []
        s.create_conversation()
    finally:
        s.close()


def test_worker_connection_does_not_recover(tmp_path):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError):
        Store(path, recover=False)
    assert path.read_bytes().startswith(b"garbage")


def test_database_from_a_newer_hearth_is_refused_not_replaced(tmp_path):
    path = tmp_path / "h.sqlite3"
    Store(path).close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE schema_version SET version = 999")
    with pytest.raises(StoreError, match="newer Hearth"):
        Store(path)
    assert path.exists()


def test_two_connections_see_each_others_commits(tmp_path):
    a, b = Store(tmp_path / "h.sqlite3"), Store(tmp_path / "h.sqlite3", recover=False)
    try:
        c = a.create_conversation()
        mid = a.begin_reply(c.id)
        b.update_reply(mid, "written by the worker")
        assert a.message(mid).content == "written by the worker"
    finally:
        a.close()
        b.close()


def test_start_turn_saves_a_send_in_one_transaction(store):
    c = store.create_conversation()
    store.set_draft(c.id, "what I typed")
    user_mid, reply_mid = store.start_turn(c.id, "what I typed")
    msgs = store.messages(c.id)
    assert [(m.id, m.role, m.content, m.complete) for m in msgs] == [
        (user_mid, "user", "what I typed", True), (reply_mid, "assistant", "", False)]
    assert store.conversation(c.id).draft == "" and store.conversation(c.id).title == "what I typed"
    # Regenerate: the reply is replaced, the user message stays.
    _, again = store.start_turn(c.id, None, replace_from=reply_mid)
    assert [m.id for m in store.messages(c.id)] == [user_mid, again]
    # Edit-and-resend: the user message and everything after it are replaced.
    new_user, new_reply = store.start_turn(c.id, "edited", replace_from=user_mid)
    assert [m.content for m in store.messages(c.id)] == ["edited", ""]
    assert store.message(user_mid).content == "what I typed"  # hidden, not destroyed


def test_a_failed_commit_rolls_back_and_the_connection_stays_usable(store):
    conv = store.create_conversation()
    with pytest.raises(sqlite3.IntegrityError):
        with store._tx() as c:
            # A deferred foreign-key violation is found by COMMIT itself, which then fails.
            c.execute("PRAGMA defer_foreign_keys = ON")
            c.execute("INSERT INTO messages (conversation_id, role, content, created) "
                      "VALUES (?, 'user', 'lost', 0)", (conv.id + 1000,))
    assert not store._conn.in_transaction
    mid = store.add_message(conv.id, "user", "after")  # the next transaction can begin
    assert [m.id for m in store.messages(conv.id)] == [mid]
    assert store._conn.execute("SELECT COUNT(*) FROM messages WHERE content = 'lost'").fetchone()[0] == 0


def test_pinned_conversations_come_first_and_stay_pinned(tmp_path):
    s = Store(tmp_path / "p.sqlite3")
    old = s.create_conversation("old")
    new = s.create_conversation("new")
    s.add_message(new.id, "user", "hi")
    assert [c.title for c in s.list_conversations()] == ["new", "old"]
    s.set_pinned(old.id, True)
    s.close()
    s = Store(tmp_path / "p.sqlite3")
    assert [(c.title, c.pinned) for c in s.list_conversations()] == [("old", True), ("new", False)]
    s.set_pinned(old.id, False)
    assert [c.title for c in s.list_conversations()] == ["new", "old"]
    s.close()


def test_a_chat_s_own_settings_are_kept_with_it(tmp_path):
    store = Store(tmp_path / "h.sqlite3")
    a, b = store.create_conversation(), store.create_conversation()
    assert store.conversation(a.id).settings == {}
    store.set_settings(a.id, {"max_tokens": 200, "temperature": 0.1})
    store.close()
    again = Store(tmp_path / "h.sqlite3")
    assert again.conversation(a.id).settings == {"max_tokens": 200, "temperature": 0.1}
    assert again.conversation(b.id).settings == {}
    again.set_settings(a.id, {})
    assert again.conversation(a.id).settings == {}
