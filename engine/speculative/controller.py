"""The adaptive controller: which mode (a draft kind, or plain) and how many
drafts each round, from measurements of this engine's own rounds (the
one-off measurements that start it are in ``costs.py``; the free draft's
gate, whether a lookup's proposal is worth verifying, in ``gate.py``)."""
from __future__ import annotations

from typing import Callable, Sequence

from .costs import full_acceptance_rate
from .gate import MATCH_CLASSES, FreeGate, FreeRun, best_rate, fit_line, match_class
from .stats import SpecStats

__all__ = ["SpecController", "SpecStats", "FreeRun"]


class SpecController(FreeGate):
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
        # The run of callers that pass none (one reply at a time); a reply that has its own (new_run) takes
        # its place, and this one keeps the latest reply's copy length and gate, where the next reply starts.
        self.run = FreeRun()
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
        c0, c1 = fit_line(pts)
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

    def _best_k(self, mode: str) -> int:
        if self.round_cost is not None and mode != self.free:
            cost = self.round_cost
        else:
            fit = self._fit(mode)
            if fit is None:  # cost slope unknown yet: explore around the current k
                return self.k[mode]
            c0, c1 = fit
            cost = lambda k: c0 + c1 * k  # noqa: E731
        return best_rate(self._accept_rates(mode, self.k_max), cost)[0]

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
            run.last_accepted = self.run.last_accepted = accepted
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
