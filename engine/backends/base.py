"""The Backend protocol: the small surface the shared decode loop drives.

Speculative decoding, the prefix cache, sampling and metrics are written once
on top of this. A backend owns exactly one KV sequence; ``kv_len`` tokens of
it are valid and ``truncate`` rolls it back.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
import threading
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ..models.vocab import Vocab


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


class BatchBackend(Protocol):
    """Several sequences in one context, stepped together: what continuous
    batching needs. Sequences are numbered 0..n_seq-1; positions are per sequence."""
    n_seq: int
    n_ctx: int     # KV entries in all sequences together
    n_batch: int   # most tokens one decode() takes

    def decode(self, rows: Sequence[tuple[int, Sequence[int], int, bool]]) -> list[np.ndarray | None]:
        """One batch of rows (seq id, tokens, first position, want logits of the
        last token); per row its logits (a view the next call overwrites) or None."""

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> None:
        """Drop a sequence's entries at positions [p0, p1) (p1 < 0: to the end)."""

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Make ``dst`` hold the entries of ``src`` at positions [0, n), and nothing else."""

    def seq_len(self, seq: int) -> int:
        """How many positions a sequence holds in the KV (0 when empty)."""

    def close(self) -> None:
        """Free the context."""


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

    def set_abort(self, flag: threading.Event | None) -> None:
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

    def open_batch(self, n_seq: int, n_ctx: int) -> BatchBackend | None:
        """A context for ``n_seq`` sequences on this model's weights (``n_ctx``
        KV entries in all), or None where this backend serves one sequence at a
        time. ``generate_step`` on the backend itself stays the single-sequence path."""

    def grammar(self, gbnf: str, triggers: tuple[str, ...] = ()) -> TokenConstraint:
        """Compile GBNF grammar text into a constraint for one request
        (grammar.GrammarError if it cannot be parsed, grammar.NoGrammar if this backend has
        none). ``triggers``: a lazy grammar, waiting for one of these patterns (see llama.cpp)."""

    def memory_report(self) -> dict[str, int]:
        """Bytes actually allocated, by part: weights, kv, compute, ..."""

    def close(self) -> None:
        """Free native memory. The object is unusable afterwards."""
