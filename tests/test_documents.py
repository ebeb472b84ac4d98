"""Attached documents: read with real libraries (pdfium for PDFs written by fpdf2 from real
text), bad files refused with one clear line, folders read as git would see them, and the
prefix cache paying for a document once: a second question, a new conversation with the
same file, and a restart each read only the new tokens (counted, on the bundled model)."""
from __future__ import annotations

import pytest

from doc_files import blank_pdf, book_pages, make_pdf
from engine.inputs.documents import (DocumentError, document_block, folder_files, read_document, read_file, read_folder,
    system_with_documents)


def test_a_pdf_is_read_page_by_page(tmp_path):
    pages = book_pages(20)
    doc = read_file(make_pdf(tmp_path / "book.pdf", pages))
    assert doc.mime == "application/pdf" and len(doc.pages) == 20
    for i, p in enumerate(doc.pages):
        assert p.startswith(f"Page marker {i + 1}.")
        assert " ".join(p.split()) == " ".join(pages[i].split())  # every word, in order
    block = document_block(doc)
    assert block.startswith('<document name="book.pdf">\n[page 1]\nPage marker 1.') and "[page 20]" in block


def test_an_encrypted_pdf_says_so_and_one_without_a_user_password_opens(tmp_path):
    with pytest.raises(DocumentError, match="encrypted with a password"):
        read_file(make_pdf(tmp_path / "locked.pdf", ["secret"], user_password="pw"))
    doc = read_file(make_pdf(tmp_path / "owner.pdf", ["open to all"], owner_password="owner", user_password=""))
    assert doc.pages == ("open to all",)


def test_a_corrupt_or_truncated_pdf_says_so(tmp_path):
    data = make_pdf(tmp_path / "a.pdf", book_pages(3)).read_bytes()
    for bad in (data[:200], b"%PDF-1.7\n" + b"\x00garbage" * 50):
        with pytest.raises(DocumentError, match="not a readable PDF"):
            read_document("a.pdf", bad)


def test_a_scan_without_a_text_layer_says_so(tmp_path):
    with pytest.raises(DocumentError, match="no text layer"):
        read_file(blank_pdf(tmp_path / "scan.pdf"))


def test_text_in_a_mix_of_scripts_is_kept_exactly():
    text = "Grüße — 你好，世界 — مرحبا — Привет — 🙂👍🏽\r\nzweite Zeile\n"
    doc = read_document("notes.md", text.encode("utf-8"))
    assert doc.pages == (text.replace("\r\n", "\n"),) and doc.mime == "text/markdown"
    assert read_document("bom.txt", "\ufeffhallo".encode("utf-8")).pages == ("hallo",)
    assert read_document("w.txt", "olá".encode("utf-16")).pages == ("olá",)


def test_binary_files_are_refused_and_html_is_read_as_text():
    with pytest.raises(DocumentError, match="not a text file"):
        read_document("model.bin", b"GGUF\x00\x00\x01" + bytes(range(256)))
    page = read_document("p.html", b"<html><head><style>b{}</style><script>alert(1)</script></head>"
                                   b"<body><h1>Title</h1><p>One &amp; two</p><p>three</p></body></html>")
    assert page.pages == ("Title\nOne & two\nthree",)


def _docx(path, build) -> bytes:
    import docx

    d = docx.Document()
    build(d)
    d.save(str(path))
    return path.read_bytes()


def test_a_word_document_is_read_in_order_with_its_tables(tmp_path):
    def build(d):
        d.add_heading("Mietvertrag", 1)
        d.add_paragraph("Die Wohnung liegt im 3. Stock — 你好 — مرحبا 🙂")
        t = d.add_table(rows=2, cols=3)
        t.cell(0, 0).text, t.cell(0, 1).text, t.cell(0, 2).text = "Miete", "850 €", "monatlich"
        t.cell(1, 0).merge(t.cell(1, 1)).text = "Kaution"
        t.cell(1, 2).text = "2550 €"
        d.add_paragraph("")
        d.add_paragraph("Kündigung: drei Monate.")

    data = _docx(tmp_path / "vertrag.docx", build)
    doc = read_document("vertrag.docx", data)
    assert doc.mime.endswith("wordprocessingml.document") and not doc.paged
    assert doc.pages == ("Mietvertrag\n\nDie Wohnung liegt im 3. Stock — 你好 — مرحبا 🙂\n\n"
                         "Miete | 850 € | monatlich\n\nKaution | 2550 €\n\nKündigung: drei Monate.",)
    assert read_document("no-suffix", data).pages == doc.pages  # known by its content, not its name
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "vertrag.docx").write_bytes(data)
    assert [d.name for d in read_folder(folder)[0]] == ["vertrag.docx"]


