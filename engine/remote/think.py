"""A thinking model's reasoning, split from the answer on this side when the server does not split it.

llama-server, vLLM and Hearth send reasoning apart (``reasoning_content``); a
server that does not sends the block inline, as ``<think>...</think>`` (the tags
DeepSeek-R1, Qwen3, QwQ and most open thinking models write). The tags may arrive
split across chunks, so the splitter holds back text that could be the start of one.
"""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


class ThinkSplitter:
    """Feed content chunks; get ``("reasoning" | "delta", text)`` pieces. Only a reply that starts
    with the open tag (after white space) has reasoning; any other passes through whole."""

    def __init__(self) -> None:
        self.state = "start"   # start -> (inside -> after) | after
        self.held = ""

    @property
    def inside(self) -> bool:
        return self.state == "inside"

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self.held += text
        while self.held:
            if self.state == "start":
                stripped = self.held.lstrip()
                if stripped.startswith(OPEN):
                    self.held, self.state = stripped[len(OPEN):].lstrip("\n"), "inside"
                elif OPEN.startswith(stripped):
                    break  # maybe the tag, not whole yet
                else:
                    self.state = "after"
            elif self.state == "inside":
                i = self.held.find(CLOSE)
                if i >= 0:
                    if i:
                        out.append(("reasoning", self.held[:i]))
                    self.held, self.state = self.held[i + len(CLOSE):].lstrip("\n"), "after"
                    continue
                keep = _partial_tail(self.held, CLOSE)
                if len(self.held) > keep:
                    out.append(("reasoning", self.held[:len(self.held) - keep]))
                    self.held = self.held[len(self.held) - keep:]
                break
            else:
                out.append(("delta", self.held))
                self.held = ""
        return out

    def close(self) -> list[tuple[str, str]]:
        """What is still held at the end of the reply."""
        held, self.held = self.held, ""
        if not held:
            return []
        return [("reasoning" if self.state == "inside" else "delta", held)]


def _partial_tail(text: str, tag: str) -> int:
    """How many of ``text``'s last characters could begin ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
