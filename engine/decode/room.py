"""A reply that fills the context goes on: the view of the conversation moves, the reply stays.

When the reply's next token would not fit (llama-server's test: the tokens in the KV and one
more reach the context), the keeper makes room under the request's context policy
(engine/prompt/view.py) and the reply goes on, with a plain step generator from where it was (as
a tool call drawn again does, engine/decode/resample.py), up to its ``max_tokens``:

- a cut that leaves more of the oldest turns out (never the system prompt, a pinned message or
  the newest message; the next turn keeps it): under ``shift`` the KV of what stays is moved into
  place (llama-server's cache reuse), under the others what follows the cut is read again;
- with no turn left to leave out, a reply with a ``max_tokens`` gets llama-server's own context
  shift: the head (everything before the newest message's words) stays, half of the rest is
  discarded, the other half moved back (``shift``) or read again (the others). A reply with no
  ``max_tokens`` ends "context_full" there instead: it would be discarding its own question.

Moving KV is not what reading gives: only ``shift`` in the fast profile moves it, and the slot
table marks the sequence (engine/kv/slots.py) so that no other request is served from it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..kv.prefix_cache import common_prefix_len
from ..kv.shift import Move, context_shift, reuse_moves
from ..inputs.media import whole
from .generate import Steering, Steps, generate_step

if TYPE_CHECKING:
    from ..core.lease import TrackedView
    from .metrics import GenerationStats
    from .prepare import Prepared
    from .resample import Redraws
    from .stop_rules import StopRules


class RoomKeeper:
    """One reply's room in the context: ``full`` says when its next token would not fit, ``make``
    moves the view and gives the step generator that goes on."""

    def __init__(self, view: "TrackedView", req: "Prepared", history: list[int],
                 sampler: Callable[[Sequence[int], np.ndarray], int], steer: Steering | None,
                 stats: "GenerationStats", *, shift: bool) -> None:
        self.view, self.req, self.history, self.sampler, self.steer = view, req, history, sampler, steer
        self.stats, self.shift = stats, shift
        self.cut = req.cut
        self.messages = list(req.messages)
        self.n_ctx = view.n_ctx
        self.times = self.discarded = 0
        self._note: int | None = None  # where the reply's note on it sits in stats.notes

    def full(self, prompt_len: int, generated: int) -> bool:
        """Whether the reply's newest token (its ``generated``-th, not fed yet) leaves no room for the
        one after it; ``prompt_len``: the view's tokens before the reply."""
        return prompt_len + generated >= self.n_ctx

    def check(self, steps: Steps, generated: list[int], rules: "StopRules",
              redraws: "Redraws") -> tuple[Steps, str | None]:
        """After each token: room made where the next would not fit (``make``). A failed tool call is then
        no longer drawn again: its section no longer sits where it was drawn."""
        if not self.full(rules.prompt_len, len(generated)):
            return steps, None
        redraws.rewind = None
        return self.make(steps, generated, rules)

    def make(self, steps: Steps, generated: list[int], rules: "StopRules") -> tuple[Steps, str | None]:
        """Room for the reply to go on: (the step generator from here, None), or (``steps``,
        "context_full") where none can be made."""
        t0 = time.perf_counter()
        hist = self.history
        plan = self._recut(generated) or self._discard()
        if plan is None:
            return steps, "context_full"
        steps.close()  # a speculative round leaves its KV at what it yielded
        new, moves = plan
        pending, moved = self._place(new, moves)
        hist[:] = new
        rules.prompt_len = len(hist) - len(generated)
        st = self.stats
        st.context_policy = st.context_policy or ("shift" if moved else self.req.policy)
        st.shifted_tokens += moved
        st.reread_tokens += len(pending) - 1
        st.context_ms += (time.perf_counter() - t0) * 1e3
        self._say()
        return generate_step(pending, self.sampler, hist, self.steer, prompt=True), None

    def _say(self) -> None:
        """The reply's one note on making room, kept current."""
        self.times += 1
        st = self.stats
        how = "moved into place" if self.shift else "read again"
        text = (f"the context filled mid-reply ({self.times}×): {st.dropped_messages} of the oldest messages are "
                f"left out, what stays was {how}")
        if self.discarded:
            text += f"; {self.discarded} tokens before the reply's end were discarded (its question among them)"
        if self._note is None:
            self._note = len(st.notes)
            st.notes.append(text)
        else:
            st.notes[self._note] = text

    def _recut(self, generated: list[int]) -> tuple[list[int], list[Move] | None] | None:
        """The view with more of the oldest turns left out, and the reply so far after it."""
        req = self.req
        if self.cut is None or req.builder is None:
            return None
        policy = "drop_oldest" if req.policy == "compact" else req.policy
        got = req.builder.deeper(self.cut, policy, len(generated), req.template_kwargs)
        if got is None or got.cut is None:
            return None
        st = self.stats
        st.dropped_messages += got.dropped - len(self.cut.left_out)
        self.cut, self.messages = got.cut, got.messages
        st.view_start = got.cut.view_start
        return got.tokens + generated, None

    def _discard(self) -> tuple[list[int], list[Move] | None] | None:
        """llama-server's context shift: the head stays, half of the rest is discarded."""
        req = self.req
        if req.params.max_tokens is None:
            return None
        if req.builder is None or not self.messages:
            return None
        keep = req.builder.keep_tokens(self.messages, req.template_kwargs)
        hist = self.history
        move = context_shift(len(hist) - 1, keep, self.n_ctx)
        if move is None:
            return None
        src, dst, _n = move
        self.discarded += src - dst
        return hist[:dst] + hist[src:], [move]

    def _place(self, new: list[int], moves: list[Move] | None) -> tuple[list[int], int]:
        """Make the sequence hold a prefix of ``new`` (all but its last token at most): moved into place
        where the reply shifts, else cut back to what it shares with it. (what is left to read, tokens moved)"""
        view, hist = self.view, self.history
        held = min(view.kv_len, len(hist) - 1)
        view.truncate(held)
        old = hist[:held]
        start = whole(new, min(common_prefix_len(old, new), len(new) - 1))
        if self.shift and view.pool.can_shift(view.seq):
            if moves is None:
                moves, _n = reuse_moves(old, new, start)
            if moves:
                view.move(moves, new[:moves[-1][1] + moves[-1][2]])
                n = view.kv_len
                return new[n:], sum(m[2] for m in moves if m[0] != m[1])
        view.truncate(start)
        return new[start:], 0


