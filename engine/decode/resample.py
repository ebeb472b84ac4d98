"""A tool call that fails its schema is sampled again, a few times, before it is reported invalid.

The grammar writes a call's shape and most of its schema; what no grammar can say (a number's
bound, ``multipleOf``, a pattern it could not translate) the validator checks once the call is
whole. A call that fails sends the reply back to where its call section began: the tokens from
there are dropped, the KV is cut back, the grammar is set back to that point, and sampling goes
on with a fresh draw (warmed to RESAMPLE_TEMPERATURE where the request was greedy, which would
only write the same call again). Nothing of the section was shown yet (calls are given out once
their section is whole), so a caller never sees a call that failed. After RESAMPLES draws the
section is given back as text, and the reply's notes say why.

A ``Rewind`` gives the step generator from a point of the reply (``SequenceRewind``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

import numpy as np

from ..types import SamplingParams
from .constraint import ConstrainedSampler
from .generate import Steering, Steps, generate_step
from .sampling import make_sampler

if TYPE_CHECKING:
    from ..backends.base import SeqView
    from .metrics import GenerationStats

RESAMPLES = 2                 # draws after the first
RESAMPLE_TEMPERATURE = 0.7    # for a greedy request, whose next draw would be the same


def resample_params(params: SamplingParams, attempt: int) -> SamplingParams:
    """The request's sampling for its ``attempt``-th draw again: warmed where it was greedy, on a seed of
    its own (from the request's, where it has one) so that a draw differs from the last and repeats."""
    seed = None if params.seed is None else params.seed + 7919 * attempt
    if params.temperature > 0:
        return replace(params, seed=seed)
    return replace(params, temperature=RESAMPLE_TEMPERATURE, top_k=40, top_p=0.95, min_p=0.05,
                   seed=attempt if seed is None else seed)


class Rewind(Protocol):
    def rewind(self, kept: int, attempt: int) -> Steps:
        """The step generator from the reply's first ``kept`` tokens on, sampling anew (draw ``attempt``)."""


class Redraws:
    """One reply's draws again: at most RESAMPLES, each counted in the stats."""

    def __init__(self, rewind: Rewind | None, stats: "GenerationStats") -> None:
        self.rewind, self.stats, self.draws = rewind, stats, 0

    def left(self) -> bool:
        return self.rewind is not None and self.draws < RESAMPLES

    def again(self, steps: Steps, kept: int) -> Steps:
        """The step generator that draws the failed section anew; ``steps`` is closed if it is not that."""
        assert self.rewind is not None
        self.draws += 1
        self.stats.tool_resamples += 1
        again = self.rewind.rewind(kept, self.draws)
        if again is not steps:
            steps.close()
        return again


class SequenceRewind:
    """Rewinds for one sequence: the history and its KV cut back, the grammar set back."""

    def __init__(self, backend: "SeqView", prompt_len: int, history: list[int],
                 sampler: Callable[[Sequence[int], np.ndarray], int], params: SamplingParams,
                 steer: Steering | None = None) -> None:
        self.backend, self.prompt_len, self.history = backend, prompt_len, history
        self.sampler, self.params, self.steer = sampler, params, steer

    def rewind(self, kept: int, attempt: int) -> Steps:
        keep = self.prompt_len + kept
        del self.history[keep:]
        self.backend.truncate(keep - 1)  # the last kept token is fed again: its logits start the new draw
        inner = make_sampler(resample_params(self.params, attempt))
        sampler: Callable[[Sequence[int], np.ndarray], int] = inner
        if isinstance(self.sampler, ConstrainedSampler):
            self.sampler.rewind(keep, inner)
            sampler = self.sampler
        return generate_step([self.history[-1]], sampler, self.history, self.steer, prompt=False)
