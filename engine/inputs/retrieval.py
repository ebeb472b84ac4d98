"""Documents too long for the context: the passages that matter for a question, with where they are.

``Index(docs)`` cuts each document into passages (a PDF page by page, any other file
by paragraphs, each passage at most ``PASSAGE_WORDS`` words) and indexes them with
SQLite's FTS5 (BM25 ranking), in memory. ``best(question, k)`` gives the k passages
that answer best, in the documents' own order (so the same passages make the same
prompt, which the prefix cache can reuse). Every passage keeps its place (``p. 3``,
``§ 2``): a citation comes from the text that was sent, never from the model's words.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Sequence

from .documents import Document

PASSAGE_WORDS = 220
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Passage:
    doc: str        # the document's name
    order: int      # the document's place among those attached
    where: str      # "p. 3" (a PDF's page) or "§ 2" (a paragraph group)
    index: int      # the passage's place in its document
    text: str

    def cite(self) -> str:
        return f"{self.doc} {self.where}"


def passages(doc: Document, order: int = 0) -> list[Passage]:
    """``doc`` cut into passages of at most PASSAGE_WORDS words, each with its place."""
    out: list[Passage] = []
    if doc.paged:
        for n, page in enumerate(doc.pages, 1):
            words = page.split()
            for i in range(0, max(1, len(words)), PASSAGE_WORDS):
                chunk = " ".join(words[i:i + PASSAGE_WORDS])
                if chunk:
                    out.append(Passage(doc.name, order, f"p. {n}", len(out), chunk))
        return out
    buf: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal buf, size
        if buf:
            out.append(Passage(doc.name, order, f"§ {len(out) + 1}", len(out), "\n\n".join(buf)))
        buf, size = [], 0

    for para in re.split(r"\n\s*\n", doc.text):
        n = len(para.split())
        if not n:
            continue
        if size and size + n > PASSAGE_WORDS:
            flush()
        if n > PASSAGE_WORDS:  # one long paragraph: cut by words
            words = para.split()
            for i in range(0, n, PASSAGE_WORDS):
                buf, size = [" ".join(words[i:i + PASSAGE_WORDS])], PASSAGE_WORDS
                flush()
            continue
        buf.append(para.strip())
        size += n
    flush()
    return out


class Index:
    """An FTS5 index (BM25) over the passages of ``docs``."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.passages = [p for i, d in enumerate(docs) for p in passages(d, i)]
        self._db = sqlite3.connect(":memory:")
        self._db.execute("CREATE VIRTUAL TABLE passages USING fts5(text, tokenize='unicode61 remove_diacritics 2')")
        self._db.executemany("INSERT INTO passages (rowid, text) VALUES (?, ?)",
                             ((i, p.text) for i, p in enumerate(self.passages)))

    def best(self, question: str, k: int = 5) -> list[Passage]:
        """The ``k`` passages that match ``question`` best (BM25), in document order; none match: the
        first ones."""
        words = {w.lower() for w in _WORD.findall(question) if len(w) > 2 or not w.isascii()}
        hits: list[int] = []
        if words:
            query = " OR ".join('"' + w.replace('"', '""') + '"' for w in sorted(words))
            hits = [r[0] for r in self._db.execute(
                "SELECT rowid FROM passages WHERE passages MATCH ? ORDER BY bm25(passages) LIMIT ?", (query, k))]
        if not hits:
            hits = list(range(min(k, len(self.passages))))
        chosen = [self.passages[i] for i in hits]
        return sorted(chosen, key=lambda p: (p.order, p.index))

    def close(self) -> None:
        self._db.close()


def system_with_passages(system: str, chosen: Sequence[Passage]) -> str:
    """The system prompt with the chosen passages after it, each labelled with where it is from."""
    head = system.strip() + "\n\n" if system.strip() else ""
    intro = ("The user's documents are too long to read whole; these passages are the most relevant to the "
             "question. Answer from them and name the passage (document and page) you used.")
    body = "\n\n".join(f'<passage source="{p.cite()}">\n{p.text}\n</passage>' for p in chosen)
    return f"{head}{intro}\n\n{body}"