def prompt_fit(stats: "GenerationStats", req: "Prepared", moved: int, *, fast: bool) -> None:
    """What fitting the prompt did, in the reply's stats: the policy that acted, where the view
    begins, what it moved or summarized and what that cost (nothing when the prompt fit whole)."""
    done = req.compaction
    if done is not None:
        stats.context_policy, stats.view_start = "compact", done.view_start
        stats.summarized_messages, stats.summary, stats.context_ms = done.summarized, done.summary, done.ms
        stats.notes.append(f"{done.summarized} of the oldest messages were summarized to fit the context "
                           f"({done.ms / 1e3:.1f} s)")
    elif req.cut is not None and req.dropped:
        # A later turn under the same cut reads its KV, moved before: still the shift's view.
        stats.context_policy = "shift" if moved or (fast and req.policy == "shift") else "drop_oldest"
        stats.view_start = req.cut.view_start
    stats.shifted_tokens = moved


def keeper_for(view: "TrackedView", req: "Prepared", history: list[int], sampler: Any, steer: Steering | None,
               stats: "GenerationStats", *, fast: bool) -> RoomKeeper | None:
    """The reply's keeper, or None under ``stop`` (a reply that fills the context ends there).
    ``fast``: the backend runs the fast profile, the only one that may move KV."""
    if req.policy == "stop":
        return None
    return RoomKeeper(view, req, history, sampler, steer, stats, shift=fast and req.policy == "shift")
