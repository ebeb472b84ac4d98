"""The Backend protocol: the small surface the shared decode loop drives.

Speculative decoding, the prefix cache, sampling and metrics are written once
on top of this. A backend's single-sequence methods (``forward``, ``kv_len``,
``truncate``, ``snapshot``) act on its first KV sequence; ``kv_len`` tokens of it
are valid and ``truncate`` rolls it back. The engine core steps every request
through the backend's :class:`SeqPool` (``pool()``): one batch per step over
several sequences where the backend has them (llama.cpp), the one sequence
otherwise (``SingleSequencePool``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import HearthError
from ..models.vocab import Vocab
from ..types import WANT_ALL, WANT_LAST, WANT_NONE


class TokenConstraint(Protocol):
    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every token not allowed next at -inf."""

    def accept(self, token: int) -> None:
        """Advance past ``token``."""

    def reset(self) -> None:
        """Back to the start, as if no token had been accepted."""

    def close(self) -> None:
        """Free the constraint's native state."""


@dataclass(slots=True, frozen=True)
class BackendInfo:
    """What a loaded backend says about itself, for the window, the CLI and the
    benchmarks (so no caller reaches into a backend's attributes).

    ``backend``: "llama_cpp" or "hf"; ``runtime``: what computes ("cpu",
    "cuda", "vulkan", "metal"); ``device``: where the weights are ("CPU",
    "Vulkan0", "cuda:0", "cuda:0+cpu"...); ``quant``: the label the window
    shows (a GGUF's own file type, or the bitsandbytes choice / torch dtype).
    """
    backend: str
    name: str
    path: str
    quant: str
    runtime: str = "cpu"
    device: str = "CPU"
    threads: int | None = None
    n_ctx: int = 0
    n_gpu_layers: int = 0
    kv_type: str = "f16"
    weight_bytes: int = 0
    exactness: str = "exact"  # "exact" (batch-invariant kernels) or "fast"; see LlamaCppBackend
    projector: str = ""       # the vision projector (mmproj) loaded beside the model, if any: it sees images
    threads_poll: int | None = None  # llama.cpp: the poll level of Hearth's own thread pool; None: none


Row = tuple[int, Sequence[int], int]  # (sequence, tokens to append to its KV, types.WANT_*)


class Flag(Protocol):
    """What an abort flag must answer (a threading.Event does)."""

    def is_set(self) -> bool: ...


class SeqPool(Protocol):
    """A backend's KV sequences, stepped together: what the engine core drives.

    Sequences are numbered 0..n_seq-1; each holds up to ``n_ctx`` tokens, at its own positions
    (a sequence's logits do not depend on what the others hold). ``batch`` appends every row's
    tokens to its sequence in one batch; on failure nothing of the batch stays in the KV."""
    n_seq: int
    max_seq: int   # the most sequences it can hold (1: requests are served one at a time)
    n_ctx: int     # tokens one sequence holds
    n_batch: int   # most tokens one batch() takes in one pass

    def batch(self, rows: Sequence[Row]) -> list[np.ndarray | None]:
        """Per row: None (WANT_NONE), the last token's logits (WANT_LAST: a view the next call
        may overwrite) or one row of logits per token (WANT_ALL)."""

    def seq_len(self, seq: int) -> int:
        """How many tokens sequence ``seq`` holds."""

    def seq_truncate(self, seq: int, n: int) -> None:
        """Drop sequence ``seq``'s tokens from the ``n``-th on."""

    def seq_copy(self, src: int, dst: int, n: int) -> None:
        """Make ``dst`` hold ``src``'s first ``n`` tokens, and nothing else."""

    def can_shift(self, seq: int) -> bool:
        """Whether sequence ``seq``'s KV can be moved to other positions (``seq_move``)."""

    def seq_move(self, seq: int, moves: Sequence[tuple[int, int, int]]) -> None:
        """Move chunks of sequence ``seq``'s KV back into place without computing them again: each
        ``(src, dst, n)`` takes ``n`` tokens from index ``src`` to ``dst``, right after the last
        chunk; the gaps and what follows the last chunk are removed (a RoPE model's context shift).
        Not bit-identical to computing the moved tokens at their new positions."""

    def seq_snapshot(self, seq: int) -> Any:
        """A copy of sequence ``seq``'s KV (the prefix cache's kind of snapshot)."""

    def seq_restore(self, seq: int, state: Any) -> None:
        """Make sequence ``seq`` hold a snapshot."""

    def set_n_seq(self, n_seq: int) -> None:
        """Hold ``n_seq`` sequences from now on; every sequence is emptied."""

    def set_abort(self, flag: Flag | None) -> None:
        """As ``Backend.set_abort``: a decode may stop early once ``flag`` is set."""


