"""Take the documentation's pictures of documents in a chat: a PDF's chip before sending, the reply
given it whole, and a reply to a PDF too long for the context, with the pages it was given.

    .venv/bin/python scripts/document_screenshots.py   # offscreen: assets/documents-*.png

All real: the window, the bundled model, and PDFs written with fpdf2 from this project's
README (tests/doc_files.py), read back through pdfium. Everything happens in a scratch data
folder that is deleted afterwards.
"""
from __future__ import annotations

import sys
from pathlib import Path


def _save(win, path: Path) -> None:
    from app.window.selftest import wait_until

    wait_until(lambda: False, 0.5)  # let the layout settle
    if not win.grab().save(str(path)):
        raise RuntimeError(f"could not write {path}")


def _attach(win, pdf: Path) -> None:
    from app.window.selftest import wait_until

    tray = win.chat.attach
    tray.add_paths([str(pdf)])
    if not wait_until(lambda: len(tray.items) == 1, 300.0):
        raise RuntimeError(f"{pdf.name} was not attached: " + " | ".join(win.info.messages()))


def _ask(win, text: str) -> None:
    from app.window.selftest import wait_until

    win.chat.set_input_text(text)
    win.chat._submit()
    if win.stream is None:
        raise RuntimeError("the question was not sent: " + " | ".join(win.info.messages()))
    if not wait_until(lambda: win.stream is None, 900.0):
        raise RuntimeError("the reply did not end")


def take(out: Path, scratch: Path, theme: str) -> None:
    from app.core.settings import Settings
    from doc_files import book_pages, make_pdf
    from offscreen_pictures import open_window

    s = Settings(theme=theme)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 48})
    win = open_window(s)
    suffix = "-dark" if theme == "dark" else ""

    manual = make_pdf(scratch / "hearth-manual.pdf", book_pages(6, 200))
    _attach(win, manual)
    win.chat.set_input_text("What does Hearth keep in its prefix cache?")
    _save(win, out / f"documents-chip{suffix}.png")
    _ask(win, "What does Hearth keep in its prefix cache?")
    win.rename_conversation(win.current, "A manual")
    _save(win, out / f"documents-whole{suffix}.png")

    win.new_conversation()
    big = make_pdf(scratch / "hearth-book.pdf", book_pages(80, 220))
    _attach(win, big)
    page = win.chat.attach.items[0].doc.pages[41]
    words = [w for w in page.split() if len(w) > 6 and w.isalpha()][:3]
    _ask(win, "What do these pages say about " + ", ".join(words) + "?")
    win.rename_conversation(win.current, "A long book")
    _save(win, out / f"documents-sources{suffix}.png")
    win.close()


def main() -> int:
    from offscreen_pictures import take_pictures

    return take_pictures(__doc__ or "", lambda out, scratch, t, _args: take(out, scratch, t), prefix="hearth-docs-")


if __name__ == "__main__":
    sys.exit(main())
