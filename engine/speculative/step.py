"""``speculative_step``: the speculative sibling of ``generate.generate_step``.

What depends on the request is chosen once, before the first round: greedy or
sampled decides how a draft picks its tokens and how the target's rows judge
them. Per round only the controller's mode varies: a plain round (one target
step) or a draft round (propose, verify in one pass, roll back the rejected
tail). A controller with a free draft (``auto``'s n-gram lookup) asks it
first every round and verifies as much of its proposal as ``free_len`` says
pays; when that is nothing, the round is the controller's current mode.

Like ``generate_step``, it yields its target forwards as Computes to the engine
core, so a sequence's drafts are verified in the same batch as every other
sequence's rows; a draft model drafts on its own sequence, between steps.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Generator, Sequence

import numpy as np

from ..backends.base import SeqView
from ..decode.generate import Steps
from ..decode.sampling import Sampler
from ..types import WANT_ALL, WANT_NONE, Compute
from .accept import accept_greedy, accept_sampled
from .controller import SpecController, SpecStats
from .drafts import DraftSource

Pick = Callable[[Sequence[int], np.ndarray], tuple[int, np.ndarray | None]]
Verify = Callable[[list[int], list[int], list, np.ndarray], tuple[int, int]]
Produced = list[tuple[int, bool]]
Round = Generator[Compute, Any, tuple[Produced, int, int, float]]


def pick_and_verify(sampler: Sampler) -> tuple[Pick, Verify]:
    """For this request's sampler: how a draft picks each token (and its
    distribution, None when greedy), and how the target's verification rows
    decide how many drafts to keep and the target's own next token."""
    if sampler.params.greedy:
        def pick(ctx: Sequence[int], logits: np.ndarray) -> tuple[int, np.ndarray | None]:
            return sampler(ctx, logits), None

        def verify(history: list[int], proposal: list[int], q: list, rows: np.ndarray) -> tuple[int, int]:
            choice = [sampler(history + proposal[:i], rows[i]) for i in range(len(proposal) + 1)]
            return accept_greedy(proposal, choice)
    else:
        def pick(ctx: Sequence[int], logits: np.ndarray) -> tuple[int, np.ndarray | None]:
            q = sampler.distribution(ctx, logits)
            return sampler.sample(q), q

        def verify(history: list[int], proposal: list[int], q: list, rows: np.ndarray) -> tuple[int, int]:
            return accept_sampled(proposal, q, lambda i: sampler.distribution(history + proposal[:i], rows[i]),
                                  sampler.rng.random, sampler.sample)
    return pick, verify


