"""Speculative decoding: a cheap draft proposes k tokens, the target checks
all of them in one forward pass, and the output is exactly what the target
alone would produce.

``speculative_step`` has the yield shape of ``generate.generate_step``:
``(token, from_draft)``. The accept rule is a pure function:

- greedy: accept drafts while they equal the target's choice; then take the
  target's own token (a correction, or a bonus when all were accepted);
- sampling: standard rejection sampling (Leviathan et al. / Chen et al.):
  accept draft x with probability min(1, p(x)/q(x)); on rejection draw from
  the residual max(0, p - q), renormalised; a bonus draw from p when every
  draft was accepted. The output distribution is exactly p.

Exactness and sampling options: p and q are both produced by the *same*
``Sampler.distribution`` (penalties over the same history, then top-k,
top-p, min-p, temperature), the very function plain sampling draws from, so
every option keeps the output distribution exact. What changes is only which
random numbers are drawn: a seeded speculative run is reproducible, but not
token-identical to a seeded plain run. Greedy output is token-identical.

Rollback: after verification the target's KV is truncated to the accepted
length, so rejected draft tokens never stay in the KV (and so never reach the
prefix cache, which only snapshots confirmed tokens).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np

from .backends.base import Backend
from .models.gguf import ModelInfo
from .kv.prefix_cache import common_prefix_len

# -- the accept rule -----------------------------------------------------------


def accept_greedy(drafts: Sequence[int], target_choice: Sequence[int]) -> tuple[int, int]:
    """``target_choice[i]``: the target's token after ``drafts[:i]`` (len k+1).

    Returns (number of drafts accepted, the target's next token).
    """
    n = 0
    while n < len(drafts) and drafts[n] == target_choice[n]:
        n += 1
    return n, int(target_choice[n])


def accept_sampled(drafts: Sequence[int], q: Sequence[np.ndarray | None], p: Callable[[int], np.ndarray],
                   uniform: Callable[[], float], sample: Callable[[np.ndarray], int]) -> tuple[int, int]:
    """Rejection sampling. ``q[i]`` is the draft's distribution at position i
    (None = a deterministic draft, q one-hot at ``drafts[i]``); ``p(i)`` gives
    the target's (computed lazily: rejection usually stops early)."""
    for i, x in enumerate(drafts):
        pi = p(i)
        qx = 1.0 if q[i] is None else float(q[i][x])
        if qx > 0.0 and uniform() < min(1.0, float(pi[x]) / qx):
            continue
        if q[i] is None:
            residual = pi.copy()
            residual[x] = 0.0
        else:
            residual = np.maximum(pi - q[i], 0.0)
        if residual.sum() <= 0.0:  # p == q exactly: any draw from p is exact
            residual = pi
        return i, sample(residual)
    return len(drafts), sample(p(len(drafts)))


# -- draft sources ---------------------------------------------------------------


class DraftSource(Protocol):
    kind: str

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        """Up to k tokens continuing ``history``, with their distributions (or None)."""


class ModelDraft:
    """A small model with the same tokenizer; keeps its own KV between rounds."""

    kind = "model"

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._kv: list[int] = []
        self.n_vocab_target: int | None = None
        self.catchup_s = 0.0  # time the last propose spent prefilling missed tokens

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        b = self.backend
        k = min(k, b.n_ctx - len(history))
        if k <= 0:
            return [], []
        # Reuse the draft's KV up to where it and the history diverge; the
        # newest token is always fed again, its logits start the proposal.
        common = min(common_prefix_len(self._kv, history), len(history) - 1)
        b.truncate(common)
        t0 = time.perf_counter()
        logits = b.forward(history[common:])
        # Feeding more than the newest token is a one-off catch-up (a new prompt,
        # or tokens decoded while another mode ran), not the steady-state cost.
        self.catchup_s = time.perf_counter() - t0 if len(history) - common > 1 else 0.0
        drafts: list[int] = []
        dists: list = []
        ctx = list(history)
        for i in range(k):
            if self.n_vocab_target is not None and logits.shape[-1] > self.n_vocab_target:
                logits = logits[: self.n_vocab_target]
            tok, dist = pick(ctx, logits)
            drafts.append(tok)
            dists.append(dist)
            ctx.append(tok)
            if i < k - 1:
                logits = b.forward((tok,))
        self._kv = list(history) + drafts[:-1]
        return drafts, dists

    def reset(self) -> None:
        self._kv = []


class NgramDraft:
    """Copies the continuation of the latest earlier occurrence of the history's
    suffix (prompt lookup decoding). Free to draft; strong when the answer
    repeats its input: editing code, rewriting, quoting."""

    kind = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 2) -> None:
        self.max_n, self.min_n = max_n, min_n
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> end position of its latest occurrence
        self._upto = 0
        self._seen: list[int] = []

    def _catch_up(self, history: Sequence[int], end: int) -> None:
        # History only grows within a request; if it was rewritten, rebuild.
        if self._upto > len(history) or self._seen != list(history[:self._upto]):
            self._index.clear()
            self._upto = 0
        for j in range(self._upto, end):
            for n in range(self.min_n, self.max_n + 1):
                if j - n + 1 >= 0:
                    self._index[tuple(history[j - n + 1:j + 1])] = j
        self._upto = max(self._upto, end)
        self._seen = list(history[:self._upto])

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        # Index n-grams ending before the last position, so a hit is an earlier occurrence.
        self._catch_up(history, len(history) - 1)
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(history) < n:
                continue
            pos = self._index.get(tuple(history[-n:]))
            if pos is not None:
                cont = list(history[pos + 1:pos + 1 + k])
                if cont:
                    return cont, [None] * len(cont)
        return [], []


