"""The documents a conversation carries, read back from the attachment store for its prompt.

A user message keeps a ``DocumentPart`` (the file by SHA-256); the file itself lives
once in the attachment store. For each reply the documents of the whole conversation,
in the order they were attached, go into the slot after the system prompt
(engine.documents.system_with_documents), so they form one prefix the cache keeps.
Reading a long PDF again for every reply would cost seconds: each document is read
once per session and kept here, by hash.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from app.core.attachments import AttachmentError, Attachments
from app.core.store_rows import StoredMessage
from engine.inputs import Document, DocumentError, Index, read_document, system_with_documents, system_with_passages
from engine.prompt import DocumentPart, ImagePart, Message, Part, TextPart

# The estimate before a model counts (BPE vocabularies average 3-4 bytes of text a token): it decides
# whole or retrieval (the engine's count is the backstop) and the chips' "≈" figures.
BYTES_PER_TOKEN = 3.6
WHOLE_SHARE = 0.6      # documents read whole may take up to this share of the context
PASSAGES = 6

KEEP = 32  # documents kept read, by hash


@dataclass(frozen=True, slots=True)
class Pending:
    """A document read and waiting to be sent: its text, the file it came from, its tokens."""
    doc: Document
    path: Path
    tokens: int | None


@dataclass(frozen=True, slots=True)
class PendingImage:
    """An image checked and waiting to be sent with the next message."""
    sha256: str
    mime: str
    data: bytes
    name: str
    width: int
    height: int


class DocumentShelf:
    def __init__(self, attachments: Attachments) -> None:
        self.attachments = attachments
        self._read: OrderedDict[str, Document] = OrderedDict()

    def keep(self, doc: Document) -> None:
        """A document just read (attached): no need to read its file again."""
        self._read[doc.sha256] = doc
        self._read.move_to_end(doc.sha256)
        while len(self._read) > KEEP:
            self._read.popitem(last=False)

    def documents(self, parts: Sequence[DocumentPart]) -> tuple[list[Document], list[str]]:
        """The documents of ``parts`` (each once, in order), and a line for each that cannot be read."""
        out, problems, seen = [], [], set()
        for p in parts:
            if p.sha256 in seen:
                continue
            seen.add(p.sha256)
            doc = self._read.get(p.sha256)
            if doc is None:
                try:
                    doc = read_document(p.name, self.attachments.read(p.sha256))
                except (AttachmentError, DocumentError) as e:
                    problems.append(f"{p.name} is left out of this reply: {e}")
                    continue
                doc = Document(p.name, doc.sha256, doc.mime, doc.pages)
            self.keep(doc)
            out.append(doc)
        return out, problems


def store_pending(attachments: Attachments, shelf: DocumentShelf, pending: Sequence[Pending],
                  images: Sequence[PendingImage] = (), *, sees_images: bool = True
                  ) -> tuple[list[Part], tuple[str, str] | None]:
    """Each pending document's file and each image into the attachment store, as parts of the
    message; or the first one that cannot go (its hash, and why: unreadable, or changed on disk
    since it was read). Images for a model that cannot see them go nowhere: ("", why), so the
    tray keeps them and the box keeps the text."""
    if images and not sees_images:
        return [], ("", "the loaded model cannot see images; load a vision model with its projector "
                        "(mmproj), or remove the image")
    parts: list[Part] = []
    for p in pending:
        try:
            sha = attachments.put_file(p.path)
        except (AttachmentError, OSError) as e:
            return [], (p.doc.sha256, f"{p.doc.name} cannot be stored ({e})")
        if sha != p.doc.sha256:
            return [], (p.doc.sha256, f"{p.doc.name} changed on disk since it was attached; attach it again")
        shelf.keep(p.doc)
        parts.append(DocumentPart(sha, p.doc.name, len(p.doc.pages) if p.doc.paged else None, p.doc.mime))
    for im in images:
        try:
            sha = attachments.put(im.data)
        except (AttachmentError, OSError) as e:
            return [], (im.sha256, f"{im.name} cannot be stored ({e})")
        parts.append(ImagePart(sha, im.mime))
    return parts, None


@dataclass(frozen=True, slots=True)
class Given:
    """What a reply is given of the conversation's documents."""
    system_prompt: str                       # the system prompt with the documents (or passages) in their slot
    missing: list[str]                       # a line for each document that could not be read back
    notes: list[str]                         # which documents it was given whole, or which passages
    sources: list[dict[str, str]] = field(default_factory=list)  # each passage sent: doc, where, text


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` takes (shown with "≈"; the reply's prompt count is exact)."""
    return max(1, round(len(text.encode("utf-8")) / BYTES_PER_TOKEN))


def with_documents(shelf: DocumentShelf, system_prompt: str, stored: Sequence[StoredMessage], *,
                   n_ctx: int = 0) -> Given:
    """The system prompt with the conversation's documents in their slot, and the reply's notes:
    which documents it was given whole, or, when they take more than WHOLE_SHARE of ``n_ctx``,
    which passages (retrieval, for the last question), each passage's text kept as its source
    so a citation shows exactly what was sent."""
    docs, missing = shelf.documents([p for m in stored if m.role == "user" for p in m.parts
                                     if isinstance(p, DocumentPart)])
    if not docs:
        return Given(system_prompt, missing, [])
    whole = system_with_documents(system_prompt, docs)
    size = estimate_tokens(whole)
    if not n_ctx or size <= WHOLE_SHARE * n_ctx:
        return Given(whole, missing, ["given the documents whole: " + ", ".join(d.name for d in docs)])
    question = next((m.content for m in reversed(stored) if m.role == "user"), "")
    index = Index(docs)
    try:
        chosen = index.best(question, PASSAGES)
    finally:
        index.close()
    note = (f"the documents (about {size:,.0f} tokens) are too long for the {n_ctx:,}-token context, so this "
            f"reply was given the {len(chosen)} passages that match the question best: "
            + "; ".join(p.cite() for p in chosen))
    sources = [{"doc": p.doc, "where": p.where, "text": p.text} for p in chosen]
    return Given(system_with_passages(system_prompt, chosen), missing, [note], sources)


def model_message(m: StoredMessage, attachments: Attachments | None = None) -> Message:
    """A stored message as the model gets it: a document's text is in the system slot, so a
    message that carried one keeps only its words here; its images keep their place, with their
    bytes read from ``attachments`` (an image gone from the store is left without: the engine says so)."""
    if all(isinstance(p, TextPart) for p in m.parts):
        return m.as_message()
    parts: list[Part] = []
    for p in m.parts:
        if isinstance(p, ImagePart):
            try:
                data = attachments.read(p.sha256) if attachments is not None else None
            except AttachmentError:
                data = None
            parts.append(ImagePart(p.sha256, p.mime, data))
        elif isinstance(p, TextPart):
            parts.append(p)
    return Message(m.role, "", tuple(parts), reasoning=m.reasoning, tool_calls=m.tool_calls,
                   tool_call_id=m.tool_call_id, pinned=m.pinned)