class SingleSequencePool:
    """The SeqPool of a backend with one KV sequence (transformers, a test's backend): a row at a
    time, through its single-sequence methods."""

    n_seq = max_seq = 1

    def __init__(self, backend: "Backend") -> None:
        self.backend = backend
        self.n_ctx = backend.n_ctx
        self.n_batch = 1 << 30  # forward() takes any length

    def batch(self, rows: Sequence[Row]) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = []
        for seq, tokens, want in rows:
            if seq != 0:
                raise HearthError(f"this backend holds one sequence, not sequence {seq}")
            logits = self.backend.forward(tokens, all_logits=want == WANT_ALL)
            out.append(None if want == WANT_NONE else logits)
        return out

    def seq_len(self, seq: int) -> int:
        return self.backend.kv_len

    def seq_truncate(self, seq: int, n: int) -> None:
        self.backend.truncate(n)

    def seq_copy(self, src: int, dst: int, n: int) -> None:
        self.backend.truncate(n)

    def can_shift(self, seq: int) -> bool:
        return False  # transformers' cache and a test's backend hold positions as computed

    def seq_move(self, seq: int, moves: Sequence[tuple[int, int, int]]) -> None:
        raise HearthError("this backend's KV cannot be shifted")

    def seq_snapshot(self, seq: int) -> Any:
        return self.backend.snapshot()

    def seq_restore(self, seq: int, state: Any) -> None:
        self.backend.restore(state)

    def set_n_seq(self, n_seq: int) -> None:
        if n_seq != 1:
            raise HearthError("this backend holds one sequence: requests are served one at a time")
        self.backend.truncate(0)

    def set_abort(self, flag: Flag | None) -> None:
        self.backend.set_abort(flag)


