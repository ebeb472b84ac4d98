"""The remote engine: a model served elsewhere, used through the engine interface.

Another Hearth, llama-server, vLLM, SGLang, LM Studio or Ollama's ``/v1`` serve
models over OpenAI's chat API; a cluster (vLLM over several nodes) is one such
server. Hearth is their client: ``wire`` speaks HTTP/1.1 with Stop and time-outs
that always work, ``pins`` keeps the certificates first seen (trust on first use),
``client`` speaks the API, and ``engine`` is the second implementation of the
engine interface (engine/interface.py) that the window and ``engine chat`` use.

This package is public: the app opens a server's model and lists its models through the names below
(docs/layout.md, "The engine's face"), each imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .connect import list_models, open_remote, pins_for
    from .pins import PinStore
    from .transport import Endpoint

_WHERE = {**dict.fromkeys(["list_models", "open_remote", "pins_for"], ".connect"), "PinStore": ".pins",
          "Endpoint": ".transport"}
__all__ = ["Endpoint", "PinStore", "list_models", "open_remote", "pins_for"]
__getattr__ = lazy_exports(__name__, _WHERE)