# -- compatibility -----------------------------------------------------------------


def check_draft_compatible(target: ModelInfo, draft: ModelInfo) -> str | None:
    """None if the draft can propose for the target, else a one-line reason.

    Only ids matter (the draft is fed the target's tokens), so the draft must
    name every token the target can produce identically, by id.
    """
    if target.tokenizer_model != draft.tokenizer_model:
        return (f"tokenizer types differ ({draft.tokenizer_model or 'unknown'} in the draft, "
                f"{target.tokenizer_model or 'unknown'} in the target)")
    if len(draft.tokens) < len(target.tokens):
        return f"the draft knows {len(draft.tokens)} tokens but the target can produce {len(target.tokens)}"
    for i, (a, b) in enumerate(zip(target.tokens, draft.tokens)):
        if a != b:
            return f"token {i} is {b!r} in the draft but {a!r} in the target"
    return None


# -- the adaptive controller -------------------------------------------------------


@dataclass(slots=True)
class SpecStats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    generated: int = 0
    per_position_drafted: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    mode_tokens: dict[str, int] = field(default_factory=dict)
    switched_off: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        acc = [a / d if d else 0.0 for a, d in zip(self.per_position_accepted, self.per_position_drafted)]
        return {
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.drafted, 4) if self.drafted else 0.0,
            "mean_accepted_length": round(self.accepted / self.rounds, 3) if self.rounds else 0.0,
            "acceptance_per_position": [round(x, 4) for x in acc],
            "target_passes": self.target_passes,
            "target_passes_per_token": round(self.target_passes / self.generated, 4) if self.generated else 0.0,
            "tokens_by_mode": dict(self.mode_tokens),
            "switched_off": self.switched_off,
            "notes": list(self.notes),
        }


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
                 round_cost: Callable[[int], float] | None = None, explore_rounds: int = 4) -> None:
        self.modes = list(dict.fromkeys(modes))  # include "plain" to allow switching off
        self.k = {m: (k_fixed or k_init) for m in self.modes}
        self.k_max = k_fixed or k_max
        self.k_fixed = k_fixed
        self.rate: dict[str, float | None] = {m: None for m in self.modes}
        self.since_probe: dict[str, int] = {m: 0 for m in self.modes}
        self.probe_interval: dict[str, int] = {m: probe_every for m in self.modes}
        self.probe_every = probe_every
        self.alpha = alpha
        self.round_cost = round_cost
        self.pending_notes: list[str] = []  # said in the stats of the next reply
        self.explore_rounds = explore_rounds  # a draft mode's first visit: enough rounds to fit its cost
        self.retired: set[str] = set()
        self.rounds: dict[str, int] = {m: 0 for m in self.modes}
        self.current = self.modes[0]
        self.switching = len(self.modes) > 1
        self._cost: dict[str, list[tuple[int, float]]] = {m: [] for m in self.modes}
        self._pos_tries: dict[str, list[int]] = {m: [] for m in self.modes}
        self._pos_acc: dict[str, list[int]] = {m: [] for m in self.modes}

    def choose(self) -> str:
        if not self.switching:
            return self.modes[0]
        live = [m for m in self.modes if m not in self.retired]
        for m in live:  # measure every mode before trusting any number
            if self.rate[m] is None or (m != "plain" and self.rounds[m] < self.explore_rounds):
                return m
        best = max(live, key=lambda m: self.rate[m])
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
        n = len(pts)
        mk = sum(k for k, _ in pts) / n
        mt = sum(t for _, t in pts) / n
        var = sum((k - mk) ** 2 for k, _ in pts)
        c1 = max(0.0, sum((k - mk) * (t - mt) for k, t in pts) / var)
        return max(1e-6, mt - c1 * mk), c1

    def ceiling(self, mode: str) -> float | None:
        """Tokens/second this mode would reach if every draft were accepted (measured cost)."""
        fit = self._fit(mode)
        if fit is None:
            return None
        return full_acceptance_rate(*fit, self.k_max)

    def _best_k(self, mode: str) -> int:
        if self.round_cost is not None:
            cost = self.round_cost
        else:
            fit = self._fit(mode)
            if fit is None:  # cost slope unknown yet: explore around the current k
                return self.k[mode]
            c0, c1 = fit
            cost = lambda k: c0 + c1 * k  # noqa: E731
        best_k, best_rate, expect, run = 1, 0.0, 1.0, 1.0
        tries, acc = self._pos_tries[mode], self._pos_acc[mode]
        # Each position's rate is shrunk towards the mode's overall rate (two
        # pseudo-tries), so one lucky or unlucky round does not swing k; a
        # position never tried yet is assumed to do as well as the last one
        # tried, so k can grow past what was explored.
        prior = (sum(acc) + 1) / (sum(tries) + 2)
        a = prior
        for k in range(1, self.k_max + 1):
            i = k - 1
            if i < len(tries) and tries[i]:
                a = (acc[i] + 2 * prior) / (tries[i] + 2)
            run *= a
            expect += run
            r = expect / cost(k)
            if r > best_rate:
                best_k, best_rate = k, r
        return best_k

    def record(self, mode: str, drafted: int, accepted: int, produced: int, seconds: float,
               stats: SpecStats, fit_seconds: float | None = None) -> None:
        if self.pending_notes:
            stats.notes.extend(self.pending_notes)
            self.pending_notes.clear()
        for m in self.modes:
            if m != mode:
                self.since_probe[m] += produced
        if seconds > 0:
            r = produced / seconds
            old = self.rate[mode]
            self.rate[mode] = r if old is None else (1 - self.alpha) * old + self.alpha * r
        if mode != "plain" and drafted:
            self._cost[mode].append((drafted, seconds if fit_seconds is None else fit_seconds))
            del self._cost[mode][:-256]
            tries, acc = self._pos_tries[mode], self._pos_acc[mode]
            for i in range(min(drafted, accepted + 1)):  # positions past a rejection were not tried
                if i >= len(tries):
                    tries.append(0)
                    acc.append(0)
                tries[i] += 1
                acc[i] += i < accepted
            if not self.k_fixed:
                self.k[mode] = self._best_k(mode)
                if self.k[mode] == drafted and len({k for k, _ in self._cost[mode][-32:]}) < 2:
                    # Vary k early so the cost slope can be fitted.
                    self.k[mode] = min(self.k_max, drafted + 1) if accepted == drafted else max(1, drafted - 1)
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
            stats.notes.append(f"speculation off: slower than plain here ({rates}); probing again later")
        if not self.switching:
            return
        # A probe that confirmed the mode is slower: wait twice as long before the next.
        best = max((m for m in self.modes if self.rate[m] is not None and m not in self.retired),
                   key=lambda m: self.rate[m])
        if mode == best:
            self.probe_interval[mode] = self.probe_every
        elif self.current != mode:
            self.probe_interval[mode] = min(self.probe_interval[mode] * 2, 4096)

    def _maybe_retire(self, mode: str, stats: SpecStats) -> None:
        plain = self.rate.get("plain")
        if not self.switching or plain is None or mode in self.retired or len(self._cost[mode]) < 4:
            return
        top = self.ceiling(mode)
        if top is not None and top < plain:
            self.retired.add(mode)
            stats.switched_off += 1
            stats.notes.append(f"{mode} draft off for this session: even accepting every draft it would "
                               f"reach {top:.1f} tok/s, plain decoding does {plain:.1f} here")


