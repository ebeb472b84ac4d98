"""What the model sees of a conversation, for the window. Qt-free.

- ``model_view``: the messages a reply is given: the stored ones (with text or tool calls), the
  pinned ones flagged, and the summary compaction wrote in the place of the messages it stands
  for; with each one's stored id, so the generation worker can say which stored messages a new
  summary stands for and where the model's view began (``view_from`` in the reply's metrics).
- ``divider``: where the chat marks that the model's view begins, and the summary shown there.
- ``context_use``: the status bar's meter: how full the context was at the last reply, what was
  left out and what summarized, which policy acted and what it cost.

No stored message is ever removed by any of it: only the model's view changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from app.core.store import StoredMessage, Summary
from engine.prompt import Message, pinned_turns, summary_message

POLICY_WORDS = {"drop_oldest": "dropped in steps", "shift": "shifted (moved in the KV cache, not read again)",
                "compact": "summarized by the model"}


def model_view(stored: list[StoredMessage], summary: Summary | None,
               to_message: Callable[[StoredMessage], Message]) -> tuple[list[Message], list[int | None]]:
    """The messages a reply in this branch is given (``stored``: the branch, oldest first) and each one's
    stored id (None for the summary). Cut-short replies stay: the user saw them, so the model should too."""
    msgs = [m for m in stored if m.content or m.tool_calls]
    out: list[Message] = []
    ids: list[int | None] = []
    start = 0
    at = next((i for i, m in enumerate(msgs) if summary is not None and m.id == summary.upto_id), None)
    if summary is not None and at is not None:
        for i in pinned_turns(msgs, 0, at + 1):  # never summarized: they keep their place before the summary
            out.append(to_message(msgs[i]))
            ids.append(msgs[i].id)
        out.append(summary_message(summary.text))
        ids.append(None)
        start = at + 1
    for m in msgs[start:]:
        out.append(to_message(m))
        ids.append(m.id)
    return out, ids


def covered(ids: list[int | None], view_start: int) -> tuple[int | None, int]:
    """For a summary the engine wrote of a request's messages before ``view_start``: the stored id of the
    last message it stands for, and how many stored messages (pinned ones included: they stay) that is."""
    before = [i for i in ids[:view_start] if i is not None]
    return (before[-1] if before else None), len(before)


@dataclass(slots=True, frozen=True)
class Divider:
    """Where the model's view begins: above message ``before``; ``summary`` is shown just below it."""
    before: int
    text: str
    tip: str
    summary: Summary | None = None


def _last_metrics(messages: list[StoredMessage]) -> tuple[int, dict] | None:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.metrics:
            return i, m.metrics
    return None


def divider(messages: list[StoredMessage], summary: Summary | None) -> Divider | None:
    """The chat's divider for the branch ``messages``: after a summary (the next reply is given it), or
    where the last reply's view began when its oldest messages were left out (None: the model sees all)."""
    last = _last_metrics(messages)
    cut = context_cut(messages)
    ids = [m.id for m in messages]
    after = None
    if summary is not None and summary.upto_id in ids:
        nxt = ids.index(summary.upto_id) + 1
        after = ids[nxt] if nxt < len(ids) else None
    if after is not None and (cut is None or ids.index(cut[0]) <= ids.index(after)):
        above = ids.index(after)
        pinned = sum(1 for m in messages[:above] if m.pinned)
        kept = f", and the {pinned} pinned" if pinned else ""
        text = f"— the model reads the summary below instead of the {summary.covers - pinned:,} messages above —"
        tip = ("The conversation outgrew the model's context, so the model summarized its oldest messages. It is "
               f"given the system prompt{kept}, this summary and what follows. Every message stays here; edit the "
               "summary to change what the model remembers.")
        return Divider(after, text, tip, summary)
    if cut is None or last is None:
        return None
    n_ctx = last[1].get("n_ctx", 0)
    what = "1 earlier message is" if cut[1] == 1 else f"{cut[1]:,} earlier messages are"
    how = POLICY_WORDS.get(last[1].get("context_policy") or "drop_oldest", "left out")
    tip = (f"The conversation outgrew the model's context window ({n_ctx:,} tokens), so the last reply was written "
           f"without the messages above this line ({how}); the system prompt and pinned messages were kept. "
           "They stay here and in the history.")
    return Divider(cut[0], f"— {what} outside the model's context —", tip)


