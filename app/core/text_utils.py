"""Small Qt-free helpers for what the window shows: code blocks, metrics lines, reply notes."""
from __future__ import annotations

import re

from app.core.md_segments import Segmenter, closes, opens
from engine import from_server

_EOL = re.compile(r"\r\n|\r|\n")

# What each way a reply can end means to the user. Which endings are complete is
# engine.metrics.FINISH_REASONS' to say; the others are "incomplete" and keep this note
# ("error" is the window's own: the reply raised).
FINISH_NOTES = {
    "cancelled": "Stopped — this reply is incomplete.",
    "max_tokens": "Reached the reply length limit (Max tokens in Settings) — incomplete.",
    "context_full": "The context window is full — start a new conversation or raise the context length.",
    "error": "Failed — this reply is incomplete.",
}


def code_blocks(markdown: str) -> list[str]:
    """The contents of every fenced code block, in order (an unclosed fence runs to the end)."""
    blocks: list[str] = []
    fence: str | None = None
    body: list[str] = []
    lines = _EOL.split(markdown)
    if lines[-1] == "":
        lines.pop()  # the text ended its last line
    for line in lines:
        if fence is None:
            fence, body = opens(line), []
        elif closes(fence, line):
            blocks.append("\n".join(body))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        blocks.append("\n".join(body))
    return blocks


def segment_bounds(markdown: str, start: int, min_chars: int) -> list[int]:
    """Offsets where ``markdown`` (from ``start``) can be cut into standalone pieces,
    each at least ``min_chars`` long, never inside a code block (see app.core.md_segments)."""
    seg = Segmenter(min_chars)
    cuts = seg.feed(markdown[start:]) + seg.finish()
    return [start + c.pos for c in cuts]


def finish_note(complete: bool, finish_reason: str | None, error: str | None) -> str:
    """The line shown under a reply that did not end naturally ('' when it did)."""
    if complete:
        return ""

    if finish_reason is None:
        return "Interrupted — Hearth closed while this reply was being written; it is incomplete."
    if finish_reason == "error" and error:
        return f"Failed: {error} — this reply is incomplete."
    return FINISH_NOTES.get(finish_reason, f"Incomplete ({finish_reason}).")


def metrics_line(m: dict | None) -> str:
    """One readable line of a reply's metrics (GenerationStats.as_dict())."""
    if not m:
        return "No metrics for this message."
    remote = from_server(m)  # a server's reply: its prompt and prefill only where it said them
    parts = [f"{m.get('generated_tokens', 0)} tokens",
             f"{m.get('decode_tok_s', 0.0):.1f} tok/s",
             f"TTFT {m.get('ttft_ms', 0.0):.0f} ms",
             f"prompt {m.get('prompt_tokens', 0)} (cached {m.get('cached_tokens', 0)})"
             if m.get("prompt_tokens") or not remote else "",
             f"prefill {m.get('prefill_ms', 0.0):.0f} ms" if m.get("prefill_ms") or not remote else "",
             f"total {m.get('e2e_ms', 0.0) / 1000:.2f} s",
             f"ended: {m.get('finish_reason', '?')}"]
    parts = [p for p in parts if p]
    spec = m.get("spec")
    if spec and spec.get("drafted"):  # 0 drafted: speculation chose plain decoding
        parts.append(f"draft acceptance {100 * spec['acceptance_rate']:.0f}%")
    if remote:
        parts.append("on its server")
    elif m.get("backend"):
        parts.append(m["backend"] + (f", {m['profile']} profile" if m.get("profile") else ""))
    return " · ".join(parts)


MODE_NAMES = {"ngram": "n-gram drafts", "model": "the draft model", "plain": "plain decoding"}


def speculation_lines(m: dict | None) -> list[str]:
    """What speculation did in a reply: the tokens each mode produced, and each
    switch of the controller with its reason (the engine's notes)."""
    spec = (m or {}).get("spec") or {}
    modes = spec.get("tokens_by_mode") or {}
    if not modes:
        return []
    made = ", ".join(f"{n}{' tokens' if not i else ''} from {MODE_NAMES.get(mode, mode)}" for i, (mode, n) in
                     enumerate(sorted(modes.items(), key=lambda kv: -kv[1])))
    line = f"Speculation: {made}"
    if spec.get("drafted"):
        line += (f"; {spec['accepted']} of {spec['drafted']} drafts accepted, "
                 f"{spec.get('target_passes_per_token', 0.0):.2f} target passes per token")
    return [line, *(f"· {str(n)[:1].upper()}{str(n)[1:]}" for n in spec.get("notes") or ())]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
