"""Full-text search over message contents (SQLite FTS5), in the store and in the window."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.chat_search import HIT_END, HIT_START, fts_query, snippet_html
from app.core.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    yield s
    s.close()


def test_fts_query_takes_the_users_words_literally():
    assert fts_query("  ") is None
    assert fts_query('sour "dough') == '"sour" AND """dough"*'
    assert fts_query("NEAR(a b) OR c") == '"NEAR(a" AND "b)" AND "OR" AND "c"*'


def test_search_finds_words_in_messages_and_follows_edits_and_deletes(store):
    a = store.create_conversation()
    b = store.create_conversation()
    store.add_message(a.id, "user", "How do I bake sourdough bread?")
    mid = store.begin_reply(a.id)
    store.update_reply(mid, "Feed the starter")
    store.finish_reply(mid, "Feed the starter, then knead the dough for ten minutes.",
                       complete=True, finish_reason="eos")
    store.add_message(b.id, "user", "Knead? I meant python decorators")
    hits = store.search_messages("knead")
    assert {h.message_id for h in hits} == {mid, store.messages(b.id)[0].id}
    hit = next(h for h in hits if h.message_id == mid)
    assert (hit.conversation_id, hit.role, hit.title) == (a.id, "assistant", "How do I bake sourdough bread?")
    assert f"{HIT_START}knead{HIT_END}" in hit.snippet
    assert store.search_messages("starter knea")[0].message_id == mid  # every word, the last as a prefix
    assert store.search_messages("starter decorators") == []
    assert store.search_messages('"); DROP TABLE messages; --') == []  # no query syntax gets through
    store.update_reply(mid, "Rest it overnight.")  # the index follows updates
    assert [h.message_id for h in store.search_messages("knead")] == [store.messages(b.id)[0].id]
    store.delete_conversation(b.id)
    assert store.search_messages("knead") == []
    store.restore_conversation(b.id)
    store.delete_conversation(b.id)
    store.purge_deleted()
    assert store.search_messages("decorators") == []


def test_the_index_survives_a_restart(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    c = s.create_conversation()
    mid = s.add_message(c.id, "user", "rye sourdough levain")
    s.close()
    again = Store(tmp_path / "h.sqlite3")
    assert [h.message_id for h in again.search_messages("levain")] == [mid]
    again.close()


def test_snippets_are_inert_html():
    html = snippet_html(f"<a href='x'>{HIT_START}bread{HIT_END}</a>\n& more")
    assert html == "&lt;a href=&#x27;x&#x27;&gt;<b><u>bread</u></b>&lt;/a&gt; &amp; more"


# -- in the window ------------------------------------------------------------------

@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    from app.window.main_window import MainWindow

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    w = MainWindow()
    w.show()
    yield w
    w.close()


def test_the_search_box_lists_message_hits_highlighted_and_opens_them_on_their_branch(qtbot, window):
    w = window
    s = w.store
    bread = w.current
    u1, a1 = s.start_turn(bread, "How long should dough rise?")
    s.finish_reply(a1, "About two hours, until <b>doubled</b>.", complete=True, finish_reason="eos")
    _, a2 = s.start_turn(bread, None, replace_from=a1)  # the hit is on the branch not on screen
    s.finish_reply(a2, "Overnight in the fridge.", complete=True, finish_reason="eos")
    w.new_conversation()
    other = w.current
    for i in range(60):  # a long chat: the hit is far above what is built at first
        s.add_message(other, "user" if i % 2 == 0 else "assistant", "doubled check" if i == 1 else f"line {i}")
    w.conversations.search.setText("doubled")
    labels = w.conversations.hit_widgets()
    assert len(labels) == 2 and w.conversations.hits.isVisibleTo(w)
    texts = [lb.text() for lb in labels]
    assert any("<b><u>doubled</u></b>" in t and "&lt;b&gt;" in t for t in texts)  # highlighted, HTML inert
    items = {int(w.conversations.hits.item(i).data(Qt.ItemDataRole.UserRole + 1)): w.conversations.hits.item(i)
             for i in range(w.conversations.hits.count())}
    w.conversations.hits.itemClicked.emit(items[a1])
    assert w.current == bread
    assert [m.id for m in s.messages(bread)] == [u1, a1]  # switched to the hit's branch
    assert w.chat.widget(a1).flashed and w.chat.widget(a1).branch_label.text() == "1/2"

    deep = s.messages(other)[1].id
    w.conversations.hits.itemClicked.emit(
        next(w.conversations.hits.item(i) for i in range(w.conversations.hits.count())
             if int(w.conversations.hits.item(i).data(Qt.ItemDataRole.UserRole + 1)) == deep))
    assert w.current == other and w.chat.widget(deep) is not None and w.chat.widget(deep).flashed
    shown, view = w.chat.widget(deep), w.chat.scroll.viewport()
    qtbot.waitUntil(lambda: 0 <= shown.mapTo(view, shown.rect().topLeft()).y() < view.height())  # scrolled to it
    w.conversations.search.setText("nothing like it")
    assert not w.conversations.hits.isVisibleTo(w) and "(none)" in w.conversations.hits_label.text()
    w.conversations.search.clear()
    assert not w.conversations.hits_label.isVisibleTo(w)
