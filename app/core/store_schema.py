"""The conversation database's schema, as numbered migrations. Qt-free.

Index i holds the SQL that takes a database from version i to i + 1. Never
edit a released step: append a new one. A step may hold triggers, whose bodies
contain semicolons, so steps are cut into statements by ``statements``.
"""
from __future__ import annotations

import sqlite3
from typing import Callable, Iterator, Union

Migration = Union[str, Callable[[sqlite3.Connection], None]]

MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE conversations (
        id            INTEGER PRIMARY KEY,
        title         TEXT    NOT NULL,
        auto_title    INTEGER NOT NULL DEFAULT 1,   -- 0 once the user renamed it
        system_prompt TEXT    NOT NULL DEFAULT '',
        draft         TEXT    NOT NULL DEFAULT '',  -- unsent text in the input box
        created       REAL    NOT NULL,
        updated       REAL    NOT NULL,
        deleted       INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE messages (
        id              INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role            TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content         TEXT    NOT NULL,
        complete        INTEGER NOT NULL DEFAULT 1, -- 0 while streaming and for cut-short replies
        finish_reason   TEXT,                       -- NULL + complete=0 means the app died mid-reply
        error           TEXT,
        metrics         TEXT,                       -- GenerationStats.as_dict() as JSON
        created         REAL    NOT NULL,
        deleted         INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    # Branches, pins and full-text search.
    # A message's parent is the message it answers or follows (NULL: the first of a
    # conversation); siblings are the alternatives a regenerate or an edit made.
    # leaf_id is the last message of the branch on screen, so the choice persists.
    # Rows hidden before branches existed keep parent NULL and stay hidden.
    """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER;
    ALTER TABLE conversations ADD COLUMN leaf_id INTEGER;
    ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
    UPDATE messages SET parent_id = (
        SELECT MAX(p.id) FROM messages p
        WHERE p.conversation_id = messages.conversation_id AND p.deleted = 0 AND p.id < messages.id)
    WHERE deleted = 0;
    UPDATE conversations SET leaf_id = (
        SELECT MAX(m.id) FROM messages m WHERE m.conversation_id = conversations.id AND m.deleted = 0);
    CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id);
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
    """,
    # Messages as the engine's message model (engine/messages.py): reasoning, tool calls and
    # non-text parts. See _v3 below; a Python step, because old replies are split.
    lambda conn: _v3(conn),
    # A chat's own settings over its model's (engine/library/model_settings.py CHAT_KEYS), as JSON; NULL: none.
    "ALTER TABLE conversations ADD COLUMN settings TEXT;",
    # A conversation that outgrew the context (engine/prompt/view.py): pinned messages (never left out or
    # summarized), the summaries compaction wrote (each stands for the messages up to ``upto_id`` on its
    # branch; the user may edit it, ``written`` keeps the model's words), and the chat's own policy.
    """
    ALTER TABLE messages ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN context_policy TEXT;
    CREATE TABLE summaries (
        id              INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        upto_id         INTEGER NOT NULL,
        covers          INTEGER NOT NULL,
        text            TEXT    NOT NULL,
        written         TEXT    NOT NULL,
        metrics         TEXT,
        created         REAL    NOT NULL,
        deleted         INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX summaries_by_conversation ON summaries(conversation_id, upto_id);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

# The role CHECK cannot be altered in place, so v3 rebuilds ``messages`` (ids, parent ids and
# every column kept) and its full-text index, which now covers the reasoning too.
# message_parts holds a message's parts in order, but only for a message with a part that is
# not text (an image, a document); ``messages.content`` is always its text parts joined, so a
# text-only message has no rows and search and old code read content as before. Attachments
# are files named by their SHA-256 in the data folder; message_parts_by_hash finds their users.
# A later rebuild of ``messages`` must keep message_parts' rows: with foreign keys on, DROP
# TABLE messages would delete them (ON DELETE CASCADE).
_V3_TABLES = """
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
CREATE TABLE messages_v3 (
    id                INTEGER PRIMARY KEY,
    conversation_id   INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role              TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content           TEXT    NOT NULL,           -- the answer's text (text parts joined)
    complete          INTEGER NOT NULL DEFAULT 1,
    finish_reason     TEXT,
    error             TEXT,
    metrics           TEXT,
    created           REAL    NOT NULL,
    deleted           INTEGER NOT NULL DEFAULT 0,
    parent_id         INTEGER,
    reasoning         TEXT,                       -- what the model thought first, NULL: nothing
    reasoning_open    INTEGER NOT NULL DEFAULT 0, -- 1: the reply stopped inside its reasoning
    reasoning_tokens  INTEGER,
    tool_calls        TEXT,                       -- JSON [{"id", "name", "arguments"}], NULL: none
    tool_call_id      TEXT                        -- role 'tool': the call this answers
);
INSERT INTO messages_v3 (id, conversation_id, role, content, complete, finish_reason, error, metrics,
                         created, deleted, parent_id)
    SELECT id, conversation_id, role, content, complete, finish_reason, error, metrics,
           created, deleted, parent_id FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v3 RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id);
CREATE TABLE message_parts (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    idx        INTEGER NOT NULL,                  -- place among the message's parts
    kind       TEXT    NOT NULL CHECK (kind IN ('text', 'image', 'document')),
    text       TEXT,                              -- kind 'text'
    sha256     TEXT,                              -- image, document: the attachment's hash
    mime       TEXT,
    name       TEXT,                              -- a document's file name
    meta       TEXT,                              -- JSON: what else the kind needs (a document's pages)
    PRIMARY KEY (message_id, idx)
);
CREATE INDEX message_parts_by_hash ON message_parts(sha256);
ALTER TABLE conversations ADD COLUMN think TEXT;  -- the Think control's choice as JSON, NULL: the model's default
"""

_V3_SEARCH = """
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, reasoning, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
        VALUES ('delete', old.id, old.content, old.reasoning);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, reasoning ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
        VALUES ('delete', old.id, old.content, old.reasoning);
    INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
"""

THINK_TAGS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"))
"""Reasoning blocks written as text by known families (Qwen3, DeepSeek-R1, GLM...; Seed-OSS)."""


def split_think(text: str) -> tuple[str, str] | None:
    """(reasoning, answer) for a reply that opens with a complete reasoning block, else None.

    Only a block at the very start (after white space) that is closed counts: a reply that
    merely mentions a tag, or whose block never closed, is left as it is. The white space
    around the block is dropped, as the families' templates drop it when they re-render.
    """
    s = text.lstrip()
    for open_tag, close_tag in THINK_TAGS:
        if s.startswith(open_tag):
            end = s.find(close_tag, len(open_tag))
            if end >= 0:
                return s[len(open_tag):end].strip(), s[end + len(close_tag):].lstrip()
    return None


def _v3(conn: sqlite3.Connection) -> None:
    for stmt in statements(_V3_TABLES):
        conn.execute(stmt)
    rows = conn.execute("SELECT id, content FROM messages WHERE role = 'assistant' AND "
                        "(content LIKE '%</think>%' OR content LIKE '%</seed:think>%')").fetchall()
    for mid, content in rows:
        split = split_think(content)
        if split is not None:
            conn.execute("UPDATE messages SET reasoning = ?, content = ? WHERE id = ?", (*split, mid))
    for stmt in statements(_V3_SEARCH):  # indexed after the split, so it sees the final text
        conn.execute(stmt)


def run_step(conn: sqlite3.Connection, step: int) -> None:
    """Take the database from version ``step`` to ``step + 1`` (inside the caller's transaction)."""
    migration = MIGRATIONS[step]
    if callable(migration):
        migration(conn)
        return
    for stmt in statements(migration):
        conn.execute(stmt)


def statements(script: str) -> Iterator[str]:
    """The complete SQL statements of one migration step, in order (a trigger is one)."""
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n\t;"):
                yield buf
            buf = ""
    if buf.strip(" \n\t;"):
        raise ValueError(f"incomplete SQL statement in a migration: {buf.strip()[:60]}")
