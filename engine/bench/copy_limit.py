"""The most n-gram speculation could give on the text a reply actually wrote: ``bench serve``'s
second limit for its speculation row.

``spec_limit`` (serve_rows.py) assumes every round drafts k tokens and every one is accepted: the
machine's limit, whatever the text. A reply copies its prompt only in places, so this one replays
what each reply wrote through the lookup the engine drafts with (``NgramDraft``) and a gate that
knows the future: at each position the lookup proposes up to ``k_max`` tokens; the ``m`` of them
the reply went on to write are verified in one round when that costs less than ``m + 1`` plain steps,
else the round is a plain step. A round of ``m`` verified drafts costs what this machine measured
for a step in which every sequence verifies ``m`` (``step_ms``, interpolated between the measured
k), over a plain step's time. So it is an upper bound: a real gate cannot know the future, and in a
batch where one sequence copies and the others do not, its rows also slow the others' step.
"""
from __future__ import annotations

import bisect
from typing import Callable, Iterable, Mapping, Sequence

from ..speculative.drafts import NgramDraft


def round_cost(step_ms: Mapping[int, float]) -> Callable[[int], float]:
    """A round verifying k drafts in plain steps, from the step times measured at some k (0 included),
    linear between them and at the last measured k's rate per row beyond it."""
    ks = sorted(step_ms)
    if not ks or ks[0] != 0 or step_ms[0] <= 0:
        raise ValueError("round_cost needs a plain step's time (k = 0)")
    plain = step_ms[0]

    def cost(k: int) -> float:
        if k >= ks[-1]:
            return step_ms[ks[-1]] / plain * (1 + k) / (1 + ks[-1])
        j = bisect.bisect_right(ks, k)
        lo, hi = ks[j - 1], ks[j]
        t = step_ms[lo] + (step_ms[hi] - step_ms[lo]) * (k - lo) / (hi - lo)
        return t / plain

    return cost


def copied_runs(prompt: Sequence[int], reply: Sequence[int], k_max: int,
                pays: Callable[[int], bool] = lambda m: m > 0) -> list[int]:
    """Per round, from the reply's first token: how many drafts the round verified and the reply
    wrote. The lookup proposes up to ``k_max``; the ``m`` the reply went on to write are verified
    where ``pays(m)``; otherwise the round is a plain step (0)."""
    lookup = NgramDraft()
    history = list(prompt)
    runs, i = [], 0
    while i < len(reply):
        proposal, _ = lookup.propose(history, k_max, lambda logits: 0)  # the lookup picks nothing
        m = 0
        while m < len(proposal) and i + m + 1 < len(reply) and proposal[m] == reply[i + m]:
            m += 1
        m = m if m and pays(m) else 0
        runs.append(m)
        history += reply[i:i + m + 1]
        i += m + 1
    return runs


def copy_limit(pairs: Iterable[tuple[Sequence[int], Sequence[int]]], step_ms: Mapping[int, float],
               k_max: int = 16) -> dict:
    """Every reply's rounds under the gate that knows the future: ``limit``, the replies' tokens over
    the plain steps their rounds cost (plain decoding: one step a token); ``copied``, the share of
    tokens that came from verified drafts; ``mean_run``, the drafts a verifying round accepted."""
    cost = round_cost(step_ms)
    tokens = copied = verified_rounds = 0
    steps = 0.0
    for prompt, reply in pairs:
        for m in copied_runs(prompt, reply, k_max, lambda m: cost(m) < m + 1):
            tokens += m + 1
            steps += cost(m) if m else 1.0
            if m:
                copied += m
                verified_rounds += 1
    if not tokens:
        return {"limit": 1.0, "copied": 0.0, "mean_run": 0.0, "tokens": 0}
    return {"limit": round(tokens / steps, 3), "copied": round(copied / tokens, 3),
            "mean_run": round(copied / verified_rounds, 2) if verified_rounds else 0.0, "tokens": tokens}