def test_a_bad_word_document_is_one_line(tmp_path, monkeypatch):
    data = _docx(tmp_path / "a.docx", lambda d: d.add_paragraph("Hallo " * 2000))
    with pytest.raises(DocumentError, match="a.docx is not a readable Word document .corrupt or truncated"):
        read_document("a.docx", data[:len(data) // 2])
    with pytest.raises(DocumentError, match="encrypted with a password, or is an old .doc"):
        read_document("secret.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4096))
    with pytest.raises(DocumentError, match="has no text"):
        read_document("empty.docx", _docx(tmp_path / "e.docx", lambda d: None))
    import zipfile

    with zipfile.ZipFile(tmp_path / "other.docx", "w") as z:
        z.writestr("hello.txt", "not word")
    with pytest.raises(DocumentError, match="no word/document.xml"):
        read_document("other.docx", (tmp_path / "other.docx").read_bytes())
    import engine.inputs.documents as documents

    # A zip bomb: what its parts expand to is checked before any is read (the limit lowered to this file).
    monkeypatch.setattr(documents, "MAX_DOCX_XML", len(data))
    with pytest.raises(DocumentError, match="expands to over"):
        read_document("a.docx", data)


def test_a_file_that_changes_after_attaching_is_a_new_document(tmp_path):
    f = tmp_path / "n.txt"
    f.write_text("v1")
    a = read_file(f)
    f.write_text("v2")
    b = read_file(f)
    assert a.sha256 != b.sha256 and b.pages == ("v2",)


def test_a_folder_is_read_as_git_sees_it(tmp_path):
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n/secret.txt\n!keep.log\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')\n")
    (tmp_path / "src" / ".gitignore").write_text("gen_*.py\n")
    (tmp_path / "src" / "gen_x.py").write_text("x = 1\n")
    (tmp_path / "src" / "secret.txt").write_text("not at the root: kept\n")
    (tmp_path / "secret.txt").write_text("ignored\n")
    (tmp_path / "a.log").write_text("ignored\n")
    (tmp_path / "keep.log").write_text("kept\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out.py").write_text("ignored\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "x.js").write_text("ignored\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (tmp_path / "README.md").write_text("# Read me\n")
    names = [p.relative_to(tmp_path).as_posix() for p in folder_files(tmp_path)]
    assert names == ["README.md", "keep.log", "logo.png", "src/main.py", "src/secret.txt"]
    docs, skipped = read_folder(tmp_path)
    assert [d.name for d in docs] == ["README.md", "src/main.py", "src/secret.txt"]
    assert any(s.startswith("keep.log") for s in skipped) and any(s.startswith("logo.png") for s in skipped)


def test_documents_sit_once_in_the_slot_after_the_system_prompt():
    a = read_document("a.txt", b"alpha")
    b = read_document("b.txt", b"beta")
    s = system_with_documents("Be brief.", [a, b, a])
    assert s.startswith("Be brief.\n\n") and s.count('<document name="a.txt">') == 1
    assert s.index("alpha") < s.index("beta")
    assert system_with_documents("Be brief.", []) == "Be brief."
    assert system_with_documents("", [a]).startswith("The user attached")


@pytest.fixture(scope="module")
def doc_text():
    return "\n\n".join(book_pages(6, 150))


def test_the_document_is_read_once_then_only_new_tokens(bundled_path, tmp_path, doc_text):
    """Second question, a new conversation with the same file, a restart: only new tokens."""
    from engine.engine import Engine
    from engine.config import EngineConfig
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    doc = read_document("manual.txt", doc_text.encode())
    system = Message("system", system_with_documents("Answer briefly.", [doc]))
    params = SamplingParams(temperature=0, max_tokens=8)

    def ask(e, history):
        final = list(e.stream(history, params))[-1]
        return final, final.stats

    e = Engine.open(EngineConfig(bundled_path, n_ctx=8192, n_threads=2, disk_cache=tmp_path / "kv"))
    try:
        h1 = [system, Message("user", "What is Hearth?")]
        r1, s1 = ask(e, h1)
        n_doc = len(e.prompt_tokens([system]))
        assert n_doc > 1000 and s1.prefill_tokens >= n_doc
        h2 = [*h1, Message("assistant", r1.text), Message("user", "And the prefix cache?")]
        _, s2 = ask(e, h2)
        assert s2.cached_tokens >= s1.prompt_tokens - 1 and s2.prefill_tokens < 60
        _, s3 = ask(e, [system, Message("user", "A different first question?")])  # a new conversation
        assert s3.cached_tokens >= n_doc - 8 and s3.prefill_tokens < 60
    finally:
        e.close()
    e = Engine.open(EngineConfig(bundled_path, n_ctx=8192, n_threads=2, disk_cache=tmp_path / "kv"))  # a restart
    try:
        _, s4 = ask(e, [system, Message("user", "Asked after a restart?")])
        assert s4.cached_tokens >= n_doc - 8 and s4.prefill_tokens < 60
    finally:
        e.close()


def test_bench_documents_measures_and_checks_the_answers(bundled_path):
    """The benchmark's own checks, small: cached answers equal uncached ones, the ratios are there."""
    import argparse

    from engine.bench import NAMES, documents

    assert "documents" in NAMES
    a = argparse.Namespace(model=None, threads=2, backend="llama_cpp", rounds=1, tokens=4, n_ctx=2048,
                           pages=3, words_per_page=60, cases="pdf")
    pdf = read_document("r.pdf", documents._readme_pdf(3, 60))
    assert [p.split(".")[0] for p in pdf.pages] == ["Page 1", "Page 2", "Page 3"]
    out = documents.bench_documents(a)  # --cases pdf: the folder is left out
    assert list(out) == ["pdf"]
    c = out["pdf"]
    assert c["answers_identical_to_uncached"] is True and c["pages"] == 3
    assert c["prefix_tokens"] > 200 and set(c["speedup"]) == {"second", "new_conversation", "restart"}


def test_a_long_pdf_reports_its_pages_and_can_be_cancelled(tmp_path):
    data = make_pdf(tmp_path / "long.pdf", [f"Seite {i}" for i in range(1, 401)]).read_bytes()
    seen = []
    doc = read_document("long.pdf", data, progress=lambda done, total: seen.append((done, total)))
    assert len(doc.pages) == 400 and seen[0] == (1, 400) and seen[-1] == (400, 400)
    with pytest.raises(DocumentError, match="cancelled"):
        read_document("long.pdf", data, cancel=lambda: len(seen) > 405,
                      progress=lambda done, total: seen.append((done, total)))
    assert len(seen) == 406  # it stopped at the first page after Cancel, not at the end
