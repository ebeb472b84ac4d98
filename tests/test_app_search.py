"""Full-text search over message contents (SQLite FTS5), in the store and in the window."""
from __future__ import annotations

import pytest

from app.chat_search import HIT_END, HIT_START, fts_query, snippet_html
from app.store import Store


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


def test_snippets_are_inert_html():
    html = snippet_html(f"<a href='x'>{HIT_START}bread{HIT_END}</a>\n& more")
    assert html == "&lt;a href=&#x27;x&#x27;&gt;<b><u>bread</u></b>&lt;/a&gt; &amp; more"