def context_cut(messages: list[StoredMessage]) -> tuple[int, int] | None:
    """Where the latest reply's view of the conversation began, when turns were left out:
    (id of the first message the model still saw, how many messages are shown above it and were
    left out: pinned ones are not). From the reply's ``view_from`` (the stored id the worker noted);
    replies stored before it count left-out messages as the engine saw them, merged."""
    found = _last_metrics(messages)
    if found is None:
        return None
    last, metrics = found
    if metrics.get("view_from") is not None:
        ids = [m.id for m in messages[:last]]
        if metrics["view_from"] not in ids:
            return None
        j = ids.index(metrics["view_from"])
        return metrics["view_from"], sum(1 for m in messages[:j] if (m.content or m.tool_calls) and not m.pinned)
    dropped = metrics.get("dropped_messages") or 0
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


def context_use(metrics: dict | None, loaded_ctx: int = 0, exact: bool = True) -> tuple[str, str]:
    """The context meter's text and tooltip for a reply's metrics ('' when they do not say).

    ``loaded_ctx``: the context of the model loaded now (0: none is). The meter measures
    against it, so that loading another model shows its size at once; the tooltip says when
    the last reply was written with another context. ``exact``: the loaded engine counts tokens
    with its model's tokenizer (``Capabilities.exact_tokens``); where it cannot (a server without a
    way to count them) the meter is marked as an estimate, once, and its tooltip says why."""
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
    text = f"Context {'' if exact else '≈'}{prompt + reply:,} / {n_ctx:,}"
    if not exact:
        tip += ("\nThe model's server cannot count tokens for Hearth, so counts made on this side are estimates "
                "(about 4 characters a token); a reply's own figures are the server's where it reports them.")
    dropped, summarized = m.get("dropped_messages") or 0, m.get("summarized_messages") or 0
    if summarized:
        text += f" · {summarized:,} summarized"
        tip += (f"\nThe conversation had outgrown the context, so the model summarized its {summarized:,} oldest "
                f"messages ({m.get('context_ms', 0.0) / 1e3:.1f} s); the summary stands in their place in the chat.")
    if dropped:
        text += f" · {dropped:,} left out"
        moved = m.get("shifted_tokens") or 0
        how = (f", and what stayed was moved in the KV cache ({moved:,} tokens) instead of read again"
               if m.get("context_policy") == "shift" else "")
        tip += (f"\nThe conversation had outgrown the context, so its {dropped:,} oldest messages were left "
                f"out (the system prompt and pinned messages were kept){how}; the chat marks where.")
    if m.get("reread_tokens"):
        tip += f"\nThe reply filled the context and went on: {m['reread_tokens']:,} tokens were read again."
    if not dropped and not summarized:
        tip += ("\nWhen a conversation outgrows it, its oldest messages are dropped in steps, shifted, "
                "summarized, or Hearth stops and says so: Settings → Sampling. Pinned messages always stay.")
    return text, tip


POLICY_NAMES = {"drop_oldest": "drop the oldest (in steps)", "shift": "shift", "compact": "compact"}


def context_lines(m: dict | None) -> list[str]:
    """A reply's Details on fitting the context: which policy acted and what it cost ([] when none did)."""
    m = m or {}
    policy = m.get("context_policy") or ""
    if not policy:
        return []
    said = []
    if m.get("summarized_messages"):
        said.append(f"{m['summarized_messages']:,} oldest messages summarized ({m.get('context_ms', 0.0) / 1e3:.1f} s)")
    if m.get("dropped_messages"):
        said.append(f"{m['dropped_messages']:,} oldest messages left out")
    if m.get("shifted_tokens"):
        said.append(f"{m['shifted_tokens']:,} tokens moved in the KV cache instead of read again")
    if m.get("reread_tokens"):
        said.append(f"{m['reread_tokens']:,} tokens read again when the reply filled the context")
    return [f"Context policy: {POLICY_NAMES.get(policy, policy)} — " + "; ".join(said or ["nothing left out"])]
