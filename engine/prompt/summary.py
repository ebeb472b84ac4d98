"""Compaction: the oldest part of a conversation summarized by the loaded model itself.

Under the ``compact`` policy (engine/prompt/view.py) the turns a cut leaves out are given to the
model, with the instruction below, as one request like any other (the engine core runs it; its
prompt starts with what the conversation's KV already holds, so reading it costs little), and
its greedy reply takes their place: ``summary_message`` as a user turn after the system prompt and
the pinned messages (a strict template then still alternates: it merges into the next user turn).
The caller is told (the "context" event and the reply's stats), so the window keeps the summary
as a message of its own that the user can read and edit, and sends it back instead of the turns.

The same turns give the same summary: the engine keeps the last few (``Summaries``), so an API
client that sends the whole conversation every time pays for one summary per cut, not per request.
"""
from __future__ import annotations

import collections
import hashlib
import json
from typing import Any, Mapping, Sequence

from ..types import SamplingParams
from .messages import Message
from .view import Cut, pinned_turns

SUMMARY_HEAD = "Summary of the earlier part of this conversation:"
INSTRUCTION = ("Write a summary of the conversation so far, for yourself, to go on with it without "
               "its messages. Keep every fact, name, number, decision, instruction and open question; "
               "leave out greetings and small talk. Write only the summary, at most {words} words.")
KEPT = 16  # summaries the engine keeps, newest first


def summary_tokens(n_ctx: int) -> int:
    """The longest summary: an eighth of the context, between 64 and 512 tokens."""
    return max(64, min(512, n_ctx // 8))


def summary_params(n_ctx: int) -> SamplingParams:
    """Greedy, so the same turns give the same summary; repetition gently discouraged."""
    return SamplingParams(temperature=0.0, max_tokens=summary_tokens(n_ctx), repeat_penalty=1.1)


def summary_request(cut: Cut, n_ctx: int) -> list[Message]:
    """What the model is asked: the conversation up to the cut (as it was read: its KV is reused), then
    the instruction."""
    words = max(40, summary_tokens(n_ctx) * 3 // 5)
    return [*cut.messages[:cut.n], Message("user", INSTRUCTION.format(words=words))]


def summary_message(text: str) -> Message:
    """The summary as the model sees it in the place of the turns it stands for."""
    return Message("user", f"{SUMMARY_HEAD}\n{text.strip()}")


def summary_text(message: Message) -> str | None:
    """The summary a message carries (``summary_message``'s inverse), else None."""
    if message.role != "user" or not message.content.startswith(SUMMARY_HEAD):
        return None
    return message.content[len(SUMMARY_HEAD):].strip()


def compacted(messages: Sequence[Message], view_start: int, summary: str) -> list[Message]:
    """A caller's conversation after a compaction that summarized its messages before ``view_start``
    (``engine chat`` keeps its history so): the system prompt, the pinned messages, the summary,
    then the rest. Nothing the caller shows its user is taken from here."""
    head = 1 if messages and messages[0].role == "system" else 0
    pinned = [messages[i] for i in pinned_turns(messages, head, view_start)]
    return [*messages[:head], *pinned, summary_message(summary), *messages[view_start:]]


class Summaries:
    """The last few summaries, by the turns they stand for (and the template's variables)."""

    def __init__(self) -> None:
        self._kept: collections.OrderedDict[str, str] = collections.OrderedDict()

    @staticmethod
    def key(cut: Cut, template_kwargs: Mapping[str, Any] | None) -> str:
        data = [[m.role, m.content, m.reasoning, [t.as_dict() for t in m.tool_calls]] for m in cut.messages[:cut.n]]
        raw = json.dumps([data, sorted((template_kwargs or {}).items(), key=lambda i: i[0])], default=str)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        text = self._kept.get(key)
        if text is not None:
            self._kept.move_to_end(key)
        return text

    def put(self, key: str, text: str) -> None:
        self._kept[key] = text
        self._kept.move_to_end(key)
        while len(self._kept) > KEPT:
            self._kept.popitem(last=False)
