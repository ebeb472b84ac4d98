"""``speculative_step``: the speculative sibling of ``generate.generate_step``."""
from __future__ import annotations

import time
from typing import Iterator, Sequence

import numpy as np

from ..backends.base import Backend
from .accept import accept_greedy, accept_sampled
from .controller import SpecController, SpecStats
from .drafts import DraftSource

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
