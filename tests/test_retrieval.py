"""Retrieval for documents too long for the context: SQLite FTS5 (BM25) over pages and
paragraphs, the passages given in document order, each citing where it is from."""
from __future__ import annotations

import re
from collections import Counter

from doc_files import book_pages, make_pdf
from engine.inputs.documents import read_document, read_file
from engine.inputs.retrieval import PASSAGE_WORDS, Index, passages, system_with_passages


def rare_word_questions(doc, n=24):
    """For n pages, a question made of three words found on that page and on few others:
    the page that holds them is the known answer."""
    pages = [set(w.lower() for w in re.findall(r"[A-Za-z]{5,}", p)) for p in doc.pages]
    df = Counter(w for p in pages for w in p)
    out = []
    for i, words in enumerate(pages[:n]):
        rare = sorted(words, key=lambda w: (df[w], w))[:3]
        out.append((f"What does the manual say about {rare[0]}, {rare[1]} and {rare[2]}?", f"p. {i + 1}"))
    return out


def test_recall_at_5_on_questions_with_known_pages(tmp_path):
    doc = read_file(make_pdf(tmp_path / "manual.pdf", book_pages(30, 180)))
    index = Index([doc])
    qs = rare_word_questions(doc)
    found = sum(any(p.where == page for p in index.best(q, 5)) for q, page in qs)
    assert len(qs) >= 20 and found / len(qs) >= 0.8, found


def test_passages_keep_their_place_and_order():
    pdf_like = read_document("a.md", ("\n\n".join(f"Paragraph {i} " + "word " * 50 for i in range(12))).encode())
    ps = passages(pdf_like)
    assert [p.where for p in ps] == [f"§ {i}" for i in range(1, len(ps) + 1)]
    assert all(len(p.text.split()) <= PASSAGE_WORDS for p in ps)
    assert "Paragraph 0" in ps[0].text and "Paragraph 11" in ps[-1].text
    index = Index([pdf_like, read_document("b.txt", "Der Schlüssel liegt unter der Matte.".encode())])
    best = index.best("Wo liegt der Schlüssel?", 3)
    assert best[-1].cite() == "b.txt § 1"  # in the documents' order, not the score's
    assert [(p.order, p.index) for p in best] == sorted((p.order, p.index) for p in best)
    block = system_with_passages("Be brief.", best)
    assert block.startswith("Be brief.\n\n") and '<passage source="b.txt § 1">' in block


def test_a_question_with_no_match_still_gets_passages():
    index = Index([read_document("a.txt", b"alpha beta gamma")])
    assert [p.cite() for p in index.best("zzz?", 5)] == ["a.txt § 1"]
    assert index.best('"; DROP TABLE passages; --', 2)[0].text == "alpha beta gamma"
