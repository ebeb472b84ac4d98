"""The adaptive controller: which mode (a draft kind, or plain) and how many
drafts each round, from measurements of this engine's own rounds (the
one-off measurements that start it are in ``costs.py``)."""
from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .costs import full_acceptance_rate
from .stats import SpecStats

__all__ = ["SpecController", "SpecStats", "FreeRun", "MATCH_CLASSES", "MATCH_PRIORS", "match_class"]


# Match lengths (tokens of context a copied draft continues), grouped: the
# acceptance of each class is learnt separately (``SpecController._match_rates``).
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


def _line(pts: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of seconds against k, the slope at least 0
    (a longer draft never costs less); ``pts`` must hold two different k."""
    n = len(pts)
    mk = sum(k for k, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    slope = max(0.0, sum((k - mk) * (t - mt) for k, t in pts) / sum((k - mk) ** 2 for k, _ in pts))
    return mt - slope * mk, slope


class SpecController:
    """Chooses, per round, the decoding mode (a draft kind, or plain) and the
    draft length, from measurements of this engine's own rounds.

    - A round's cost is fitted as ``seconds = c0 + c1 * k`` per mode (least
      squares over recent rounds): on a CPU verifying k drafts costs nearly
      k extra steps, on a GPU almost nothing.
    - Acceptance is tracked per draft position as a conditional rate.
    - The draft length is the k that maximises expected tokens per second,
      ``E(k) / (c0 + c1 k)`` with ``E(k) = 1 + sum_i prod_{j<=i} a_j``.
    - Each mode's measured tokens/second (an exponential moving average,
      including any catch-up prefill a draft needed) decides the mode. A mode
      that measures slower than the best is probed again later, after an
      interval that doubles each time the probe confirms it is slower, so a
      losing mode costs little and a mode that starts paying is noticed.
    - A draft mode whose fitted cost says it cannot beat plain decoding even
      if every draft were accepted (``max_k (k+1) / (c0 + c1 k)`` below the
      plain rate) is retired for good: on a CPU where verifying a token costs
      nearly a step and the draft model is not much faster than the target,
      each probe would only cost the catch-up prefill and slow rounds.
    - ``round_cost(k)`` replaces the measured fit with a cost model (in any
      unit): the benchmark uses the GPU model, one target pass plus ``k``
      draft steps of ``draft/target`` weight bytes each, to choose k for the
      hardware-independent efficiency figure.
    Lives on the engine, so what it learns carries across replies.
    """

    def __init__(self, modes: Sequence[str], *, k_init: int = 3, k_max: int = 8,
                 k_fixed: int | None = None, probe_every: int = 64, alpha: float = 0.3,
                 round_cost: Callable[[int], float] | None = None, explore_rounds: int = 4,
                 free: str | None = None, gated: bool = True, hold_probe: int = 8,
                 free_k_max: int | None = None) -> None:
        self.modes = list(dict.fromkeys(modes))  # include "plain" to allow switching off
        # A draft that costs nothing to propose (n-gram lookup), asked every round
        # before ``current``: when it proposes, ``free_len`` says how much of it to
        # verify, 0 when verifying is expected to cost more than it brings.
        self.free = free
        self.gated = gated
        self.hold_probe = hold_probe
        self.hold_interval = hold_probe  # held-back hits between two probes (doubles while probes lose)
        self.run = FreeRun()  # a caller's own FreeRun (one per reply) takes its place
        self.grow = 4  # how much longer than the last accepted run a free draft may be
        self._plain_s: list[float] = []  # seconds of recent one-token target steps, any mode
        # A copied draft's acceptance by how much context it matches: a draft from an
        # L-token match, once its first i tokens are accepted, continues an (L+i)-token
        # match. Tries and accepts per class of that length (MATCH_CLASSES).
        self._len_tries = [0] * len(MATCH_CLASSES)
        self._len_acc = [0] * len(MATCH_CLASSES)
        tracked = self.modes + ([free] if free and free not in self.modes else [])
        self.k = {m: (k_fixed or k_init) for m in tracked}
        self.k_max = k_fixed or k_max
        # A free draft (a copy from the history) may run long: where a reply copies
        # its input, a 16-32 token draft is accepted whole, and verifying it costs
        # less per token than a short one.
        self.free_k_max = k_fixed or free_k_max or max(k_max, 32)
        self.k_fixed = k_fixed
        self.rate: dict[str, float | None] = {m: None for m in tracked}
        self.since_probe: dict[str, int] = {m: 0 for m in tracked}
        self.probe_interval: dict[str, int] = {m: probe_every for m in tracked}
        self.probe_every = probe_every
        self.alpha = alpha
        self.round_cost = round_cost
        self.pending_notes: list[str] = []  # said in the stats of the next reply
        self.explore_rounds = explore_rounds  # a draft mode's first visit: enough rounds to fit its cost
        self.retired: set[str] = set()
        self.rounds: dict[str, int] = {m: 0 for m in tracked}
        self.current = self.modes[0]
        self.switching = len(self.modes) > 1
        self._cost: dict[str, list[tuple[int, float]]] = {m: [] for m in tracked}
        self._pos_tries: dict[str, list[int]] = {m: [] for m in tracked}
        self._pos_acc: dict[str, list[int]] = {m: [] for m in tracked}

    def choose(self) -> str:
        if not self.switching:
            return self.modes[0]
        live = [m for m in self.modes if m not in self.retired]
        for m in live:  # measure every mode before trusting any number
            if self.rate[m] is None or (m != "plain" and self.rounds[m] < self.explore_rounds):
                return m
        best = max(live, key=lambda m: self.rate[m] or 0.0)  # every live mode is measured here
        for m in live:
            if m != best and self.since_probe[m] >= self.probe_interval[m]:
                self.since_probe[m] = 0
                return m
        return best

    def _fit(self, mode: str) -> tuple[float, float] | None:
        """Least-squares ``(c0, c1)`` of seconds per round against k, once two k were seen."""
        pts = self._cost[mode][-32:]
        if len({k for k, _ in pts}) < 2:  # k settled: the slope comes from older rounds
            pts = self._cost[mode]
            if len({k for k, _ in pts}) < 2:
                return None
        c0, c1 = _line(pts)
        return max(1e-6, c0), c1

    def ceiling(self, mode: str) -> float | None:
        """Tokens/second this mode would reach if every draft were accepted (measured cost)."""
        fit = self._fit(mode)
        if fit is None:
            return None
        return full_acceptance_rate(*fit, self.k_max)

    def _accept_rates(self, mode: str, k_cap: int, bucket: int | None = None) -> list[float]:
        """Conditional acceptance at each draft position 1..k_cap.

        Each position's rate is shrunk towards the mode's overall rate (two
        pseudo-tries), so one lucky or unlucky round does not swing k; a
        position never tried yet is assumed to do as well as the last one
        tried, so k can grow past what was explored. With a ``bucket`` (the
        free draft's match length) the rates come from ``_match_rates``.
        """
        if bucket is not None:
            return self._match_rates(bucket, k_cap)
        tries, acc = self._pos_tries[mode], self._pos_acc[mode]
        prior = (sum(acc) + 1) / (sum(tries) + 2)
        rates, a = [], prior
        for i in range(k_cap):
            if i < len(tries) and tries[i]:
                a = (acc[i] + 2 * prior) / (tries[i] + 2)
            rates.append(a)
        return rates

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

    @staticmethod
    def _best_rate(rates: Sequence[float], cost: Callable[[int], float]) -> tuple[int, float]:
        """The k in 1..len(rates) with the best expected tokens per unit of cost, and that rate."""
        best_k, best_rate, expect, run = 1, 0.0, 1.0, 1.0
        for k, a in enumerate(rates, 1):
            run *= a
            expect += run
            r = expect / cost(k)
            if r > best_rate:
                best_k, best_rate = k, r
        return best_k, best_rate

    def _best_k(self, mode: str) -> int:
        if self.round_cost is not None and mode != self.free:
            cost = self.round_cost
        else:
            fit = self._fit(mode)
            if fit is None:  # cost slope unknown yet: explore around the current k
                return self.k[mode]
            c0, c1 = fit
            cost = lambda k: c0 + c1 * k  # noqa: E731
        return self._best_rate(self._accept_rates(mode, self.k_max), cost)[0]

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
            a, b = _line(long)
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

    @property
    def gate_open(self) -> bool | None:
        """The gate of the controller's own run (callers that pass no FreeRun)."""
        return self.run.gate_open

    @gate_open.setter
    def gate_open(self, value: bool | None) -> None:
        self.run.gate_open = value

    def new_run(self) -> FreeRun:
        """A reply's own free-draft state (``free_len``, ``record``)."""
        return FreeRun()

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
        k, rate = self._best_rate(rates, self._verify_cost(a, b))
        opened = rate > base * (1.0 if run.gate_open else OPEN_MARGIN)
        if opened != run.gate_open:
            verb = "held back" if not opened else "verified again" if run.gate_open is False else "verified"
            run.gate_open = opened
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

    def record(self, mode: str, drafted: int, accepted: int, produced: int, seconds: float,
               stats: SpecStats, fit_seconds: float | None = None, bucket: int | None = None,
               run: FreeRun | None = None) -> None:
        run = run or self.run
        for notes in (self.pending_notes, run.notes):
            if notes:
                stats.note(notes)
                notes.clear()
        if not drafted and produced == 1 and seconds > 0:  # a plain step, less any one-off catch-up
            self._plain_s.append(seconds if fit_seconds is None else fit_seconds)
            del self._plain_s[:-64]
        if mode == self.free and mode not in self.modes:
            run.last_accepted = accepted
            if run.probing:  # a held-back lookup's probe: the next waits twice as long (the
                # gate opening starts the count again); what it measured may open the gate
                run.probing = False
                self.hold_interval = min(self.hold_interval * 2, 1024)
            self.rounds[mode] += 1
            self._learn(mode, drafted, accepted, seconds if fit_seconds is None else fit_seconds, bucket)
            return
        for m in self.modes:
            if m != mode:
                self.since_probe[m] += produced
        if seconds > 0:
            r = produced / seconds
            old = self.rate[mode]
            self.rate[mode] = r if old is None else (1 - self.alpha) * old + self.alpha * r
        if mode != "plain" and drafted:
            self._learn(mode, drafted, accepted, seconds if fit_seconds is None else fit_seconds)
        self.rounds[mode] += 1
        for m in self.modes:
            if m != "plain":
                self._maybe_retire(m, stats)
        prev, self.current = self.current, self.choose()
        if prev in self.retired and self.current == "plain":
            return  # said once, in the retirement note
        if self.switching and prev != "plain" and self.current == "plain":
            stats.switched_off += 1
            rates = ", ".join(f"{m} {v:.1f} tok/s" for m, v in self.rate.items() if v)
            stats.note([f"speculation off: slower than plain here ({rates}); probing again later"])
        if not self.switching:
            return
        # A probe that confirmed the mode is slower: wait twice as long before the next.
        best = max((m for m in self.modes if self.rate[m] is not None and m not in self.retired),
                   key=lambda m: self.rate[m] or 0.0)
        if mode == best:
            self.probe_interval[mode] = self.probe_every
        elif self.current != mode:
            self.probe_interval[mode] = min(self.probe_interval[mode] * 2, 4096)

    def _learn(self, mode: str, drafted: int, accepted: int, seconds: float, bucket: int | None = None) -> None:
        """A verified draft round: its cost, its acceptance per position (and per
        ``bucket``), and the draft length it suggests (a gated free draft chooses
        its own length each round)."""
        self._cost[mode].append((drafted, seconds))
        del self._cost[mode][:-256]
        tries, acc = self._pos_tries[mode], self._pos_acc[mode]
        for i in range(min(drafted, accepted + 1)):  # positions past a rejection were not tried
            if i >= len(tries):
                tries.append(0)
                acc.append(0)
            tries[i] += 1
            acc[i] += i < accepted
            if bucket is not None:
                c = match_class(bucket + i)
                self._len_tries[c] += 1
                self._len_acc[c] += i < accepted
        if self.k_fixed or (mode == self.free and self.gated):
            return
        self.k[mode] = self._best_k(mode)
        if self.k[mode] == drafted and len({k for k, _ in self._cost[mode][-32:]}) < 2:
            # Vary k early so the cost slope can be fitted.
            self.k[mode] = min(self.k_max, drafted + 1) if accepted == drafted else max(1, drafted - 1)

    def _maybe_retire(self, mode: str, stats: SpecStats) -> None:
        plain = self.rate.get("plain")
        if not self.switching or plain is None or mode in self.retired or len(self._cost[mode]) < 4:
            return
        top = self.ceiling(mode)
        if top is not None and top < plain:
            self.retired.add(mode)
            stats.switched_off += 1
            stats.note([f"{mode} draft off for this session: even accepting every draft it would "
                        f"reach {top:.1f} tok/s, plain decoding does {plain:.1f} here"])