def measure_round_costs(target: Backend, draft: Backend, token: int, k: int = 4,
                        repeats: int = 2) -> tuple[float, float, float]:
    """Seconds for one target step, each extra verified token, and one draft step.

    Runs a few forwards past the end of both KV caches and truncates them back,
    so a conversation in progress is untouched. The first pass of each model is
    a warm-up (it pages the weights in) and is not timed; the best of
    ``repeats`` is kept, as a noisy machine only ever adds time.
    """
    t_len, d_len = target.kv_len, draft.kv_len
    if t_len + k + 2 > target.n_ctx or d_len + 2 > draft.n_ctx:
        raise ValueError("no room left in the context to measure")

    def timed(backend: Backend, tokens: list[int], base: int) -> float:
        best = float("inf")
        for i in range(repeats + 1):
            backend.truncate(base + 1)
            t0 = time.perf_counter()
            backend.forward(tokens, all_logits=len(tokens) > 1)
            if i:  # the first one is the warm-up
                best = min(best, time.perf_counter() - t0)
        return best

    try:
        target.forward([token])
        draft.forward([token])
        step = timed(target, [token], t_len)
        verify = timed(target, [token] * (k + 1), t_len)
        draft_step = timed(draft, [token], d_len)
    finally:
        target.truncate(t_len)
        draft.truncate(d_len)
    return step, max(0.0, (verify - step) / k), draft_step


