"""The free draft's gate: whether, and how much of, a proposal that costs nothing to make (the
n-gram lookup, asked every round) is worth verifying this round.

A copied draft is accepted as far as the text goes on copying, which its match length predicts
(``MATCH_CLASSES``, learnt per class from the engine's own rounds); verifying k drafts costs
what this machine measured (a line through the longer passes, the short ones as measured). Each
reply keeps its own state (``FreeRun``); what is learnt is the controller's, shared by every
reply. ``SpecController`` (controller.py) is a ``FreeGate``: the mode and draft length of its
other drafts are chosen there.
"""
from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

__all__ = ["FreeGate", "FreeRun", "MATCH_CLASSES", "MATCH_PRIORS", "OPEN_MARGIN", "best_rate", "fit_line",
           "match_class"]

# Match lengths (tokens of context a copied draft continues), grouped: the
# acceptance of each class is learnt separately (``FreeGate._match_rates``).
MATCH_CLASSES = (0, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# Before a class is measured, a copy that has continued L tokens continues one more
# with probability (L + 1) / (L + 2) (Laplace's rule of succession): 0.75 after a
# 2-token match (often a coincidence), 0.97 after 32 (the place being copied). So
# the first long match of a reply that copies its input is verified at once.
MATCH_PRIORS = tuple((n + 1) / (n + 2) for n in MATCH_CLASSES)
# The gate opens where verifying is expected to beat the alternative by 5% and
# closes where it no longer beats it: a prediction at break-even is within its own
# noise, and verifying it would cost a pass of several steps for nothing.
OPEN_MARGIN = 1.05
SHORT_KS = 3  # verifying up to this many drafts costs at least what was measured at that k


@dataclass
class FreeRun:
    """One reply's own state of the free draft: how long its last verified copy ran (the next may grow
    from there), how many hits it has held back since it last verified one, whether its gate is open
    (the margin to open it is higher than to keep it open), and the notes it owes its reply. What
    the controller learns (costs, acceptance by match length, how long to hold back between probes)
    is shared by every reply; this is not: four sequences in one batch each copy their own text, one
    sequence's miss must not cut another's copy short, and each reply's notes are its own."""
    last_accepted: int = 0
    held: int = 0
    probing: bool = False
    gate_open: bool | None = None
    notes: list[str] = field(default_factory=list)


def match_class(length: int) -> int:
    """The index in ``MATCH_CLASSES`` of the longest class not longer than ``length``."""
    return bisect.bisect_right(MATCH_CLASSES, length) - 1


def fit_line(pts: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of seconds against k, the slope at least 0
    (a longer draft never costs less); ``pts`` must hold two different k."""
    n = len(pts)
    mk = sum(k for k, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    slope = max(0.0, sum((k - mk) * (t - mt) for k, t in pts) / sum((k - mk) ** 2 for k, _ in pts))
    return mt - slope * mk, slope


def best_rate(rates: Sequence[float], cost: Callable[[int], float]) -> tuple[int, float]:
    """The k in 1..len(rates) with the best expected tokens per unit of cost, and that rate."""
    best_k, best, expect, run = 1, 0.0, 1.0, 1.0
    for k, a in enumerate(rates, 1):
        run *= a
        expect += run
        r = expect / cost(k)
        if r > best:
            best_k, best = k, r
    return best_k, best


class FreeGate:
    """The free draft's half of the controller (``SpecController`` inherits it and holds its state)."""

    free: str | None
    gated: bool
    hold_probe: int
    hold_interval: int
    run: FreeRun
    grow: int
    free_k_max: int
    k_fixed: int | None
    current: str
    k: dict[str, int]
    rate: dict[str, float | None]
    rounds: dict[str, int]
    _plain_s: list[float]
    _cost: dict[str, list[tuple[int, float]]]
    _len_tries: list[int]
    _len_acc: list[int]

    if TYPE_CHECKING:
        def _fit(self, mode: str) -> tuple[float, float] | None: ...

        def _accept_rates(self, mode: str, k_cap: int, bucket: int | None = None) -> list[float]: ...

    def _match_rates(self, matched: int, k_cap: int) -> list[float]:
        """Acceptance at positions 1..k_cap of a draft copied after a ``matched``-token
        match: position i continues a ``matched + i - 1`` token match, and the rate of
        its length class is what this engine measured for that class, shrunk towards
        the class's prior (``MATCH_PRIORS``, two pseudo-tries), so a class not seen yet
        is trusted as far as its length says and two rejections bring it down. Pooling
        every position of a class keeps one rejection at position 12 from stopping k
        at 11 for good, as per-position rates did."""
        per_class = [(acc + 2 * prior) / (tries + 2)
                     for tries, acc, prior in zip(self._len_tries, self._len_acc, MATCH_PRIORS)]
        return [per_class[match_class(matched + i)] for i in range(k_cap)]

    def free_costs(self) -> tuple[float, float, float] | None:
        """``(c0, a, b)`` for the free draft: a plain step costs ``c0`` (the median
        recent one-token step), verifying k drafts ``a + b k``; None until measured.

        ``a`` and ``b`` are the least-squares line through its recent rounds of
        more than ``SHORT_KS`` drafts once there are three, their k spread over at
        least 4 (at least one plain step: a bigger batch never costs less). On a
        CPU that line is what the longer batches cost: feeding 5 tokens costs
        ~3.7 steps here, 17 tokens ~11, so a verified token costs ~0.65 of a step
        from k = 4 on; one slope through the plain step would make long copies
        look dearer than they are. Shorter passes cost what they measured
        (``_verify_cost``). Until the line is there, the slope is the median
        over the plain step of the longer passes (of any pass while there are
        none): a 2-token pass's 1.1 steps per token would make the first long
        copy look dearer than it is.
        """
        assert self.free is not None
        pts = [(k, t) for k, t in self._cost[self.free][-64:] if k]
        if not self._plain_s:
            fit = self._fit(self.free)
            return None if fit is None else (fit[0], fit[0], fit[1])
        if not pts:
            return None
        c0 = statistics.median(self._plain_s[-32:])
        long = [(k, t) for k, t in pts if k > SHORT_KS]  # shorter passes: _short_costs
        ks = [k for k, _ in long]
        if len(long) >= 3 and max(ks) - min(ks) >= 4:  # two single passes are too noisy for a line
            a, b = fit_line(long)
            return c0, max(c0, a), b
        return c0, c0, max(0.0, statistics.median((t - c0) / k for k, t in long or pts))

    def _verify_cost(self, a: float, b: float) -> Callable[[int], float]:
        """Seconds to verify k free drafts: the line ``a + b k``, or more where a short
        pass measured more (``_short_costs``)."""
        short = self._short_costs()
        return lambda k: max(a + b * k, short.get(k, 0.0))

    def _short_costs(self) -> dict[int, float]:
        """The median recent seconds of verifying exactly 1, 2 or 3 drafts. A CPU
        changes kernels past one token: a pass of 2 tokens costs ~2.1 steps here, more
        than the line through longer passes says (~1.8), and a 1-token draft, which
        brings at most 2 tokens, would look worth verifying when it never is. So for
        these k the cost is at least what was measured at that k."""
        assert self.free is not None
        by_k: dict[int, list[float]] = {}
        for k, t in self._cost[self.free][-64:]:
            if k <= SHORT_KS:
                by_k.setdefault(k, []).append(t)
        return {k: statistics.median(ts) for k, ts in by_k.items()}

    def seed_costs(self, step: float, verify: dict[int, float]) -> None:
        """Start the free draft's cost line from a measurement (``measure_verify_costs``):
        one plain step, and the seconds to verify each k drafts. Later rounds refine it;
        without a seed the first rounds would have to explore k to find the line."""
        assert self.free is not None
        self._plain_s.append(step)
        self._cost[self.free].extend(sorted(verify.items()))

    def new_run(self) -> FreeRun:
        """A reply's own free-draft state (``free_len``, ``record``). It starts where the latest reply
        left off (its last copy's length, its gate): a conversation that copies goes on copying, and
        a 128-token reply that started its copies at 4 drafts would spend its first rounds growing."""
        return FreeRun(last_accepted=self.run.last_accepted, gate_open=self.run.gate_open)

    def free_len(self, available: int, bucket: int | None = None, run: FreeRun | None = None) -> int:
        """How many of the free draft's ``available`` proposed tokens to verify this
        round; 0 makes it a round of ``current`` instead. ``bucket``: the matched
        n-gram's length, which predicts acceptance.

        Verifying k drafts costs ``a + b k`` against ``c0`` for a plain step (or
        the rate of a model draft in use), so a draft is verified only where its
        expected accepted tokens pay for that, by ``OPEN_MARGIN`` to open the
        gate. While held back, the ``hold_probe``-th hit is verified anyway (then
        the 16th, 32nd, ... after it, until the gate opens), so a text that
        starts repeating itself in short matches is noticed too. ``run``: the reply's own state
        (``new_run``); without one, the controller's.
        """
        assert self.free is not None
        run = run or self.run
        # Grow slowly: at most 4 more than the last verified round accepted, so a copy
        # that stops (an edit, the end of a quote) costs a short draft, not a 32-token one.
        cap = min(available, self.free_k_max)
        if not self.k_fixed:  # a length the user fixed is kept
            cap = min(cap, run.last_accepted + self.grow)
        costs = self.free_costs() if self.gated else None
        if costs is None:  # forced, or the costs are not measured yet: draft what there is
            if self.gated and not self.k_fixed:  # lengths 4 apart, so a line can be fitted
                return min(cap, self.k[self.free] + 4 * (self.rounds[self.free] % 2))
            return min(cap, self.k[self.free])
        c0, a, b = costs
        base = 1.0 / c0
        if self.current != "plain" and self.rate.get(self.current):
            base = max(base, self.rate[self.current] or 0.0)
        rates = self._accept_rates(self.free, cap, bucket)
        k, rate = best_rate(rates, self._verify_cost(a, b))
        opened = rate > base * (1.0 if run.gate_open else OPEN_MARGIN)
        if opened != run.gate_open:
            verb = "held back" if not opened else "verified again" if run.gate_open is False else "verified"
            run.gate_open = self.run.gate_open = opened  # the next reply starts from the latest decision
            run.notes.append(
                f"{self.free} drafts {verb}: accepted {rates[0]:.2f} at the first position, a verified token "
                f"costs {b / c0:.2f} of a step")
        if opened:
            run.held, self.hold_interval = 0, self.hold_probe
            return k
        run.held += 1
        if run.held < self.hold_interval:
            return 0
        run.held, run.probing = 0, True
        return min(cap, 2)  # a probe: its outcome sets the next interval (record)
