"""Turn one position's logits into the next token id.

The filter chain is llama.cpp's default order:

    penalties -> top_k -> top_p -> min_p -> temperature -> sample

Each step is a small pure function over a 1-D logits vector (removed entries
become ``-inf``), so a test can check it on a hand-written vector. The
:class:`Sampler` built by :func:`make_sampler` runs the same functions, but on
the few surviving candidates instead of the whole vocabulary: this runs once
per generated token on vocabularies of 150k entries.

Rules that matter for reproducibility and for speculative decoding:

* Ties are broken towards the lower token id everywhere (greedy argmax, the
  top_k boundary, the top_p order), so results never depend on how
  ``np.argpartition`` happens to order equal values.
* ``Sampler.__call__`` is exactly "draw from ``Sampler.distribution``": the
  draw is one uniform number mapped through the cumulative sum in token-id
  order, and zero entries add nothing to a cumulative sum, so drawing from the
  sparse candidates or from the dense vector gives the same token for the same
  RNG state.
* NaN logits count as ``-inf`` (removed). If nothing finite survives, a
  :class:`SamplingError` (a ``ValueError``) is raised instead of sampling noise.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import HearthError
from ..types import SamplingParams

__all__ = [
    "Sampler",
    "SamplingError",
    "apply_penalties",
    "apply_temperature",
    "make_sampler",
    "min_p_mask",
    "recent_window",
    "softmax",
    "top_k_indices",
    "top_k_mask",
    "top_p_mask",
]

# Cumulative sums carry rounding error of ~1e-16; without this slack a top_p
# that is meant to land exactly on a boundary (0.5 + 0.3 >= 0.8) could keep one
# token more or less depending on summation order.
_TOP_P_EPS = 1e-9
# First guess for how many tokens top_p needs when top_k is off; grown 8x until
# the candidates hold enough mass. Avoids sorting the whole vocabulary.
_TOP_P_FIRST_GUESS = 512
# Sample size for top_k's threshold pre-filter on big vocabularies.
_PREFILTER_SAMPLE = 2048


class SamplingError(HearthError, ValueError):
    """The logits left nothing to sample (all -inf or NaN): a broken model or filter."""


# --------------------------------------------------------------------------- filters


def recent_window(history: Sequence[int] | np.ndarray, last_n: int) -> np.ndarray:
    """The token ids the penalties look at: the last ``last_n`` (-1 = all, 0 = none)."""
    if last_n == 0 or len(history) == 0:
        return np.empty(0, dtype=np.int64)
    window = history if last_n < 0 else history[-last_n:]
    return np.asarray(window, dtype=np.int64)


def apply_penalties(
    logits: np.ndarray,
    recent_tokens: Sequence[int] | np.ndarray,
    repeat_penalty: float = 1.0,
    presence: float = 0.0,
    frequency: float = 0.0,
) -> np.ndarray:
    """Return a penalised copy of ``logits`` (llama.cpp semantics); the input is never written.

    For each *distinct* token in ``recent_tokens``: the repeat penalty divides a
    positive logit and multiplies a non-positive one (so it always pushes the
    token down), then ``count * frequency + presence`` is subtracted. Only those
    few entries are touched. Ids outside the logits (a tokenizer with more
    special tokens than the model's output layer) cannot be penalised and are
    skipped.
    """
    logits = np.asarray(logits)
    out = np.array(logits, dtype=np.float64 if logits.dtype == np.float64 else np.float32)
    toks = np.asarray(recent_tokens, dtype=np.int64)
    if toks.size == 0:
        return out
    toks, counts = np.unique(np.asarray(toks), return_counts=True)
    inside = (toks >= 0) & (toks < out.size)
    toks, counts = toks[inside], counts[inside]
    vals: np.ndarray = out[toks]
    if repeat_penalty != 1.0:
        vals = np.where(vals <= 0, vals * repeat_penalty, vals / repeat_penalty)
    vals = vals - (counts * frequency + presence)
    out[toks] = vals
    return out


def top_k_indices(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest logits, ascending; ties at the boundary go to lower ids. NaN ranks as -inf.

    On a big vocabulary a cheap pre-filter runs first: the logits of every
    ``n // 2048``-th token give a threshold that about ``2k`` tokens clear, and
    the exact selection then runs on those few (~5x faster than
    ``np.argpartition`` over 150k). If fewer than ``k`` clear it, the full
    selection runs instead, so the result never depends on the guess.
    """
    n = logits.size
    if k <= 0 or k >= n:
        return np.arange(n)
    if n >= 8 * _PREFILTER_SAMPLE and k * 8 <= _PREFILTER_SAMPLE:
        stride = n // _PREFILTER_SAMPLE
        sample = logits[::stride]
        j = sample.size - (2 * k // stride + 2)
        cut = np.partition(sample, j)[j]
        # Every value >= cut is a candidate, so all ties of the k-th value are too.
        cand = np.flatnonzero(logits >= cut)
        if cand.size >= k:
            return cand[_top_k_exact(logits[cand], k)]
    return _top_k_exact(logits, k)


def _top_k_exact(logits: np.ndarray, k: int) -> np.ndarray:
    # np.argpartition is O(n) but picks arbitrarily among equal values at the
    # k-th place; when that value also occurs outside the chosen set, the tied
    # ids are re-chosen lowest-first.
    n = logits.size
    if k >= n:
        return np.arange(n)
    part = np.argpartition(logits, n - k)[n - k:]
    vals = logits[part]
    t = vals.min()
    if t != t:  # argpartition ranks NaN highest, so any NaN lands here; only then pay for a cleanup
        return _top_k_exact(_clean(logits), k)
    above = part[vals > t]
    if np.count_nonzero(logits == t) != k - above.size:
        part = np.concatenate([above, np.flatnonzero(logits == t)[: k - above.size]])
    return np.sort(part)


def top_k_mask(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the ``k`` largest logits (ties: lower ids win); ``k <= 0`` disables."""
    x = _clean(logits)
    if k <= 0 or k >= x.size:
        return x
    out = np.full_like(x, -np.inf)
    keep = top_k_indices(x, k)
    out[keep] = x[keep]
    return out


def top_p_mask(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest highest-probability set whose probability sums to >= ``p``.

    Probabilities are the softmax of ``logits`` as given (temperature comes
    later in the chain). The set always holds at least one token; order among
    equal logits is by token id. ``p >= 1`` disables.
    """
    x = _clean(logits)
    if p >= 1.0 or x.size == 0:
        return x
    order = np.argsort(-x, kind="stable")
    w = _weights(x[order])
    n = _top_p_count(w, p, w.sum())
    out = np.full_like(x, -np.inf)
    out[order[:n]] = x[order[:n]]
    return out


def min_p_mask(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Keep tokens with ``p >= min_p * p_max``, i.e. ``logit >= max + log(min_p)``.

    Done in log space so no softmax is needed and a hand-made boundary
    (``log(0.5)`` against ``min_p=0.5``) compares exactly. ``min_p <= 0`` disables.
    """
    x = _clean(logits)
    if min_p <= 0.0 or x.size == 0:
        return x
    cut = x.max() + np.log(min_p)
    return np.where(x >= cut, x, -np.inf)


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Divide logits by ``temperature`` (> 0); lower is sharper. Greedy never gets here."""
    if not temperature > 0.0:
        raise ValueError("temperature must be > 0 here; temperature 0 means greedy argmax")
    return _clean(logits) / temperature


def softmax(logits: np.ndarray) -> np.ndarray:
    """Float64 probabilities; ``-inf`` gives 0, and any ``+inf`` logits share all the mass."""
    x = _clean(logits)
    w = _weights(x)
    total = w.sum()
    if not total > 0.0:
        raise SamplingError("no token left to sample: every logit is -inf or NaN")
    return w / total


# --------------------------------------------------------------------------- sampler


class Sampler:
    """Per-request sampler; build it with :func:`make_sampler`.

    Which candidate-reduction strategy to use is decided here, once, so the
    per-token call does no parameter branching beyond a couple of constants.
    """

    __slots__ = ("params", "rng", "_penalise", "_reduce", "_top_p", "_min_p")

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        p = params
        self._penalise = p.penalty_last_n != 0 and (
            p.repeat_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0
        )
        # top_p / min_p still to apply to the candidates after the reduction.
        self._top_p = p.top_p
        self._min_p = p.min_p
        if p.top_k > 0:
            self._reduce = self._reduce_top_k
        elif p.top_p < 1.0:
            self._reduce = self._reduce_top_p
            self._top_p = 1.0  # the reduction already applied it exactly
        elif p.min_p > 0.0:
            self._reduce = self._reduce_min_p
            self._min_p = 0.0
        else:
            self._reduce = self._reduce_none

    # ---- public

    def __call__(self, history: Sequence[int], logits: np.ndarray) -> int:
        """Pick the next token: argmax when greedy, else a draw from :meth:`distribution`."""
        if self.params.greedy and not self._penalise and logits.ndim == 1:
            return _argmax(logits)  # the hot path: no copy, no allocation
        x = self._penalised(history, logits)
        if self.params.greedy:
            return _argmax(x)
        ids, probs = self._sparse(x)
        return int(ids[self._draw(probs)])

    def distribution(self, history: Sequence[int], logits: np.ndarray) -> np.ndarray:
        """The exact float64 vector (vocab-sized, sums to 1) that ``__call__`` samples from."""
        ids, probs = self.sparse_distribution(history, logits)
        dense = np.zeros(np.shape(logits)[0], dtype=np.float64)
        dense[ids] = probs
        return dense

    def sparse_distribution(self, history: Sequence[int], logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`distribution` as (ascending token ids, their probabilities); cheaper to use."""
        x = self._penalised(history, logits)
        if self.params.greedy:
            return np.array([_argmax(x)]), np.ones(1)
        return self._sparse(x)

    def sample(self, probs: np.ndarray) -> int:
        """Draw an index from non-negative weights (need not be normalised) with this RNG.

        Speculative decoding uses it for the residual ``max(0, p - q)``.
        """
        return self._draw(np.asarray(probs, dtype=np.float64))

    # ---- internals

    def _penalised(self, history: Sequence[int], logits: np.ndarray) -> np.ndarray:
        if np.ndim(logits) != 1:
            raise ValueError(f"expected a 1-D logits vector, got shape {np.shape(logits)}")
        if not self._penalise:
            return logits
        p = self.params
        window = recent_window(history, p.penalty_last_n)
        return apply_penalties(logits, window, p.repeat_penalty, p.presence_penalty, p.frequency_penalty)

    def _sparse(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids, cand = self._reduce(x)  # ascending ids, clean float64 logits
        if self._top_p < 1.0 or self._min_p > 0.0:
            cand = min_p_mask(top_p_mask(cand, self._top_p), self._min_p)
        keep = cand > -np.inf
        if not keep.all():
            ids, cand = ids[keep], cand[keep]
        w = _weights(cand / self.params.temperature)
        total = w.sum()
        if not total > 0.0:
            raise SamplingError("no token left to sample: every logit is -inf or NaN")
        w /= total
        return ids, w

    def _reduce_top_k(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = top_k_indices(x, self.params.top_k)
        return ids, _clean(x[ids])

    def _reduce_top_p(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # top_p needs the probability order, but sorting 150k logits costs 10-30 ms.
        # Take the top k by argpartition instead, growing k until those hold
        # mass >= p of the full softmax; the answer is then the same prefix a
        # full sort would give (same tie order, same normaliser).
        x = _clean(x)
        w_all = _weights(x)
        total = w_all.sum()
        k = _TOP_P_FIRST_GUESS
        while True:
            ids = top_k_indices(x, k)
            if ids.size == x.size or w_all[ids].sum() >= (self.params.top_p - _TOP_P_EPS) * total:
                break
            k *= 8
        order = np.argsort(-x[ids], kind="stable")
        n = _top_p_count(w_all[ids[order]], self.params.top_p, total)
        ids = np.sort(ids[order[:n]])
        return ids, x[ids]

    def _reduce_min_p(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = _clean(x)
        ids = np.flatnonzero(x >= x.max() + np.log(self.params.min_p))
        return ids, x[ids]

    def _reduce_none(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = _clean(x)
        ids = np.flatnonzero(x > -np.inf)
        return ids, x[ids]

    def _draw(self, probs: np.ndarray) -> int:
        # Inverse CDF with exactly one uniform per draw: reproducible, and identical
        # whether ``probs`` is the dense vector or its nonzero entries in id order.
        cum = np.cumsum(probs)
        total = cum[-1] if cum.size else 0.0
        if not (np.isfinite(total) and total > 0.0) or (probs < 0).any():
            raise SamplingError("cannot sample: probabilities must be finite, non-negative and not all zero")
        i = int(np.searchsorted(cum, self.rng.random() * total, side="right"))
        if i >= cum.size:  # u * total rounded up to total: take the last token with mass
            i = int(np.flatnonzero(probs > 0)[-1])
        return i


def make_sampler(params: SamplingParams) -> Sampler:
    """Build the sampler for one request (RNG seeded from ``params.seed``; None = OS entropy)."""
    return Sampler(params)


# --------------------------------------------------------------------------- helpers


def _argmax(x: np.ndarray) -> int:
    """Greedy pick, lowest id on ties; checks only the winner, so it stays O(1) extra."""
    i = int(np.argmax(x))
    v = x[i]
    if v != v:  # argmax returns the first NaN if there is one
        x = _clean(x)
        i = int(np.argmax(x))
        v = x[i]
    if v == -np.inf:
        raise SamplingError("no token left to sample: every logit is -inf or NaN")
    return i


def _clean(logits: np.ndarray) -> np.ndarray:
    """Float64 copy with NaN turned into -inf (removed), for the small/pure paths."""
    x = np.array(logits, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D logits vector, got shape {x.shape}")
    nan = np.isnan(x)
    if nan.any():
        x[nan] = -np.inf
    return x


def _weights(x: np.ndarray) -> np.ndarray:
    """Unnormalised softmax weights exp(x - max); +inf logits share the mass equally."""
    if x.size == 0:
        return np.zeros(0)
    m = x.max()
    if m == np.inf:
        return (x == np.inf).astype(np.float64)
    if m == -np.inf:
        return np.zeros_like(x)
    return np.exp(x - m)


def _top_p_count(sorted_weights: np.ndarray, p: float, total: float) -> int:
    """How many of the descending ``sorted_weights`` top_p keeps (at least 1)."""
    cum = np.cumsum(sorted_weights)
    n = int(np.searchsorted(cum, (p - _TOP_P_EPS) * total, side="left")) + 1
    return min(n, sorted_weights.size)
