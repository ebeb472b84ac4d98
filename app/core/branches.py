"""The message tree of a conversation: paths, siblings, the branch on screen. Qt-free.

Every message has a parent (NULL for the first ones); a regenerate or an edit
adds a sibling instead of replacing anything, so every branch is kept. The
conversation's ``leaf_id`` is the last message of the branch on screen: the
visible path (and what the next turn sends to the model) is the walk from that
leaf up to the root. These functions run inside the store's connection.
"""
from __future__ import annotations

import sqlite3

_PATH = """
WITH RECURSIVE path(id, parent_id) AS (
    SELECT id, parent_id FROM messages WHERE id = ?
    UNION ALL
    SELECT m.id, m.parent_id FROM messages m JOIN path p ON m.id = p.parent_id
)
SELECT messages.* FROM messages JOIN path USING (id) WHERE messages.deleted = 0 ORDER BY messages.id
"""

_SUBTREE = """
WITH RECURSIVE sub(id) AS (
    SELECT ?
    UNION ALL
    SELECT m.id FROM messages m JOIN sub s ON m.parent_id = s.id
)
SELECT id FROM sub
"""


def leaf(c: sqlite3.Connection, cid: int) -> int | None:
    row = c.execute("SELECT leaf_id FROM conversations WHERE id = ?", (cid,)).fetchone()
    return row[0] if row else None


def path_rows(c: sqlite3.Connection, cid: int) -> list[sqlite3.Row]:
    """The rows of the branch on screen, oldest first (a child's id is always above its parent's)."""
    end = leaf(c, cid)
    return [] if end is None else list(c.execute(_PATH, (end,)))


def parent_of(c: sqlite3.Connection, mid: int) -> int | None:
    row = c.execute("SELECT parent_id FROM messages WHERE id = ?", (mid,)).fetchone()
    if row is None:
        raise KeyError(mid)
    return row[0]


def children(c: sqlite3.Connection, cid: int, parent: int | None) -> list[int]:
    """Live messages that follow ``parent`` (None: the conversation's first messages), oldest first."""
    if parent is None:
        rows = c.execute("SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS NULL "
                         "AND deleted = 0 ORDER BY id", (cid,))
    else:
        rows = c.execute("SELECT id FROM messages WHERE conversation_id = ? AND parent_id = ? "
                         "AND deleted = 0 ORDER BY id", (cid, parent))
    return [r[0] for r in rows]


def siblings(c: sqlite3.Connection, mid: int) -> list[int]:
    """``mid`` and its live alternatives, oldest first."""
    row = c.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (mid,)).fetchone()
    if row is None:
        raise KeyError(mid)
    return children(c, row[0], row[1])


def descend(c: sqlite3.Connection, cid: int, mid: int | None) -> int | None:
    """The end of the newest branch below ``mid`` (``mid`` itself when nothing follows it)."""
    while True:
        kids = children(c, cid, mid)
        if not kids:
            return mid
        mid = kids[-1]


def set_leaf(c: sqlite3.Connection, cid: int, mid: int | None) -> None:
    c.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (mid, cid))


def show_branch_of(c: sqlite3.Connection, cid: int, mid: int) -> None:
    """Put the branch through ``mid`` on screen (its newest continuation)."""
    set_leaf(c, cid, descend(c, cid, mid))


def hide_subtree(c: sqlite3.Connection, cid: int, mid: int) -> None:
    """Flag ``mid`` and everything below it; the screen falls back to the branch beside it."""
    parent = parent_of(c, mid)
    ids = [r[0] for r in c.execute(_SUBTREE, (mid,))]
    c.executemany("UPDATE messages SET deleted = 1 WHERE id = ?", [(i,) for i in ids])
    set_leaf(c, cid, descend(c, cid, parent))


def positions(c: sqlite3.Connection, cid: int, path: list[int]) -> dict[int, tuple[int, int]]:
    """For each message on ``path`` that has alternatives: (its 1-based place, how many)."""
    groups: dict[int | None, list[int]] = {}
    for mid, parent in c.execute("SELECT id, parent_id FROM messages WHERE conversation_id = ? "
                                 "AND deleted = 0 ORDER BY id", (cid,)):
        groups.setdefault(parent, []).append(mid)
    out: dict[int, tuple[int, int]] = {}
    parent: int | None = None
    for mid in path:
        group = groups.get(parent, [])
        if len(group) > 1 and mid in group:
            out[mid] = (group.index(mid) + 1, len(group))
        parent = mid
    return out