class _Rounds:
    """One reply's speculative rounds. Each returns (tokens to yield, drafted, accepted, and the
    seconds a draft spent catching up, or the free draft's match length)."""

    def __init__(self, target: SeqView, drafts: dict[str, DraftSource], ctl: SpecController, sampler: Sampler,
                 history: list[int], stats: SpecStats) -> None:
        self.target, self.drafts, self.ctl, self.sampler = target, drafts, ctl, sampler
        self.history, self.stats = history, stats
        self.pick, self.verify = pick_and_verify(sampler)
        self.end = len(history) + sampler.params.limit  # history holds the prompt: its length at the limit
        self.free = drafts.get(ctl.free) if ctl.free else None
        self.run = ctl.new_run()  # this reply's own free-draft state: copy length, hold-backs, gate, notes
        self.waited = 0.0   # this round's seconds suspended at its Computes (other sequences' work too)
        self.charged = 0.0  # and its Computes' own share of the steps that ran them (Compute.spent_s)

    def compute(self, c: Compute) -> Generator[Compute, Any, Any]:
        """Yield ``c`` to the engine core, keeping what the round waited and what it is charged."""
        t = time.perf_counter()
        out = yield c
        self.waited += time.perf_counter() - t
        self.charged += c.spent_s
        return out

    def spent(self, t0: float) -> float:
        """The round's cost since ``t0``: its own work (drafting, sampling) plus its rows' share of the
        batches. In a batch beside other sequences, a round waits for their rows too (another request's
        prompt chunk takes a second); timing it by the clock would make a draft that pays look like a loss
        and retire it for the session. Alone, the two are the same."""
        return time.perf_counter() - t0 - self.waited + self.charged

    def room(self, cap: int) -> int:
        """Drafts a round may verify: the verify pass needs ``len(history) + k`` KV
        slots, and past ``max_tokens`` nothing is read."""
        return min(cap, self.target.n_ctx - len(self.history), self.end - len(self.history) - 1)

    def plain(self, tok: int, mode: str) -> Round:
        logits = yield from self.compute(Compute([tok]))
        self.stats.target_passes += 1
        return [(self.sampler(self.history, logits), False)], 0, 0, 0.0

    def _verify(self, tok: int, proposal: list[int], q: list) -> Generator[Compute, Any, tuple[Produced, int]]:
        """Feed ``tok`` and the proposal in one pass; keep the accepted drafts and the target's next token."""
        base = len(self.history)
        rows = yield from self.compute(Compute([tok] + proposal, WANT_ALL))
        self.stats.target_passes += 1
        n, nxt = self.verify(self.history, proposal, q, rows)
        self.target.truncate(base + n)  # rejected drafts leave the KV here
        self.stats.count_round(len(proposal), n)
        return [(d, True) for d in proposal[:n]] + [(nxt, False)], n

    def drafted(self, tok: int, mode: str) -> Round:
        draft = self.drafts[mode]
        k = self.room(self.ctl.k[mode])
        if k <= 0:
            return (yield from self.plain(tok, mode))
        proposal, q = draft.propose(self.history, k, self.pick)
        if not proposal:  # an n-gram miss: the round still counts against its mode
            return (yield from self.plain(tok, mode))[0], 0, 0, draft.catchup_s
        produced, n = yield from self._verify(tok, proposal, q)
        return produced, len(proposal), n, draft.catchup_s

    def free_round(self, tok: int) -> Generator[Compute, Any, tuple[Produced, int, int, int | None] | None]:
        """The free draft's round (with the match length it verified), or None when
        it has nothing worth verifying."""
        assert self.free is not None
        most = self.room(self.ctl.free_k_max)
        if most <= 0:
            return None
        proposal, q = self.free.propose(self.history, most, self.pick)
        bucket = getattr(self.free, "matched", None)
        k = self.ctl.free_len(len(proposal), bucket, self.run) if proposal else 0
        if not k:
            return None
        produced, n = yield from self._verify(tok, proposal[:k], q[:k])
        return produced, k, n, bucket

    def one(self, tok: int) -> Generator[Compute, Any, tuple[str, Produced, int]]:
        """One round after ``tok``, recorded with the controller: (its mode, the tokens, drafts made)."""
        ctl, stats, free = self.ctl, self.stats, self.free
        mode = ctl.current
        t0, self.waited, self.charged = time.perf_counter(), 0.0, 0.0
        got = (yield from self.free_round(tok)) if free is not None else None
        # The lookup indexing a new reply's history is a one-off too (see below).
        lookup = free.catchup_s if free is not None else 0.0
        if got is not None:
            assert ctl.free is not None
            mode = ctl.free
            produced, drafted, accepted, bucket = got
            spent = self.spent(t0)
            ctl.record(mode, drafted, accepted, len(produced), spent, stats, bucket=bucket,
                       fit_seconds=spent - lookup, run=self.run)
        else:
            round_ = self.plain if mode == "plain" else self.drafted
            produced, drafted, accepted, catchup = yield from round_(tok, mode)
            spent = self.spent(t0)
            # The mode's rate pays for a draft's catch-up prefill (the user waits
            # for it too); the per-k cost fit does not, it is a one-off.
            ctl.record(mode, drafted, accepted, len(produced), spent, stats, fit_seconds=spent - catchup - lookup,
                       run=self.run)
        return mode, produced, drafted


def speculative_step(target: SeqView, drafts: dict[str, DraftSource], ctl: SpecController,
                     pending: Sequence[int], sampler: Sampler, history: list[int],
                     stats: SpecStats) -> Steps:
    """Same contract as ``generate_step``: prefill ``pending``, then yield
    ``(token, from_draft)`` forever; ``history`` grows with every yield.

    No round drafts past the request's ``max_tokens`` (its sampler's params): a
    round yields its accepted drafts and one more token, so with ``left`` tokens
    to go it drafts at most ``left - 1``; verifying drafts the reply will never
    show would cost a longer pass for nothing.

    Invariant at the top of each round: ``tok == history[-1]`` and the target's
    KV holds ``history[:-1]``; a round feeds ``tok`` plus the drafts.
    """
    rounds = _Rounds(target, drafts, ctl, sampler, history, stats)
    try:
        # Prefill all but the last prompt token: the first round then verifies
        # drafts proposed right after the prompt, exactly like every later one.
        if len(pending) > 1:
            yield Compute(list(pending[:-1]), WANT_NONE, prompt=True)
        tok = pending[-1]
        while True:
            mode, produced, drafted = yield from rounds.one(tok)
            stats.mode_rounds[mode] = stats.mode_rounds.get(mode, 0) + 1
            stats.mode_drafted[mode] = stats.mode_drafted.get(mode, 0) + drafted
            tok = produced[-1][0]
            for t, from_draft in produced:
                history.append(t)
                stats.generated += 1
                stats.mode_tokens[mode] = stats.mode_tokens.get(mode, 0) + 1  # counted as yielded
                yield t, from_draft
    finally:
        # Stopped mid-run (stop string, EOS, max tokens): drop KV past what was yielded.
        if target.kv_len > len(history):
            target.truncate(len(history))
