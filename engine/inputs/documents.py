"""Documents a user attaches: read into pages of text, and placed where the prefix cache keeps them.

``read_document(name, data)`` turns a file's bytes into a ``Document``: PDF (its
text layer, page by page, with pdfium), Word (.docx, with python-docx: paragraphs
and tables in document order), Markdown, plain text, source code, HTML (as text).
``read_folder(path)`` reads every text file of a folder, leaving out what its
``.gitignore`` files ignore and anything binary. A file that cannot be
read raises ``DocumentError`` with one line that says why (encrypted, corrupt,
scanned with no text layer, not text).

``system_with_documents(system, docs)`` is the one place documents enter a
prompt: whole, in a fixed slot right after the system prompt. A document's KV
depends on every token before it, so this slot makes "system prompt plus
documents" one prefix that the prefix cache and the disk store keep like a
system prompt: a second question, another conversation with the same prompt
and files, and a restart each read only the new tokens, and editing a
question never invalidates the documents.
"""
from __future__ import annotations

import fnmatch
import hashlib
import html.parser
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import HearthError

MAX_FILE_BYTES = 64 << 20       # one attached file
MAX_FOLDER_FILES = 2000
TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg",
                 ".py", ".js", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java",
                 ".kt", ".swift", ".rb", ".php", ".sh", ".bash", ".zsh", ".sql", ".css", ".scss", ".xml", ".tex",
                 ".lua", ".r", ".m", ".cs", ".scala", ".pl", ".hs", ".ex", ".exs", ".dart", ".vue", ".svelte"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MAX_DOCX_XML = 256 << 20        # what a .docx's parts may expand to: a zip bomb is refused unread
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", ".tox", "dist", "build"}


