"""What a user hands the model besides text: images (checked, then decoded once), their positions
in a token list (media.py), and documents (read into pages, and placed where the prefix cache
keeps them) with retrieval over the ones too long for the context.

This package is public: the app uses the names below (docs/layout.md, "The engine's face"), each
imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .documents import (Document, DocumentError, document_block, read_document, read_file, read_folder,
                            system_with_documents)
    from .images import ImageError, decode
    from .retrieval import Index, system_with_passages

_WHERE = {
    **dict.fromkeys(["Document", "DocumentError", "document_block", "read_document", "read_file", "read_folder",
                     "system_with_documents"], ".documents"),
    "ImageError": ".images", "decode": ".images", "Index": ".retrieval", "system_with_passages": ".retrieval",
}
__all__ = ["Document", "DocumentError", "ImageError", "Index", "decode", "document_block", "read_document",
           "read_file", "read_folder", "system_with_documents", "system_with_passages"]
__getattr__ = lazy_exports(__name__, _WHERE)
