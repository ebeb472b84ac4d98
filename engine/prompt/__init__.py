"""Messages in, prompt tokens out: a message as ordered parts (messages.py), the model's own chat
template rendered in a sandbox (chat_template.py), the prompt built and fitted into the context
(builder.py), and what of a long conversation the model sees (view.py, summary.py).

This package is public: the app uses the names below (docs/layout.md, "The engine's face"), each
imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .messages import DocumentPart, ImagePart, Message, Part, TextPart, ToolCall
    from .summary import summary_message
    from .view import CONTEXT_POLICIES, pinned_turns

_WHERE = {
    **dict.fromkeys(["DocumentPart", "ImagePart", "Message", "Part", "TextPart", "ToolCall"], ".messages"),
    "summary_message": ".summary", "CONTEXT_POLICIES": ".view", "pinned_turns": ".view",
}
__all__ = ["CONTEXT_POLICIES", "DocumentPart", "ImagePart", "Message", "Part", "TextPart", "ToolCall", "pinned_turns",
           "summary_message"]
__getattr__ = lazy_exports(__name__, _WHERE)