class DocumentError(HearthError):
    """A file that cannot be attached; the message is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Document:
    """One attached file as text. ``pages``: a PDF's pages, or one page for any other file."""
    name: str
    sha256: str
    mime: str
    pages: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(self.pages)

    @property
    def paged(self) -> bool:
        return self.mime == "application/pdf"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_document(name: str, data: bytes, *, cancel: Callable[[], bool] | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Document:
    """``data`` (a file called ``name``) as a Document; DocumentError says why it cannot be read.
    ``progress(done, total)`` and ``cancel()`` are asked between a PDF's pages."""
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(f"{name} is {len(data) / 2**20:.0f} MB; Hearth attaches files up to "
                            f"{MAX_FILE_BYTES >> 20} MB")
    suffix = Path(name).suffix.lower()
    digest = sha256(data)
    if data[:5] == b"%PDF-" or suffix == ".pdf":
        return Document(name, digest, "application/pdf", _pdf_pages(name, data, cancel, progress))
    if suffix in (".docx", ".doc") or (data[:4] == b"PK\x03\x04" and b"word/" in data[:4096]):
        return Document(name, digest, DOCX_MIME, (_docx_text(name, data),))
    text = _decode(name, data)
    if suffix in HTML_SUFFIXES or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html")):
        return Document(name, digest, "text/html", (_html_text(text),))
    mime = "text/markdown" if suffix in (".md", ".markdown") else "text/plain"
    return Document(name, digest, mime, (text,))


def read_file(path: str | os.PathLike[str], **kw) -> Document:
    """A file on disk as a Document. Only a regular file is read (a FIFO, a device such as
    /dev/zero, or a link to one would block or never end), and never more than the size cap,
    even when the file grows while it is read."""
    p = Path(path)
    cap = f"Hearth attaches files up to {MAX_FILE_BYTES >> 20} MB"
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):  # before opening: opening a FIFO waits for a writer
            raise DocumentError(f"{p.name} is not a regular file (a pipe, a device or a socket); attach a file")
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # it was swapped for something else between the two looks
                raise DocumentError(f"{p.name} is not a regular file (a pipe, a device or a socket); attach a file")
            if st.st_size > MAX_FILE_BYTES:
                raise DocumentError(f"{p.name} is {st.st_size / 2**20:.0f} MB; {cap}")
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise DocumentError(f"{p.name} cannot be read: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:  # it grew after it was measured
        raise DocumentError(f"{p.name} is over {MAX_FILE_BYTES >> 20} MB; {cap}")
    return read_document(p.name, data, **kw)


def _decode(name: str, data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its byte-order mark (Windows Notepad)
        try:
            return data.decode("utf-16").replace("\r\n", "\n")
        except UnicodeDecodeError:
            raise DocumentError(f"{name} is not valid UTF-16 text") from None
    if b"\0" in data[:8192]:
        raise DocumentError(f"{name} is not a text file (binary content); Hearth reads PDF, text, "
                            "Markdown, HTML and source code")
    try:
        return data.decode("utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252").replace("\r\n", "\n")  # old Windows text
    except UnicodeDecodeError:
        raise DocumentError(f"{name} is not UTF-8 text") from None


def _pdf_pages(name: str, data: bytes, cancel, progress) -> tuple[str, ...]:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        msg = str(e).lower()
        if "password" in msg:
            raise DocumentError(f"{name} is encrypted with a password; open it, save an unprotected copy, "
                                "and attach that") from None
        raise DocumentError(f"{name} is not a readable PDF (corrupt or truncated: {e})") from None
    try:
        total, pages = len(pdf), []
        for i in range(total):
            if cancel is not None and cancel():
                raise DocumentError(f"reading {name} was cancelled")
            page = pdf[i]
            tp = page.get_textpage()
            pages.append(tp.get_text_range().replace("\r\n", "\n").replace("\r", "\n").strip())
            tp.close()
            page.close()
            if progress is not None:
                progress(i + 1, total)
    finally:
        pdf.close()
    if pages and not any(p.strip() for p in pages):
        raise DocumentError(f"{name} has no text layer (a scanned PDF?); Hearth reads a PDF's text and "
                            "does not do OCR")
    if not pages:
        raise DocumentError(f"{name} has no pages")
    return tuple(pages)


def _docx_text(name: str, data: bytes) -> str:
    """A Word document's text: its paragraphs and its tables' rows (cells joined by " | "), in order."""
    if data[:4] == b"\xd0\xcf\x11\xe0":  # an OLE file: an encrypted .docx, or the old binary .doc
        raise DocumentError(f"{name} is encrypted with a password, or is an old .doc file; save it as an "
                            "unprotected .docx and attach that")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            if sum(i.file_size for i in z.infolist()) > MAX_DOCX_XML:
                raise DocumentError(f"{name} expands to over {MAX_DOCX_XML >> 20} MB; Hearth leaves it unread")
            if "word/document.xml" not in z.namelist():
                raise DocumentError(f"{name} is not a Word document (it has no word/document.xml)")
    except zipfile.BadZipFile:
        raise DocumentError(f"{name} is not a readable Word document (corrupt or truncated)") from None
    import docx  # python-docx: its XML parser resolves no entities
    from docx.table import Table

    try:
        d = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        for block in d.iter_inner_content():
            if isinstance(block, Table):
                for row in block.rows:
                    cells: list[str] = []
                    for c in row.cells:  # a merged cell is returned once per grid column it spans
                        t = " ".join(c.text.split())
                        if not cells or cells[-1] != t:
                            cells.append(t)
                    if any(cells):
                        lines.append(" | ".join(cells))
            elif block.text.strip():
                lines.append(block.text.strip())
    except Exception as e:  # python-docx and lxml raise many kinds for a damaged part
        raise DocumentError(f"{name} is not a readable Word document (corrupt: {type(e).__name__})") from None
    if not lines:
        raise DocumentError(f"{name} has no text")
    return "\n\n".join(lines)


class _Text(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "noscript"):
            self._skip += 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "noscript"):
            self._skip = max(0, self._skip - 1)
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self._skip:
            self.out.append(data)


def _html_text(source: str) -> str:
    p = _Text()
    p.feed(source)
    lines = [" ".join(line.split()) for line in "".join(p.out).split("\n")]
    return "\n".join(line for line in lines if line)


# -- folders ----------------------------------------------------------------------


def _ignored(rel: str, is_dir: bool, rules: Sequence[tuple[str, str, bool]]) -> bool:
    """Whether ``rel`` (a path relative to the folder) is ignored by the .gitignore ``rules``
    seen so far: (folder the rule file is in, pattern, negated); the last match decides."""
    out = False
    for base, pat, neg in rules:
        if base and not (rel == base or rel.startswith(base + "/")):
            continue
        sub = rel[len(base) + 1:] if base else rel
        dir_only = pat.endswith("/")
        p = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        anchored = "/" in p
        p = p.lstrip("/")
        target = sub if anchored else sub.rsplit("/", 1)[-1]
        if fnmatch.fnmatchcase(target, p) or (anchored and fnmatch.fnmatchcase(sub, p + "/**")):
            out = not neg
    return out


def _read_rules(folder: Path, rel: str) -> list[tuple[str, str, bool]]:
    f = folder / rel / ".gitignore" if rel else folder / ".gitignore"
    try:
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        out.append((rel, line[1:] if neg else line, neg))
    return out


def folder_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files of ``folder`` worth reading, sorted: .gitignore respected, tool folders skipped."""
    root = Path(folder)
    if not root.is_dir():
        raise DocumentError(f"{root} is not a folder")
    found: list[Path] = []

    def walk(rel: str, rules: list[tuple[str, str, bool]]) -> None:
        rules = rules + _read_rules(root, rel)
        try:
            entries = sorted(os.scandir(root / rel if rel else root), key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            child = f"{rel}/{e.name}" if rel else e.name
            if e.is_symlink():
                continue
            if e.is_dir():
                if e.name not in SKIP_DIRS and not _ignored(child, True, rules):
                    walk(child, rules)
            elif e.is_file() and not _ignored(child, False, rules) and e.name != ".gitignore":
                found.append(root / child)
            if len(found) > MAX_FOLDER_FILES:
                raise DocumentError(f"{root.name} holds over {MAX_FOLDER_FILES} files; attach a smaller folder")

    walk("", [])
    return found


def read_folder(folder: str | os.PathLike[str]) -> tuple[list[Document], list[str]]:
    """Every readable file of ``folder`` as a Document (named by its path in the folder), and a
    line for each file left out (binary, unreadable)."""
    root = Path(folder)
    docs, skipped = [], []
    for f in folder_files(root):
        rel = f.relative_to(root).as_posix()
        suffix = f.suffix.lower()
        if suffix not in TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf", ".docx"} and f.name not in (
                "README", "LICENSE", "Makefile", "Dockerfile"):
            skipped.append(f"{rel}: not a text or PDF file")
            continue
        try:
            d = read_file(f)
        except DocumentError as e:
            skipped.append(f"{rel}: {e}")
            continue
        docs.append(Document(rel, d.sha256, d.mime, d.pages))
    return docs, skipped


# -- the prompt ----------------------------------------------------------------------


def document_block(doc: Document) -> str:
    """One document as the model reads it: its name, and a PDF's page numbers, so an answer can
    say where something is (the numbers come from the text sent, never from the model)."""
    if doc.paged:
        body = "\n\n".join(f"[page {i}]\n{p}" for i, p in enumerate(doc.pages, 1))
    else:
        body = doc.text
    return f'<document name="{doc.name}">\n{body.strip()}\n</document>'


def system_with_documents(system: str, docs: Iterable[Document]) -> str:
    """The system prompt with the documents after it, in the order they were attached (each once)."""
    seen, blocks = set(), []
    for d in docs:
        if d.sha256 in seen:
            continue
        seen.add(d.sha256)
        blocks.append(document_block(d))
    if not blocks:
        return system
    head = system.strip() + "\n\n" if system.strip() else ""
    intro = "The user attached these documents. Answer from them, and say which document (and page) you used."
    return f"{head}{intro}\n\n" + "\n\n".join(blocks)
