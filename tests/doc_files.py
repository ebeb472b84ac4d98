"""Real documents for the document tests and ``bench documents``: PDFs written with fpdf2
from real text (the project's own documentation, README and docs/), so pdfium reads a real text layer."""
from __future__ import annotations

from pathlib import Path

from engine.bench.documents import manual_text


def readme_paragraphs() -> list[str]:
    """The documentation's prose paragraphs, in Latin-1 (the PDF core fonts' alphabet)."""
    out = []
    for block in manual_text().split("\n\n"):
        text = " ".join(block.split())
        if len(text) > 80 and not text.startswith(("```", "|", "#")):
            out.append(text.encode("latin-1", "replace").decode("latin-1").replace("?", "'"))
    return out


def make_pdf(path: Path, pages: list[str], *, user_password: str | None = None,
             owner_password: str | None = None) -> Path:
    """A PDF with one page per text in ``pages`` (long texts wrap and may run over a page)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=9)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 4, text)
    if owner_password is not None or user_password is not None:
        pdf.set_encryption(owner_password or "owner", user_password)
    pdf.output(str(path))
    return path


def book_pages(n: int, words_per_page: int = 220) -> list[str]:
    """``n`` pages of the documentation's prose, each starting with a marker that says which page it is."""
    words = " ".join(readme_paragraphs()).split()
    pages = []
    for i in range(n):
        chunk = words[(i * words_per_page) % max(1, len(words) - words_per_page):][:words_per_page]
        pages.append(f"Page marker {i + 1}. " + " ".join(chunk))
    return pages


def blank_pdf(path: Path, n: int = 2) -> Path:
    """Pages with a drawing and no text: what a scan without OCR looks like to a text reader."""
    from fpdf import FPDF

    pdf = FPDF()
    for _ in range(n):
        pdf.add_page()
        pdf.rect(20, 20, 100, 150, style="F")
    pdf.output(str(path))
    return path
