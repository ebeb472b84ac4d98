"""The status bar's context meter: how full the context was at a conversation's last reply,
and where that reply's view of the conversation began when its oldest turns were left out. Qt-free."""
from __future__ import annotations

from app.core.store import StoredMessage


def context_cut(messages: list[StoredMessage]) -> tuple[int, int] | None:
    """Where the latest reply's view of the conversation began, when turns were left out:
    (id of the first message the model still saw, how many messages are shown above it).

    The engine counts left-out messages as it saw them: the replies' prompt holds
    only messages with text (see ``_history``), and turns of one role side by side
    are merged into one. The same walk here finds the message it means.
    """
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].role == "assistant" and messages[i].metrics), None)
    if last is None:
        return None
    dropped = messages[last].metrics.get("dropped_messages") or 0
    if not dropped:
        return None
    seen, role = 0, None
    for j, m in enumerate(messages[:last]):
        if not m.content and not m.tool_calls:
            continue
        if m.role != role or m.role not in ("user", "assistant"):
            if seen == dropped:
                return m.id, j
            seen, role = seen + 1, m.role
    return None


def context_use(metrics: dict | None, loaded_ctx: int = 0) -> tuple[str, str]:
    """The context meter's text and tooltip for a reply's metrics ('' when they do not say).

    ``loaded_ctx``: the context of the model loaded now (0: none is). The meter measures
    against it, so that loading another model shows its size at once; the tooltip says when
    the last reply was written with another context."""
    m = metrics or {}
    written_ctx = m.get("n_ctx") or 0
    if not written_ctx:
        return "", ""
    n_ctx = loaded_ctx or written_ctx
    prompt, reply = m.get("prompt_tokens", 0), m.get("generated_tokens", 0)
    if n_ctx == written_ctx:
        tip = (f"The last reply in this conversation used {prompt + reply:,} of the model's {n_ctx:,}-token "
               f"context: the conversation as the model saw it ({prompt:,} tokens) and the reply ({reply:,}).")
    else:
        tip = (f"The last reply in this conversation used {prompt + reply:,} tokens of the {written_ctx:,}-token "
               f"context it was written with: the conversation as the model saw it ({prompt:,} tokens) and the "
               f"reply ({reply:,}). The model loaded now has a {n_ctx:,}-token context; the next reply is "
               "counted with it.")
    dropped = m.get("dropped_messages") or 0
    if dropped:
        tip += (f"\nThe conversation had outgrown the context, so its {dropped:,} oldest messages were left "
                "out (the system prompt was kept); the chat marks where.")
    else:
        tip += ("\nWhen a conversation outgrows it, its oldest messages are left out (the system prompt "
                "stays), or Hearth stops and says so: Settings → Sampling.")
    return f"Context {prompt + reply:,} / {n_ctx:,}", tip