@runtime_checkable
class Backend(Protocol):
    name: str                 # "llama_cpp" or "hf"
    n_ctx: int                # the context window this instance was created with
    n_vocab: int              # logits width
    eos_ids: frozenset[int]   # every end-of-generation token (EOS, EOT, EOM...)
    chat_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool             # whether a prompt starts with BOS (unless the template wrote it)

    def describe(self) -> BackendInfo:
        """Name, quantization label, path, runtime, device and threads, for display."""

    def vocab(self) -> Vocab:
        """The tokenizer's id -> token table and model size, for draft checks."""

    def open_draft(self, path: str | os.PathLike[str], *, n_threads: int | None = None) -> "Backend":
        """Load another model on this backend kind and context size, to draft for this one."""

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        """Text -> ids. ``special`` parses control tokens like ``<|im_start|>`` in ``text``."""

    @property
    def sees_images(self) -> bool:
        """Whether a vision projector is loaded beside the model."""

    def tokenize_images(self, pieces: Sequence[Any], *, add_bos: bool) -> list[int]:
        """Text pieces and ``images.DecodedImage``s, in order -> ids; an image's positions are
        ``engine.media`` ids (below zero). errors.NoVisionError where no projector is loaded."""

    def media_name(self, slot: int) -> str:
        """The image behind an ``engine.media`` slot, named the same in every process (its
        SHA-256 and appearance), so a prefix holding it can be stored on disk."""

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token contributes to the output (b"" for control tokens)."""

    @property
    def kv_len(self) -> int:
        """How many tokens the KV cache currently holds."""

    def forward(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Append ``tokens`` to the KV cache; return logits.

        ``all_logits=False``: shape (n_vocab,) for the last position.
        ``all_logits=True``: shape (len(tokens), n_vocab), one row per new position
        (used to verify draft tokens in one pass).
        The returned array may be a view that the next call overwrites; copy to keep it.
        """

    def set_abort(self, flag: Flag | None) -> None:
        """While ``flag`` is given, a long ``forward`` may stop early once it is
        set, raising errors.Cancelled with the KV as it was before the call."""

    def truncate(self, n: int) -> None:
        """Drop every KV entry at position >= n."""

    def snapshot(self) -> Any:
        """An opaque copy of the current KV state (for the prefix cache)."""

    def restore(self, state: Any) -> None:
        """Make the KV cache equal to a snapshot taken from this backend."""

    def nbytes(self, state: Any) -> int:
        """Memory a snapshot occupies."""

    def state_bytes(self, state: Any) -> bytes | bytearray:
        """A snapshot as bytes, for the on-disk prefix store."""

    def state_from_bytes(self, n_tokens: int, data: bytearray) -> Any:
        """Inverse of ``state_bytes`` for a snapshot of ``n_tokens`` tokens."""

    def state_identity(self) -> dict[str, str]:
        """Everything besides the model file that changes snapshot bytes
        (backend, its state format version, KV dtype...): the disk-cache key."""

    def pool(self) -> SeqPool:
        """The KV sequences the engine core steps together (``SingleSequencePool(self)`` for a
        backend with one)."""

    def grammar(self, gbnf: str, triggers: tuple[str, ...] = ()) -> TokenConstraint:
        """Compile GBNF grammar text into a constraint for one request
        (grammar.GrammarError if it cannot be parsed, grammar.NoGrammar if this backend has
        none). ``triggers``: a lazy grammar, waiting for one of these patterns (see llama.cpp)."""

    def memory_report(self) -> dict[str, int]:
        """Bytes actually allocated, by part: weights, kv, compute, ..."""

    def close(self) -> None:
        """Free native memory. The object is unusable afterwards."""


class SeqView:
    """One sequence of a backend's pool seen as a single-sequence backend: the KV operations a
    request's pipeline runs itself (how many tokens it holds, cutting it back after rejected drafts,
    a snapshot for the prefix cache), and ``forward`` for what runs outside a step (a draft model's
    own sequence; a one-off measurement between steps, on the core's thread)."""

    __slots__ = ("backend", "pool", "seq")

    def __init__(self, backend: "Backend", pool: SeqPool, seq: int) -> None:
        self.backend, self.pool, self.seq = backend, pool, seq

    @property
    def n_ctx(self) -> int:
        return self.pool.n_ctx

    @property
    def n_vocab(self) -> int:
        return self.backend.n_vocab

    @property
    def eos_ids(self) -> frozenset[int]:
        return self.backend.eos_ids

    @property
    def kv_len(self) -> int:
        return self.pool.seq_len(self.seq)

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return self.backend.tokenize(text, add_bos=add_bos, special=special)

    def token_bytes(self, token_id: int) -> bytes:
        return self.backend.token_bytes(token_id)

    def forward(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        got = self.pool.batch([(self.seq, tokens, WANT_ALL if all_logits else WANT_LAST)])[0]
        assert got is not None
        return got

    def truncate(self, n: int) -> None:
        self.pool.seq_truncate(self.seq, n)

    def snapshot(self) -> Any:
        return self.pool.seq_snapshot(self.seq)

    def restore(self, state: Any) -> None:
        self.pool.seq_restore(self.seq, state)

    def nbytes(self, state: Any) -> int:
        return self.backend.nbytes(state)

    def vocab(self) -> Vocab:
        return self.backend.vocab()
