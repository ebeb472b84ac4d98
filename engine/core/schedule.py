"""What each step of the engine core runs: pure rules over the requests in flight.

Each step is one batch. First every decoding sequence's pending tokens (its next
token, or a speculative round's drafts to verify), whole; then prompt chunks under
the step's token budget, the highest priority first and, within a class, the
shortest prompt first, so a short request is not stuck behind a long one's prompt.

Priority classes (job.Priority): the window, interactive API requests, background
work. A request's class rises while it waits (``AGING_S`` a class, never above
interactive), so nothing starves. While the window's reply is in flight, others'
prompts wait, and others' decode steps join the window's only within ``share`` of
the window's own compute time (``Share``), so its time to first token and
tokens/s hold; otherwise every sequence decodes together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Sequence, TypeVar

from .job import Priority

AGING_S = 15.0       # seconds of waiting that raise a request by one class (not above INTERACTIVE)
WINDOW_SHARE = 0.1   # other work's compute per unit of the window's while the window's reply is in flight

K = TypeVar("K")


def effective(priority: int, waited_s: float, aging_s: float = AGING_S) -> float:
    """A request's class after ``waited_s`` seconds of waiting (lower runs first)."""
    if priority <= Priority.INTERACTIVE:
        return float(priority)
    return max(float(Priority.INTERACTIVE), priority - waited_s / aging_s)


@dataclass(slots=True)
class Want(Generic[K]):
    """A request's pending compute, as the step's plan sees it. ``left``: its tokens not computed
    yet; ``prompt``: prompt tokens (cut into chunks) rather than a decode step's (run whole)."""
    key: K
    priority: float
    left: int
    prompt: bool
    top: bool            # the window's own (never held back by the share)
    order: float = 0.0   # arrival, for ties


def plan_step(wants: Sequence[Want[K]], budget: int, *, others_decode: bool, others_prompts: bool,
              fit: Callable[[K, int], int]) -> list[tuple[K, int]]:
    """The step's rows: (request, tokens of its pending compute to run now). Decode steps run whole
    (their tokens count against ``budget`` but are never cut); prompts take what budget is left, in
    priority order. ``others_decode``/``others_prompts``: decode steps / prompts that are not the
    window's may run this step. ``fit(key, n)``: the most tokens up to ``n`` a prompt may take
    without splitting an image (0: none fit)."""
    rows: list[tuple[K, int]] = []
    left = budget
    for w in sorted((w for w in wants if not w.prompt), key=lambda w: (w.priority, w.order)):
        if w.top or others_decode:
            rows.append((w.key, w.left))
            left -= w.left
    prompts = sorted((w for w in wants if w.prompt), key=lambda w: (w.priority, w.left, w.order))
    for w in prompts:
        if left <= 0:
            break
        if not (w.top or others_prompts):
            continue
        n = fit(w.key, min(w.left, left))
        if n <= 0 and not rows:
            n = fit(w.key, w.left)  # an image longer than the budget, alone in the step: all of it
        if n > 0:
            rows.append((w.key, n))
            left -= n
    return rows


@dataclass(slots=True)
class Share:
    """Keeps other work within ``share`` of the window's compute while the window's reply runs.

    A step with the window's rows only is timed as the window's; a step that also carries others'
    rows costs them what it took beyond the window's recent steps. Others may join a step while
    what they cost so far is within ``share`` of the window's time."""
    share: float = WINDOW_SHARE
    window_s: float = 0.0
    others_s: float = 0.0
    _recent: float | None = None   # the window's recent step time (exponential mean)
    _active: bool = field(default=False)

    def allows(self, window_active: bool) -> bool:
        """Whether others' rows may join this step (the window's first steps run alone: they
        measure what a step of the window's costs)."""
        if not window_active:
            self._active = False
            self.window_s = self.others_s = 0.0
            self._recent = None
            return True
        self._active = True
        return self._recent is not None and self.others_s <= self.share * self.window_s

    def record(self, seconds: float, *, window: bool, others: bool) -> None:
        """A step took ``seconds``; it carried the window's rows and/or others'."""
        if not self._active or not window:
            return
        if not others:
            self._recent = seconds if self._recent is None else 0.8 * self._recent + 0.2 * seconds
            self.window_s += seconds
            return
        mine = self._recent if self._recent is not None else seconds
        self.window_s += min(mine, seconds)
        self.others_s += max(0.0, seconds - mine)
