"""The accept rules, pure functions of the drafts and the two models' choices.

- greedy: accept drafts while they equal the target's choice; then take the
  target's own token (a correction, or a bonus when all were accepted);
- sampling: standard rejection sampling (Leviathan et al. / Chen et al.):
  accept draft x with probability min(1, p(x)/q(x)); on rejection draw from
  the residual max(0, p - q), renormalised; a bonus draw from p when every
  draft was accepted. The output distribution is exactly p.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


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
        pi, qi = p(i), q[i]
        qx = 1.0 if qi is None else float(qi[x])
        if qx > 0.0 and uniform() < min(1.0, float(pi[x]) / qx):
            continue
        if qi is None:
            residual = pi.copy()
            residual[x] = 0.0
        else:
            residual = np.maximum(pi - qi, 0.0)
        if residual.sum() <= 0.0:  # p == q exactly: any draw from p is exact
            residual = pi
        return i, sample(residual)
    return len(drafts), sample(p(len(drafts)))

