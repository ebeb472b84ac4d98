"""Full-text search over message contents (SQLite FTS5). Qt-free.

``messages_fts`` is an external-content index over ``messages.content`` and
``messages.reasoning``, kept in step by triggers (store_schema.py); a search
looks in the answers only unless asked to look in the reasoning too. What the
user types is never passed to FTS5 as query syntax: each word becomes a quoted phrase (the last one also
matches as a prefix, so results come while typing), and all must appear.
Hits are marked with HIT_START / HIT_END control characters, which no reply
text can fake into markup: the window escapes the snippet and only then
turns the markers into highlighting.
"""
from __future__ import annotations

import html
import sqlite3
from dataclasses import dataclass

HIT_START, HIT_END = "\x02", "\x03"
SNIPPET_TOKENS = 12
LIMIT = 50


@dataclass(slots=True, frozen=True)
class SearchHit:
    conversation_id: int
    title: str
    message_id: int
    role: str
    snippet: str  # message text around the hit, hits between HIT_START and HIT_END
    in_reasoning: bool = False  # the snippet is from the reply's reasoning, not its answer


def fts_query(text: str) -> str | None:
    """An FTS5 query that matches every word of ``text`` literally (None: nothing to search)."""
    words = [w for w in text.split() if w.strip(HIT_START + HIT_END)]
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " AND ".join(quoted)


def search(c: sqlite3.Connection, text: str, limit: int = LIMIT, *, reasoning: bool = False) -> list[SearchHit]:
    """Live messages whose text (with ``reasoning``: or reasoning) matches ``text``, best first."""
    query = fts_query(text)
    if query is None:
        return []
    if not reasoning:  # every word in the answer itself
        query = f"content : ({query})"
    rows = c.execute(
        "SELECT m.conversation_id, cv.title, m.id, m.role, "
        "snippet(messages_fts, 0, ?, ?, '…', ?), snippet(messages_fts, 1, ?, ?, '…', ?) "
        "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        "JOIN conversations cv ON cv.id = m.conversation_id "
        "WHERE messages_fts MATCH ? AND m.deleted = 0 AND cv.deleted = 0 "
        "ORDER BY rank, m.id DESC LIMIT ?",
        (HIT_START, HIT_END, SNIPPET_TOKENS, HIT_START, HIT_END, SNIPPET_TOKENS, query, limit))
    hits = []
    for r in rows:
        # The answer's snippet unless only the reasoning holds a hit.
        in_reasoning = reasoning and HIT_START not in r[4] and HIT_START in (r[5] or "")
        hits.append(SearchHit(r[0], r[1], r[2], r[3], r[5] if in_reasoning else r[4], in_reasoning))
    return hits


def snippet_html(snippet: str) -> str:
    """The snippet as inert HTML: the text escaped, the hits in bold."""
    flat = " ".join(snippet.split())
    return (html.escape(flat).replace(HIT_START, "<b><u>").replace(HIT_END, "</u></b>"))