def full_acceptance_rate(c0: float, c1: float, k_max: int) -> float:
    """Tokens per unit of cost with every draft accepted, best k, for rounds costing ``c0 + c1 k``."""
    return max((k + 1) / (c0 + c1 * k) for k in range(1, k_max + 1))


def model_draft_ceiling(step: float, per_token: float, draft_step: float, k_max: int = 8) -> float:
    """Speedup over plain decoding a model draft would reach accepting every draft:
    a round of k drafts costs a target step, k verified tokens and k draft steps."""
    return step * full_acceptance_rate(step, per_token + draft_step, k_max)


# -- the step generator ------------------------------------------------------------


def speculative_step(target: Backend, drafts: dict[str, DraftSource], ctl: SpecController,
                     pending: Sequence[int], sampler, history: list[int],
                     stats: SpecStats) -> Iterator[tuple[int, bool]]:
    """Same contract as ``generate_step``: prefill ``pending``, then yield
    ``(token, from_draft)`` forever; ``history`` grows with every yield.

    Invariant at the top of each round: ``tok == history[-1]`` and the target's
    KV holds ``history[:-1]``; a round feeds ``tok`` plus the drafts.
    """
    greedy = sampler.params.greedy

    def pick(ctx: Sequence[int], logits: np.ndarray):
        if greedy:
            return sampler(ctx, logits), None
        q = sampler.distribution(ctx, logits)
        return sampler.sample(q), q

    try:
        # Prefill all but the last prompt token: the first round then verifies
        # drafts proposed right after the prompt, exactly like every later one.
        if len(pending) > 1:
            target.forward(pending[:-1])
        tok = pending[-1]
        while True:
            mode = ctl.current
            t0 = time.perf_counter()
            room = target.n_ctx - len(history)  # verify needs len(history) + k slots
            k = min(ctl.k[mode], room) if mode != "plain" else 0
            proposal, q = drafts[mode].propose(history, k, pick) if k > 0 else ([], [])
            if not proposal:
                logits = target.forward((tok,))
                stats.target_passes += 1
                tok = sampler(history, logits)
                produced = [(tok, False)]
                n = 0
            else:
                base = len(history)
                rows = target.forward([tok] + proposal, all_logits=True)
                stats.target_passes += 1
                if greedy:
                    choice = [sampler(history + proposal[:i], rows[i]) for i in range(len(proposal) + 1)]
                    n, tok = accept_greedy(proposal, choice)
                else:
                    n, tok = accept_sampled(
                        proposal, q, lambda i: sampler.distribution(history + proposal[:i], rows[i]),
                        sampler.rng.random, sampler.sample)
                target.truncate(base + n)  # rejected drafts leave the KV here
                produced = [(d, True) for d in proposal[:n]] + [(tok, False)]
                stats.rounds += 1
                stats.drafted += len(proposal)
                stats.accepted += n
                for i in range(len(proposal)):
                    if i >= len(stats.per_position_drafted):
                        stats.per_position_drafted.append(0)
                        stats.per_position_accepted.append(0)
                    stats.per_position_drafted[i] += 1
                    stats.per_position_accepted[i] += i < n
            # A round with no proposal (n-gram miss) still counts against its
            # mode: that is what choosing the mode cost.
            spent = time.perf_counter() - t0
            # The mode's rate pays for a draft's catch-up prefill (the user waits
            # for it too); the per-k cost fit does not, it is a one-off.
            catchup = getattr(drafts[mode], "catchup_s", 0.0) if k > 0 else 0.0
            ctl.record(mode, len(proposal), n, len(produced), spent, stats, fit_seconds=spent - catchup)
            stats.mode_tokens[mode] = stats.mode_tokens.get(mode, 0) + len(produced)
            for t, from_draft in produced:
                history.append(t)
                stats.generated += 1
                yield t, from_draft
    finally:
        # Stopped mid-run (stop string, EOS, max tokens): drop KV past what was yielded.
        if target.kv_len > len(history):
            target.truncate(len(history))
