"""Speculative decoding for one target: which drafts it uses, and the step generator of a reply.

The engine holds one :class:`Speculation`. ``configure`` chooses the draft ("none",
"ngram", "model", "auto" or a draft file to load), loads and checks a draft model, and
measures once what drafting costs on this machine; ``steps`` gives a reply's step
generator (``speculative_step``) with the drafts it may use, or None for plain decoding.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import HearthError
from ..models.vocab import Vocab, check_draft_compatible
from ..sizing.drafts import draft_header_vocab, find_draft_for
from .controller import SpecController, SpecStats
from .costs import measure_round_costs, measure_verify_costs, model_draft_hopeless
from .drafts import DraftSource, ModelDraft, NgramDraft
from .step import speculative_step

if TYPE_CHECKING:
    from ..backends.base import Backend, SeqView
    from ..decode.generate import Steps
    from ..decode.sampling import Sampler


class Speculation:
    """The drafts one target backend speculates with, and the controller that adapts them."""

    def __init__(self, target: "Backend") -> None:
        self.target = target
        self.draft: ModelDraft | None = None  # the draft model on its first sequence
        self._seq_drafts: dict[int, ModelDraft] = {}  # on the others, one per sequence of the target
        self.kind = "none"
        self.ctl: SpecController | None = None
        self.draft_costs: tuple[float, float, float] | None = None  # measure_round_costs()
        self.verify_costs: tuple[float, dict[int, float]] | None = None  # measure_verify_costs()

    def configure(self, kind: str | os.PathLike[str] | None, *, k: int | None = None,
                  n_threads: int | None = None, force: bool = False) -> None:
        """Choose the draft: "none", "ngram", "model" (the loaded draft), "auto"
        (every draft on offer) or a GGUF path to load as the draft model.

        Speculation measures itself against plain decoding and switches itself
        off where it does not pay, unless ``force`` (benchmarks of one draft
        kind). ``k`` fixes the draft length instead of adapting it."""
        kind = "none" if kind is None else str(kind)
        note = None
        if kind not in ("none", "ngram", "model", "auto"):
            self._load_draft(Path(kind), n_threads)
            kind = "model"
        elif kind == "auto" and self.draft is None:
            found = find_draft_for(self.target.vocab())
            if found is not None:
                try:
                    self._load_draft(found, n_threads)
                except HearthError as e:  # a file Auto picked (not the user) will not load: say so, keep n-gram
                    note = f"model draft {found.name} not used: {e}"
        if kind == "model" and self.draft is None:
            raise HearthError("no draft model is loaded; choose a draft model file first")
        if kind == "auto" and self.draft is not None:
            note = self._model_draft_hopeless()
        self.kind = kind
        if kind == "auto":
            # The n-gram lookup: asked every round, verified where it pays; else a model draft or plain.
            fallback = ["model"] if self.draft and not note else []
            self.ctl = SpecController(fallback if force and fallback else fallback + ["plain"],
                                      k_fixed=k, free="ngram")
            self._seed_verify_costs(self.ctl)
        else:
            modes = {"none": [], "ngram": ["ngram"], "model": ["model"]}[kind]
            self.ctl = SpecController(modes if force else modes + ["plain"], k_fixed=k) if modes else None
        if note and self.ctl is not None:
            self.ctl.pending_notes.append(note)

    def steps(self, target: "SeqView", pending: Sequence[int], sampler: "Sampler", history: list[int], *,
              sees_images: bool) -> tuple[Steps, SpecStats] | None:
        """A reply's speculative step generator on the target's sequence ``target``, and its stats, or
        None to decode plainly. ``sees_images``: the prompt holds images, which a draft model cannot see."""
        if self.ctl is None:
            return None
        spec = SpecStats()
        drafts: dict[str, DraftSource] = {"ngram": NgramDraft()}
        ctl = self.ctl
        if self.draft is not None and sees_images:
            # The draft model cannot see the images: this reply drafts by n-gram lookup only.
            ctl = SpecController(["plain"], k_fixed=ctl.k_fixed, free="ngram")
            ctl.pending_notes.append("the draft model cannot see images: n-gram drafts only")
        elif self.draft is not None:
            drafts["model"] = FollowingDraft(self, target)
        return speculative_step(target, drafts, ctl, pending, sampler, history, spec), spec

    def draft_on(self, seq: int) -> ModelDraft:
        """The draft model on the sequence that drafts for the target's sequence ``seq``."""
        assert self.draft is not None
        if seq == 0:
            return self.draft
        if seq not in self._seq_drafts:
            self._seq_drafts[seq] = self.draft.for_seq(seq)
        return self._seq_drafts[seq]

    def set_n_seq(self, n_seq: int) -> None:
        """The target now holds ``n_seq`` sequences: the draft model holds as many (each emptied)."""
        self._seq_drafts.clear()
        if self.draft is not None:
            self.draft.backend.pool().set_n_seq(n_seq)
            self.draft.reset()

    def close(self) -> None:
        if self.draft is not None:
            self.draft.backend.close()

    def _seed_verify_costs(self, ctl: SpecController) -> None:
        """Seed auto's cost line for verifying n-gram drafts: measured once per engine (~0.9 s).
        Without room, a KV that cannot be cut back or a token, it fits the line from its rounds."""
        with contextlib.suppress(ValueError, IndexError, HearthError):
            if ctl.k_fixed:
                return
            self.verify_costs = self.verify_costs or measure_verify_costs(self.target,
                                                                          self.target.tokenize("A")[0])
            ctl.seed_costs(*self.verify_costs)

    def _model_draft_hopeless(self) -> str | None:
        """Why ``auto`` leaves the model draft out on this machine, or None to try it.

        Before a model draft's first use costs a prefill of the conversation on the
        draft, measure (~0.5 s on a CPU, once per draft) what a target step, a verified
        token and a draft step cost here (``costs.model_draft_hopeless``).
        """
        if self.draft_costs is None:
            token = self.target.tokenize("Hello")[0]
            assert self.draft is not None  # only asked with a draft loaded
            try:
                self.draft_costs = measure_round_costs(self.target, self.draft.backend, token)
            except ValueError:
                return None  # no room to measure: let the controller find out
        return model_draft_hopeless(*self.draft_costs)

    def _load_draft(self, path: Path, n_threads: int | None) -> None:
        """Load a draft on the target's backend kind, after checking that its
        vocabulary matches the target's id for id."""
        header = draft_header_vocab(path)
        if header is not None:
            self._check_draft(path, header)  # before loading: the header is enough
        backend = self.target.open_draft(path, n_threads=n_threads)
        try:
            self._check_draft(path, backend.vocab())
        except HearthError:
            backend.close()
            raise
        if self.draft is not None:
            self.draft.backend.close()
        self.draft = ModelDraft(backend, n_vocab_target=self.target.n_vocab)
        self._seq_drafts.clear()
        self.draft_costs = None

    def _check_draft(self, path: Path, draft_vocab: Vocab) -> None:
        target = self.target.vocab()
        why = check_draft_compatible(target, draft_vocab)
        if why:
            raise HearthError(f"{Path(path).name} cannot draft for {target.name}: {why}")


class FollowingDraft:
    """The draft model on the draft sequence of whichever sequence the target is on now. A reply that is
    preempted resumes on another sequence (its view moves); bound once, it would go on drafting on its old
    draft sequence beside the request that took that sequence over, and each of the two would re-read its
    whole history into the draft at every round."""

    kind = "model"

    def __init__(self, speculation: Speculation, target: "SeqView") -> None:
        self.speculation, self.target = speculation, target
        self.catchup_s = 0.0

    def propose(self, history: Sequence[int], k: int, pick: Callable) -> tuple[list[int], list]:
        draft = self.speculation.draft_on(self.target.seq)
        try:
            return draft.propose(history, k, pick)
        finally:
            self.catchup_s = draft.catchup_s
