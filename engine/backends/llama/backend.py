"""GGUF models through llama-cpp-python's low-level API.

The high-level ``Llama`` class hides what the shared loop needs (per-position
logits for draft verification, KV truncation, per-sequence state snapshots),
so we drive ``llama_decode`` ourselves with one reusable batch.
"""
from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

import llama_cpp as lc

from ...config import EXACTNESS, default_exactness
from ...errors import HearthError, NoVisionError
from ...inputs.images import DecodedImage
from ...inputs.media import has_media
from ...models.gguf import GgufInfo, model_info
from ...types import WANT_ALL, WANT_LAST, WANT_NONE
from ..base import BackendInfo, Flag, Row
from ...models.vocab import Vocab
from . import devices, init, state
from .grammar import LlamaGrammar
from .log import _log_mark, _log_since, load_failure, parse_buffer_sizes
from .image_decode import forward_mixed
from .mtmd import Projector
from .params import KV_TYPES, ExactKernels, context_params, kv_streams, model_params
from .sequences import SeqPositions, Streams, check_room
from .threadpool import ThreadPool, check_poll, default_threads

log = logging.getLogger("hearth.llama_cpp")

class LlamaCppBackend:
    name = "llama_cpp"
    max_seq = 64  # sequences one context may hold (llama.cpp's own limit is 256)

    def __init__(self, path: str | os.PathLike[str], *, n_ctx: int = 4096, n_batch: int = 512,
                 n_threads: int | None = None, n_gpu_layers: int = 0, kv_type: str = "f16",
                 flash_attn: bool | None = None, repack: bool = False,
                 info: GgufInfo | None = None, exactness: str | None = None, threads_poll: int | None = None,
                 mmproj: str | os.PathLike[str] | None = None, tensor_split: tuple[float, ...] | None = None,
                 n_seq: int = 1) -> None:
        self._pool: ThreadPool | None = None
        self._projector: Projector | None = None
        # Parse the header ourselves first: a missing/truncated/corrupt file gets
        # a clear message here instead of a NULL pointer from C.
        self.info = info or model_info(path)
        self.path = Path(path)
        if kv_type not in KV_TYPES:
            raise HearthError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        exactness = exactness or default_exactness()
        if exactness not in EXACTNESS:
            raise HearthError(f"unknown exactness profile {exactness!r}; choose exact or fast")
        # threads_poll: None leaves the threads to ggml (a throw-away pool per graph, polling at
        # its default); 0-100 runs every graph on a pool of our own at that poll level (threadpool.py).
        self.threads_poll = None if threads_poll is None else check_poll(threads_poll)
        if exactness == "fast":
            repack = True
            flash_attn = True if flash_attn is None else flash_attn
        self.exactness = exactness
        self._model = self._ctx = self._batch = None
        self.n_seq = 0
        init()  # log callback, then llama_backend_init: once per process
        self._exact_hold = exactness == "exact"
        if self._exact_hold:  # before any graph of this model runs; released in close()
            ExactKernels.hold()
        mark = _log_mark()
        n_threads = n_threads or default_threads()
        self.n_batch, self.n_threads, self.kv_type, self.n_gpu_layers = n_batch, n_threads, kv_type, n_gpu_layers
        # The callback closes over a one-slot list, not self: no reference cycle
        # keeps a closed backend alive. Kept as an attribute: C holds the pointer.
        abort: list[Flag | None] = [None]
        self._abort = abort
        self._abort_cb = lc.ggml_abort_callback(lambda _data: abort[0] is not None and abort[0].is_set())
        try:
            self._load_weights(n_gpu_layers, repack, mark, tensor_split)
            self._read_vocabulary()
            self._weights_log = _log_since(mark)
            mark = _log_mark()
            self._open_context(n_ctx, n_batch, n_threads, kv_type, flash_attn, n_gpu_layers, mark, n_seq)
        except BaseException:
            self.close()  # frees what was made, and gives the exact hold back now, not at garbage collection
            raise
        self._context_log = _log_since(mark)
        if mmproj is not None:
            try:
                self._projector = Projector(mmproj, self._model, n_embd=self.n_embd_inp, n_threads=n_threads,
                                            use_gpu=n_gpu_layers != 0, abort=abort)
            except BaseException:
                self.close()
                raise

    def _load_weights(self, n_gpu_layers: int, repack: bool, mark: int, split: tuple[float, ...] | None) -> None:
        self.repack = repack
        params = model_params(n_gpu_layers, repack, split)
        self._model = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            self._raise_load_failure(_log_since(mark), what="load the model")

    def _open_context(self, n_ctx: int, n_batch: int, n_threads: int, kv_type: str, flash_attn: bool | None,
                      n_gpu_layers: int, mark: int, n_seq: int) -> None:
        """The context: ``n_seq`` sequences of ``n_ctx`` tokens each, and what steps them."""
        cparams, self.flash_attn = context_params(n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, kv_type=kv_type,
                                                  flash_attn=flash_attn, n_gpu_layers=n_gpu_layers, n_seq=n_seq)
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            what = f"create a {n_ctx}-token context" + (f" for {n_seq} sequences" if n_seq > 1 else "")
            self.close()
            self._raise_load_failure(_log_since(mark), what=what)
        if self.threads_poll is not None:
            try:
                if self._pool is None:
                    self._pool = ThreadPool(n_threads, self.threads_poll)
                self._pool.attach(self._ctx)
            except BaseException:
                self.close()
                raise
        self.n_seq = n_seq
        self.n_ctx = lc.llama_n_ctx_seq(self._ctx)  # what one sequence holds
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self._at = SeqPositions(n_seq)
        self._streams = Streams(self._ctx, self._mem, self._batch, n_batch, self.n_vocab, self.n_ctx, self._at,
                                n_stream=kv_streams(n_seq) if state.restreamable(self._model) else None)

    def _free_context(self) -> None:
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            if self._pool is not None:
                self._pool.detach(self._ctx)
            lc.llama_free(self._ctx)
            self._ctx = None

    def _read_vocabulary(self) -> None:
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = lc.llama_vocab_n_tokens(self._vocab)
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self._piece_buf = ctypes.create_string_buffer(256)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self._vocab))
        self.eos_ids = frozenset(i for i in range(self.n_vocab) if lc.llama_vocab_is_eog(self._vocab, i))
        self.chat_template = self.info.chat_template
        self.bos_token = self._token_text(lc.llama_vocab_bos(self._vocab))
        self.eos_token = self._token_text(lc.llama_vocab_eos(self._vocab))
        self.n_embd_inp = lc.llama_model_n_embd_inp(self._model)

    def _raise_load_failure(self, lines: list[str], what: str) -> None:
        raise load_failure(lines, what, self.path.name)

    def _token_text(self, tid: int) -> str:
        if tid < 0 or tid >= self.n_vocab:
            return ""
        return (lc.llama_vocab_get_text(self._vocab, tid) or b"").decode("utf-8", errors="replace")

    # -- tokens -------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._pieces[token_id]
        if piece is None:
            buf = self._piece_buf
            n = lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, False)
            piece = buf.raw[:n]
            self._pieces[token_id] = piece
        return piece

    def special_bytes(self, token_id: int) -> bytes:
        """A token's bytes with control tokens spelled out (``<|channel|>``, a special ``<think>``):
        ``llama_token_to_piece`` with special=True, for the reasoning parser; never shown as is."""
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, True)
        return buf.raw[:n]

    # -- KV sequences (the engine core's SeqPool) ----------------------------

    def pool(self) -> "LlamaCppBackend":
        return self

    @property
    def kv_len(self) -> int:
        return self._at.past[0]

    def seq_len(self, seq: int) -> int:
        return self._at.past[seq]

    def batch(self, rows: Sequence[Row]) -> list[np.ndarray | None]:
        """One step of several sequences (engine/backends/llama/sequences.py): text rows in one
        batch, a row holding an image's positions read first, on its own."""
        if self._ctx is None:
            raise HearthError("the model is closed")
        check_room(self._at, self.n_ctx, rows)
        out: list[np.ndarray | None] = [None] * len(rows)
        text: list[int] = []
        for r, (seq, tokens, want) in enumerate(rows):
            if self._projector is not None and has_media(tokens):
                got = forward_mixed(self, self._projector, tokens, want == WANT_ALL, seq)
                out[r] = None if want == WANT_NONE else got
            else:
                text.append(r)
        if text:
            got_text = self._streams.run([rows[r] for r in text])
            for r, logits in zip(text, got_text):
                out[r] = logits
        return out

    def forward(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Sequence 0's forward (the single-sequence Backend): logits of the last or every token."""
        if len(tokens) == 0:
            raise ValueError("forward() needs at least one token")
        got = self.batch([(0, tokens, WANT_ALL if all_logits else WANT_LAST)])[0]
        assert got is not None
        return got

    def forward_text(self, tokens: Sequence[int], *, all_logits: bool = False, seq: int = 0) -> np.ndarray:
        got = self._streams.run([(seq, tokens, WANT_ALL if all_logits else WANT_LAST)])[0]
        assert got is not None
        return got

    def forward_embd(self, rows: np.ndarray, *, all_logits: bool, non_causal: bool,
                     mrope: tuple[np.ndarray, np.ndarray, int] | None = None, seq: int = 0) -> np.ndarray:
        """Append an image's encoded rows to sequence ``seq`` in one batch; logits of every row or the last.
        ``mrope`` (a model that places images in 2-D): the rows' positions for a first position of 0
        and how each moves with it (section-major, 4 x n), and the positions the image takes."""
        return self._streams.embd(rows, all_logits, non_causal, mrope, seq)

    def set_abort(self, flag: Flag | None) -> None:
        """While ``flag`` is given, llama.cpp checks it between graph nodes, so a
        long prefill stops within milliseconds (forward raises Cancelled and the
        KV keeps what it held before the call). Off during decoding: the check
        takes the GIL on a compute thread, which a token step need not pay."""
        self._abort[0] = flag
        if flag is None:
            lc.llama_set_abort_callback(self._ctx, lc.ggml_abort_callback(), None)  # a NULL callback
        else:
            lc.llama_set_abort_callback(self._ctx, self._abort_cb, None)

    def truncate(self, n: int) -> None:
        self.seq_truncate(0, n)

    def seq_truncate(self, seq: int, n: int) -> None:
        self._streams.truncate(seq, n)

    def seq_copy(self, src: int, dst: int, n: int) -> None:
        self._streams.copy(src, dst, n)

    def can_shift(self, seq: int) -> bool:
        return self._streams.can_shift(seq)

    def seq_move(self, seq: int, moves: Sequence[tuple[int, int, int]]) -> None:
        self._streams.move(seq, moves)

    def snapshot(self) -> tuple:
        return self._streams.snapshot(0)

    def seq_snapshot(self, seq: int) -> tuple:
        return self._streams.snapshot(seq)

    def restore(self, snap: tuple) -> None:
        self._streams.restore(0, snap)

    def seq_restore(self, seq: int, snap: tuple) -> None:
        self._streams.restore(seq, snap)

    def set_n_seq(self, n_seq: int) -> None:
        """Hold ``n_seq`` sequences from now on: the context is made again on the loaded weights
        (its KV is emptied; a plain KV cache's snapshots of the old one restore into it, laid out again for
        its streams by state.put, another memory's do not)."""
        if n_seq < 1:
            raise HearthError(f"a context holds at least one sequence, not {n_seq}")
        if n_seq == self.n_seq:
            for s in range(n_seq):
                self.seq_truncate(s, 0)
            return
        self._free_context()
        mark = _log_mark()
        self._open_context(self.n_ctx, self.n_batch, self.n_threads, self.kv_type, self.flash_attn,
                           self.n_gpu_layers, mark, n_seq)
        self._context_log = _log_since(mark)

    @property
    def _load_log(self) -> list[str]:
        """llama.cpp's log of the weights' load and of the context now open (its buffers' sizes)."""
        return self._weights_log + self._context_log

    def nbytes(self, snap: tuple) -> int:
        return len(snap[1])

    @property
    def sees_images(self) -> bool:
        return self._projector is not None

    def tokenize_images(self, pieces: Sequence[str | DecodedImage], *, add_bos: bool) -> list[int]:
        if self._projector is None:
            raise NoVisionError(f"{self.info.name} cannot see images: load a vision model with its projector "
                                "(mmproj), or send the message without the image")
        return self._projector.tokenize(pieces, add_bos=add_bos)

    def state_bytes(self, snap: tuple) -> bytes:
        return state.to_bytes(snap)

    def state_from_bytes(self, n_tokens: int, data: bytearray) -> tuple:
        return state.from_bytes(n_tokens, data)

    def media_name(self, slot: int) -> str:
        if self._projector is None:
            raise NoVisionError(f"{self.info.name} has read no images")
        return self._projector.name(slot)

    def state_identity(self) -> dict[str, str]:
        # A sequence's state records how many streams its context had. A plain KV cache's is laid out
        # again for this context's count as it is restored; any other restores only into a context alike.
        return {"backend": self.name, "format": f"llama-cpp-python {lc.__version__} {state.FORMAT}",
                "n_seq": "any" if state.restreamable(self._model) else str(self.n_seq),
                "kv_type": self.kv_type, "flash_attn": str(self.flash_attn), "repack": str(self.repack),
                # The exact profile never runs the tiled matmul (ExactKernels, or the variable init() sets).
                "tiled_mm": "0" if self.exactness == "exact" else os.environ.get("GGML_CPU_TILED_MM", "1")}

    def describe(self) -> BackendInfo:
        # Where the layers really went (llama.cpp's load log), not what was asked:
        # a GPU build that found no device runs on the CPU.
        where = devices.placement(self._load_log)
        return BackendInfo(backend=self.name, name=self.info.name, path=str(self.path),
                           quant=self.info.file_type, runtime=where.runtime,
                           device=where.device, threads=self.n_threads, n_ctx=self.n_ctx,
                           n_gpu_layers=self.n_gpu_layers, kv_type=self.kv_type,
                           weight_bytes=self.info.weight_bytes, exactness=self.exactness,
                           projector=str(self._projector.path) if self._projector is not None else "",
                           threads_poll=self.threads_poll)

    def vocab(self) -> Vocab:
        return self.info.vocab()

    def open_draft(self, path: str | os.PathLike[str], *, n_threads: int | None = None) -> "LlamaCppBackend":
        # The planner counts the draft on the GPU only when the target is all there (the draft runs
        # every step, and splitting both across the bus would cost more than it saves).
        on_gpu = self.n_gpu_layers < 0 or self.n_gpu_layers > self.info.n_layers
        split = None
        if on_gpu:  # never on another machine's worker: a draft runs every step, and each would cross the link
            from .devices import gpu_devices

            shares = [0.0 if d.runtime == "rpc" else 1.0 for d in gpu_devices()]
            on_gpu, split = any(shares), (tuple(shares) if 0.0 in shares and any(shares) else None)
        return LlamaCppBackend(path, n_ctx=self.n_ctx, n_threads=n_threads, n_gpu_layers=-1 if on_gpu else 0,
                               exactness=self.exactness, threads_poll=self.threads_poll, tensor_split=split,
                               n_seq=self.n_seq)

    def grammar(self, gbnf: str, triggers: tuple[str, ...] = ()) -> LlamaGrammar:
        return LlamaGrammar(self._vocab, self.n_vocab, gbnf, triggers=triggers)

    def memory_report(self) -> dict[str, int]:
        rep = parse_buffer_sizes(self._load_log)
        rep["model_size"] = int(lc.llama_model_size(self._model))
        if self._projector is not None:
            rep["vision"] = self._projector.memory
        return rep

    def close(self) -> None:
        if self._projector is not None:  # before the model it reads
            self._projector.close()
            self._projector = None
        self._free_context()
        if self._pool is not None:  # after the context: ggml's CPU backend held the pool until llama_free
            self._pool.free()
            self._pool = None
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None
        if getattr(self, "_exact_hold", False):  # after every context of this model is gone
            self._exact_hold = False
            ExactKernels.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass
