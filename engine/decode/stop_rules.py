"""When a reply ends, besides a stop string: the rules the decode loop (stream.py) and the room
keeper (room.py, which moves the prompt's length when it makes room) both read."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..types import SamplingParams
from .detokenize import IncrementalDetokenizer

if TYPE_CHECKING:
    from ..backends.base import Backend

FINISH_CHAR_TOKENS = 3  # byte tokens a reply may run past max_tokens to complete its last character


class StopRules:
    """When a reply ends, besides a stop string (the detokenizer's): end of generation,
    ``max_tokens`` (a cut character is finished first), Stop, and a full context."""

    def __init__(self, backend: "Backend", params: SamplingParams, prompt_len: int,
                 cancel: threading.Event | None) -> None:
        self.eos = frozenset() if params.ignore_eos else backend.eos_ids
        self.n_ctx = backend.n_ctx
        self.max_tokens = params.limit
        self.prompt_len = prompt_len
        self.cancel = cancel
        self.extra = 0  # tokens past max_tokens spent finishing a character

    def room(self, generated: int) -> int:
        """The context's free positions after the prompt and ``generated`` tokens."""
        return self.n_ctx - self.prompt_len - generated

    def after(self, generated: int, detok: IncrementalDetokenizer) -> str | None:
        """The finish reason after the reply's ``generated``-th token, or None to go on."""
        if generated >= self.max_tokens + self.extra:
            # Cut inside a character: finish it (a UTF-8 character is at most
            # 4 bytes) rather than end the reply on half of one.
            if detok.incomplete and self.extra < FINISH_CHAR_TOKENS:
                self.extra += 1
            else:
                return "max_tokens"
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        # The newest token must be fed back before the next one: no room, no next.
        if self.prompt_len + generated > self.n_ctx:
            return "context_full"
        return None
