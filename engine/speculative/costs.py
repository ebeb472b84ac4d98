"""What speculation costs on this machine, measured once before it is used:
a target step, a verified token, a draft step; and the ceilings those imply."""
from __future__ import annotations

import time
from typing import Sequence

from ..backends.base import Backend


def _timed(backend: Backend, tokens: list[int], base: int, repeats: int) -> float:
    """Best of ``repeats`` forwards of ``tokens`` after the first ``base + 1`` KV rows."""
    best = float("inf")
    for _ in range(repeats):
        backend.truncate(base + 1)
        t0 = time.perf_counter()
        backend.forward(tokens, all_logits=len(tokens) > 1)
        best = min(best, time.perf_counter() - t0)
    return best


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
    try:
        target.forward([token])
        draft.forward([token])
        _timed(target, [token], t_len, 1)  # warm-up
        _timed(draft, [token], d_len, 1)
        step = _timed(target, [token], t_len, repeats)
        verify = _timed(target, [token] * (k + 1), t_len, repeats)
        draft_step = _timed(draft, [token], d_len, repeats)
    finally:
        target.truncate(t_len)
        draft.truncate(d_len)
    return step, max(0.0, (verify - step) / k), draft_step


def measure_verify_costs(target: Backend, token: int,
                         ks: Sequence[int] = (1, 4, 16)) -> tuple[float, dict[int, float]]:
    """Seconds for one target step and for verifying each k in ``ks`` drafts (k + 1
    tokens in one pass), past the end of the KV cache, which is truncated back.
    What ``SpecController.seed_costs`` starts the free draft's cost line from
    (~0.9 s once on this CPU for the 1.5B: a warm-up, two steps, 2, 5 and 17 tokens)."""
    t_len = target.kv_len
    if t_len + max(ks) + 2 > target.n_ctx:
        raise ValueError("no room left in the context to measure")
    try:
        target.forward([token])
        _timed(target, [token], t_len, 1)  # warm-up
        step = _timed(target, [token], t_len, 2)
        verify = {k: _timed(target, [token] * (k + 1), t_len, 1) for k in ks}
    finally:
        target.truncate(t_len)
    return step, verify


def full_acceptance_rate(c0: float, c1: float, k_max: int, accept: float = 1.0) -> float:
    """Tokens per unit of cost at the best k, for rounds costing ``c0 + c1 k`` that bring
    ``1 + a + ... + a^k`` tokens with each draft accepted with probability ``accept``
    (1: every draft, ``k + 1`` tokens)."""
    return max(sum(accept ** i for i in range(k + 1)) / (c0 + c1 * k) for k in range(1, k_max + 1))


# The acceptance a model draft is given the benefit of before it has drafted: a
# sibling model of the same family drafting greedy code is accepted 60-80% of
# the time; a draft that could not pay even at 80% would only cost its catch-up
# prefill and slow rounds while the controller measured it.
LIKELY_ACCEPTANCE = 0.8


def model_draft_ceiling(step: float, per_token: float, draft_step: float, k_max: int = 8,
                        accept: float = 1.0) -> float:
    """Speedup over plain decoding a model draft would reach with each draft accepted
    with probability ``accept`` (1: every draft): a round of k drafts costs a target
    step, k verified tokens and k draft steps."""
    return step * full_acceptance_rate(step, per_token + draft_step, k_max, accept)


def model_draft_hopeless(step: float, per_token: float, draft_step: float) -> str | None:
    """Why a model draft with these measured costs cannot be expected to beat plain
    decoding, even with ``LIKELY_ACCEPTANCE`` of its drafts accepted (said in the
    first reply's stats), or None when it can."""
    likely = model_draft_ceiling(step, per_token, draft_step, accept=LIKELY_ACCEPTANCE)
    if likely >= 1.0:
        return None
    best = model_draft_ceiling(step, per_token, draft_step)
    return (f"model draft not used here: a verified token costs {per_token / step:.2f} of a step and a "
            f"draft step {draft_step / step:.2f}, so with {LIKELY_ACCEPTANCE:.0%} of its drafts accepted it "
            f"would run at {likely:.2f}x plain decoding ({best:.2f}x accepting every one)")
