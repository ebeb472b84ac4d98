"""The conversation database's schema, as numbered migrations. Qt-free.

Index i holds the SQL that takes a database from version i to i + 1. Never
edit a released step: append a new one. A step may hold triggers, whose bodies
contain semicolons, so steps are cut into statements by ``statements``.
"""
from __future__ import annotations

import sqlite3
from typing import Iterator

MIGRATIONS: list[str] = [
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
]
SCHEMA_VERSION = len(MIGRATIONS)


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
