"""What the model sees of a conversation that outgrew its context: the four policies, one name
each everywhere (``EngineConfig``/``Engine.stream``'s ``context_policy``, Settings, ``engine chat``,
the API), and the view they make.

- ``stop``: nothing is left out; a conversation too long is refused (PromptTooLongError) and a
  reply that fills the context ends ("context_full").
- ``drop_oldest``: the oldest turns are left out in one larger step (down to ``TARGET`` of the
  context), so the turns after it find their prefix in the KV again; the view then stays put
  until the conversation outgrows it again. The one policy every backend and profile can run.
- ``shift``: the same cut, but the KV of the turns kept is moved into place instead of read
  again (engine/kv/shift.py: llama.cpp's context shift and cache reuse). Not bit-identical to
  reading the shorter conversation: the exact profile and backends that cannot shift drop instead.
- ``compact``: the turns the cut leaves out are summarized by the model itself, and the summary
  takes their place (engine/prompt/summary.py).

The system prompt and pinned messages (``Message.pinned``) are never left out. A reply that
fills the context mid-answer goes on (engine/decode/room.py) under every policy but ``stop``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..errors import HearthError
from .messages import Message

CONTEXT_POLICIES = ("stop", "drop_oldest", "shift", "compact")
# After a cut, the view fills at most this share of the context (and never more than the room left
# for the reply): one larger step, then turns that hit the prefix cache until the next.
TARGET = {"drop_oldest": 0.5, "compact": 0.5, "shift": 0.65}
MIN_ROOM = 32  # a cut mid-reply must leave at least this many free positions to be worth making


def check_policy(policy: str) -> str:
    """``policy`` if it is one of CONTEXT_POLICIES; HearthError naming them otherwise."""
    if policy not in CONTEXT_POLICIES:
        raise HearthError(f"unknown context policy {policy!r}; choose one of {', '.join(CONTEXT_POLICIES)}")
    return policy


def target_tokens(policy: str, n_ctx: int, room: int) -> int:
    """How many tokens the view may take after a cut under ``policy``."""
    return max(1, min(room, int(n_ctx * TARGET.get(policy, TARGET["drop_oldest"]))))


@dataclass(slots=True, frozen=True)
class Cut:
    """Where a conversation was cut: the merged messages (``as_messages``), how many lead it and always
    stay (the system prompt: ``head``), and the first message after the cut (``n``; ``head``: nothing
    left out). ``origin[i]``: the index, in the caller's list, of merged message ``i``'s first message."""
    messages: tuple[Message, ...]
    head: int
    n: int
    origin: tuple[int, ...] = field(default=())

    @property
    def left_out(self) -> list[Message]:
        """The messages the cut leaves out (pinned ones, and their turns' partners, stay in the view)."""
        keep = set(pinned_turns(self.messages, self.head, self.n))
        return [m for i, m in enumerate(self.messages[self.head:self.n], self.head) if i not in keep]

    @property
    def view_start(self) -> int:
        """The index, in the caller's list, of the first message after the cut (0: nothing left out)."""
        if self.n <= self.head or not self.origin:
            return 0
        return self.origin[self.n] if self.n < len(self.origin) else len(self.origin)

    def view(self, summary: Message | None = None) -> list[Message]:
        """What the model sees: the head, the pinned messages the cut passed, the summary of what it
        left out (compaction), then every message after the cut."""
        msgs = self.messages
        pinned = [msgs[i] for i in pinned_turns(msgs, self.head, self.n)]
        return [*msgs[:self.head], *pinned, *([summary] if summary is not None else []), *msgs[self.n:]]


def pinned_turns(msgs: Sequence[Message], start: int, end: int) -> list[int]:
    """The indices in ``msgs[start:end]`` a cut keeps: each pinned message with its turn's partner (a pinned
    question keeps its answer, a pinned answer its question). A whole turn keeps the roles alternating, as
    strict templates want; and a pinned question left alone would merge into the next kept one, changing
    its tokens, so the KV after it could not be moved into place (engine/kv/shift.py)."""
    keep: set[int] = set()
    for i in range(start, end):
        if not msgs[i].pinned:
            continue
        keep.add(i)
        if msgs[i].role == "user" and i + 1 < end and msgs[i + 1].role == "assistant":
            keep.add(i + 1)
        elif msgs[i].role == "assistant" and i - 1 >= start and msgs[i - 1].role == "user":
            keep.add(i - 1)
    return sorted(keep)


def cut_points(msgs: Sequence[Message], head: int) -> list[int]:
    """Where a cut may go: before a user turn, never before the newest message (always a choice)."""
    return [i for i in range(head + 1, len(msgs) - 1) if msgs[i].role == "user"] + [len(msgs) - 1]


def head_of(msgs: Sequence[Message]) -> int:
    """How many messages lead the conversation and always stay: the system prompt's one, if any."""
    return 1 if msgs and msgs[0].role == "system" else 0
