"""Incremental, UTF-8-safe detokenizer with stop-string holdback.

Tokens map to *bytes*, not text: a byte-level BPE splits one emoji or CJK
character over several tokens, and byte-fallback tokens (``<0xE4>``) carry a
single byte each. Decoding each token on its own would print U+FFFD
mid-stream. We feed bytes through an incremental UTF-8 decoder, which holds an
incomplete trailing sequence until the next token completes it, so the joined
deltas always equal the full decode.

Stop strings are handled on the text: any tail of the pending text that could
still grow into a stop string is held back until it either matches (the reply
ends before it) or stops matching (it is released).
"""
from __future__ import annotations

import codecs
from typing import Callable, Sequence


class IncrementalDetokenizer:
    """Turn a stream of token ids into safe text deltas.

    ``push(token_id)`` returns the text that can be shown now (maybe ``""``).
    After a stop string matches, ``stopped`` is True and ``stop_string`` holds
    it; the text before it has been returned and nothing after it ever is.
    ``flush()`` releases whatever is still held when the stream ends.
    """

    __slots__ = ("_bytes_of", "_decoder", "_stops", "_max_stop", "_pending", "_emitted",
                 "stopped", "stop_string")

    def __init__(self, token_bytes: Callable[[int], bytes], stop: Sequence[str] = ()) -> None:
        self._bytes_of = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stop if s)
        self._max_stop = max((len(s) for s in self._stops), default=0)
        self._pending = ""      # decoded text not yet released (stop-string holdback)
        self._emitted: list[str] = []
        self.stopped = False
        self.stop_string: str | None = None

    @property
    def text(self) -> str:
        """Everything released so far."""
        return "".join(self._emitted)

    def push(self, token_id: int) -> str:
        return self.push_bytes(self._bytes_of(token_id))

    def push_bytes(self, data: bytes) -> str:
        """Feed raw bytes; returns the text that is safe to show now."""
        if self.stopped:
            return ""
        piece = self._decoder.decode(data)
        if not self._stops:
            if piece:
                self._emitted.append(piece)
            return piece
        return self._release(self._pending + piece)

    def _release(self, text: str) -> str:
        # Earliest full match wins: the reply ends right before it.
        first = -1
        for s in self._stops:
            i = text.find(s)
            if i != -1 and (first == -1 or i < first):
                first, self.stop_string = i, s
        if first != -1:
            self.stopped = True
            self._pending = ""
            out = text[:first]
        else:
            hold = self._holdback(text)
            out, self._pending = text[:len(text) - hold], text[len(text) - hold:]
        if out:
            self._emitted.append(out)
        return out

    def _holdback(self, text: str) -> int:
        """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
        for n in range(min(len(text), self._max_stop - 1), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0

    @property
    def incomplete(self) -> bool:
        """True while the last bytes fed are the start of a character still missing its rest."""
        return bool(self._decoder.getstate()[0])

    def flush(self) -> str:
        """End of stream: release held text.

        A dangling partial UTF-8 sequence is dropped, not turned into U+FFFD:
        the stream was cut inside a character (max tokens, Stop), and half a
        character is not something the model wrote. Invalid bytes *inside*
        the stream still decode to U+FFFD, as the model produced them.
        """
        if self.stopped:
            return ""
        self._decoder.reset()
        out = self._pending
        self._pending = ""
        if out:
            self._emitted.append(out)
        return out
