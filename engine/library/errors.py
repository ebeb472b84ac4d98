"""The model library's errors."""
from __future__ import annotations

from ..errors import HearthError


class LibraryError(HearthError):
    """A library action that cannot be done (delete the bundled model, import a non-GGUF file, ...)."""
