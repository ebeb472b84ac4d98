"""A vision projector (``mmproj`` GGUF) beside a llama.cpp model, through llama.cpp's libmtmd.

``Projector.tokenize`` turns a prompt's text pieces and images into token ids,
an image's positions as ``engine.media`` ids; the mtmd context splits and
resizes each image for its model and adds the tokens the model wraps images in.
``embeddings(slot)`` encodes a chunk once and keeps its rows (LRU by bytes), so a
second question about the same image never encodes it again, even where its KV
was evicted. Each bitmap's id is its SHA-256, never a placeholder.

The header is checked strictly before libmtmd sees the file: a model file given as
a projector, a projector for another model (its embedding size) and an audio-only
one each get one clear line. Models whose images take fewer positions than tokens (M-RoPE:
Qwen2-VL and later) get each token's 2-D position from libmtmd; the backend keeps
token indices (what the KV record and the cache count) and positions apart.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import llama_cpp as lc
import llama_cpp.mtmd_cpp as mt
import numpy as np

from ...errors import Cancelled, HearthError, ModelFileError, ModelLoadError, UnsupportedModelError
from ...inputs.images import DecodedImage
from ...inputs.media import MAX_SLOTS, SPAN, media_token
from ...models.gguf_header import read_gguf
from ..base import Flag
from .log import _log_mark, _log_since, parse_buffer_sizes

EMBD_BUDGET = 256 * 2**20  # encoded image rows kept, by bytes
MAX_WAITING = 256          # prepared chunks not encoded yet


def projector_header(path: str | os.PathLike[str], n_embd: int | None = None) -> dict[str, object]:
    """The projector's metadata, checked: a clip GGUF with a vision encoder whose output width
    is ``n_embd`` (the model's) when given. Raises ModelFileError / UnsupportedModelError."""
    p = Path(path)
    g = read_gguf(p, vocab=False)
    m = g.metadata
    arch = m.get("general.architecture")
    if arch != "clip":
        raise ModelFileError(f"{p.name} is not a vision projector (mmproj): its architecture is {arch!r}")
    if not m.get("clip.has_vision_encoder"):
        raise UnsupportedModelError(f"{p.name} has no vision encoder (an audio projector?); Hearth reads images only")
    width = m.get("clip.vision.projection_dim")
    if n_embd is not None and width is not None and int(width) != n_embd:
        raise ModelFileError(f"{p.name} does not match this model: it writes {width}-wide embeddings "
                             f"and the model reads {n_embd}; pick the projector made for this model")
    return {"projector_type": m.get("clip.projector_type", "?"), "projection_dim": width,
            "image_size": m.get("clip.vision.image_size"),
            "weight_bytes": sum(t.nbytes for t in g.tensors)}


_routed: list[bool] = []


def route_log() -> None:
    """libmtmd logs through its own callback: into llama.cpp's captured log, not onto stderr."""
    if not _routed:
        from .log import _on_log

        mt.mtmd_log_set(_on_log, ctypes.c_void_p(0))
        mt.mtmd_helper_log_set(_on_log, ctypes.c_void_p(0))
        _routed.append(True)


class Projector:
    """The mtmd context for one loaded model; freed before the model."""

    def __init__(self, path: str | os.PathLike[str], model: object, *, n_embd: int, n_threads: int, use_gpu: bool,
                 abort: list[Flag | None]) -> None:
        self.path = Path(path)
        self.header = projector_header(self.path, n_embd)
        self.n_embd = n_embd
        self._ctx = None
        params = mt.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = True  # reserves the compute buffer now, so memory_report counts it

        # ggml asks before each graph node whether to show it to us; while Stop is set we say
        # yes, and refusing the node it shows ends the encode there (a picture stops mid-way).
        def on_node(_t: int, ask: bool, _ud: int) -> bool:
            stop = abort[0] is not None and abort[0].is_set()
            return stop if ask else not stop

        self._cb = lc.ggml_backend_sched_eval_callback(on_node)
        params.cb_eval = self._cb
        self._abort = abort
        route_log()
        mark = _log_mark()
        self._ctx = mt.mtmd_init_from_file(str(self.path).encode(), model, params)
        if not self._ctx:
            why = next((ln.strip() for ln in reversed(_log_since(mark)) if "error" in ln.lower()
                        or "failed" in ln.lower()), "libmtmd could not read it")
            raise ModelLoadError(f"could not load the projector {self.path.name}: {why}")
        self.buffers = parse_buffer_sizes(_log_since(mark))  # its compute buffer, as libmtmd reserved it
        if not mt.mtmd_support_vision(self._ctx):
            self.close()
            raise UnsupportedModelError(f"{self.path.name} cannot read images")
        # Qwen2-VL and later place an image's tokens on a 2-D grid (M-RoPE): it takes fewer
        # positions than tokens, and the backend keeps token indices and positions apart.
        self.mrope = bool(mt.mtmd_decode_use_mrope(self._ctx))
        self._mpos: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self._slots: dict[tuple[str, int], int] = {}
        self._names: list[str] = []  # slot -> "sha256:appearance"
        self._chunks: OrderedDict[int, int] = OrderedDict()  # slot -> an mtmd chunk waiting to be encoded
        self._non_causal: dict[int, bool] = {}
        self._embd: OrderedDict[int, np.ndarray] = OrderedDict()
        # The engine thread tokenizes and encodes; the window counts an attached image's tokens on
        # another thread before it is sent: one at a time in this context.
        self._lock = threading.RLock()
        self.encodes = 0          # chunks encoded so far (tests and the bench read it)
        self.encode_s = 0.0

    @property
    def weight_bytes(self) -> int:
        return int(self.header["weight_bytes"])  # type: ignore[call-overload]

    @property
    def memory(self) -> int:
        """Its weights and its compute buffer, in bytes."""
        return self.weight_bytes + self.buffers.get("compute", 0)

    def _slot(self, sha: str, k: int) -> int:
        key = (sha, k)
        slot = self._slots.get(key)
        if slot is None:
            if len(self._slots) >= MAX_SLOTS:
                raise HearthError("this model has read too many different images since it was loaded; "
                                  "reload it to read more")
            slot = self._slots[key] = len(self._slots)
            self._names.append(f"{sha}:{k}")
        return slot

    def name(self, slot: int) -> str:
        """What a slot holds, the same in every process: the image's SHA-256 and, for an image
        that appears again in one prompt, which appearance."""
        if not 0 <= slot < len(self._names):
            raise HearthError("an image position names no image this model has read")
        return self._names[slot]

    def tokenize(self, pieces: Sequence[str | DecodedImage], *, add_bos: bool) -> list[int]:
        """Token ids for text and images in order; text control tokens are parsed."""
        with self._lock:
            if not self._ctx:
                raise HearthError("the vision model was closed")
            return self._tokenize(pieces, add_bos)

    def _tokenize(self, pieces: Sequence[str | DecodedImage], add_bos: bool) -> list[int]:
        keep: list[object] = []
        parts: list[mt.mtmd_input_part] = []
        bitmaps = []
        try:
            for piece in pieces:
                part = mt.mtmd_input_part()
                if isinstance(piece, DecodedImage):
                    data = (ctypes.c_ubyte * len(piece.rgb)).from_buffer_copy(piece.rgb)
                    bm = mt.mtmd_bitmap_init(piece.width, piece.height, data)
                    if not bm:
                        raise HearthError("the vision model could not take this image")
                    bitmaps.append(bm)
                    mt.mtmd_bitmap_set_id(bm, piece.sha256.encode())
                    part.text = None  # type: ignore[assignment]
                    part.bitmap = bm
                else:
                    raw = piece.encode("utf-8")
                    txt = mt.mtmd_input_text()
                    txt.text, txt.text_len, txt.add_special, txt.parse_special = raw, len(raw), False, True
                    keep += [raw, txt]
                    part.text = ctypes.pointer(txt)
                    part.bitmap = None
                parts.append(part)
            arr = (ctypes.POINTER(mt.mtmd_input_part) * len(parts))(*[ctypes.pointer(p) for p in parts])
            chunks = mt.mtmd_input_chunks_init()
            try:
                rc = mt.mtmd_tokenize_from_parts(self._ctx, chunks, arr, len(parts), add_bos)
                if rc != 0:
                    raise HearthError(f"the vision model could not read this prompt's images (mtmd error {rc})")
                return self._ids(chunks)
            finally:
                mt.mtmd_input_chunks_free(chunks)
        finally:
            for bm in bitmaps:
                mt.mtmd_bitmap_free(bm)

    def _ids(self, chunks: int) -> list[int]:
        out: list[int] = []
        seen: dict[str, int] = {}
        for i in range(mt.mtmd_input_chunks_size(chunks)):
            c = mt.mtmd_input_chunks_get(chunks, i)
            n = mt.mtmd_input_chunk_get_n_tokens(c)
            if mt.mtmd_input_chunk_get_type(c) == mt.MTMD_INPUT_CHUNK_TYPE_TEXT:
                nt = ctypes.c_size_t()
                ptr = mt.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(nt))
                out.extend(ptr[j] for j in range(nt.value))
                continue
            if mt.mtmd_input_chunk_get_type(c) != mt.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                raise HearthError("this projector produced a chunk that is not an image; Hearth reads images only")
            if n > SPAN:
                raise HearthError(f"one image takes {n} positions; Hearth places at most {SPAN}")
            sha = (mt.mtmd_input_chunk_get_id(c) or b"").decode()
            k = seen.get(sha, 0)
            seen[sha] = k + 1
            slot = self._slot(sha, k)
            if self.mrope and slot not in self._mpos:
                self._mpos[slot] = _grid_positions(c, n)
            if slot not in self._embd and slot not in self._chunks:
                self._chunks[slot] = mt.mtmd_input_chunk_copy(c)
                self._non_causal[slot] = bool(mt.mtmd_decode_use_non_causal(self._ctx, c))
                while len(self._chunks) > MAX_WAITING:  # prepared for a prompt whose KV was cached after all
                    mt.mtmd_input_chunk_free(self._chunks.popitem(last=False)[1])
            out.extend(media_token(slot, r) for r in range(n))
        return out

    def mrope_positions(self, slot: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """An M-RoPE image's positions (see LlamaCppBackend.forward_embd), None for other models."""
        return self._mpos.get(slot) if self.mrope else None

    def non_causal(self, slot: int) -> bool:
        return self._non_causal.get(slot, False)

    def embeddings(self, slot: int) -> np.ndarray:
        """The chunk's rows (n_tokens x n_embd), encoded now unless kept from before."""
        rows = self._embd.get(slot)
        if rows is not None:
            self._embd.move_to_end(slot)
            return rows
        with self._lock:
            return self._encode(slot)

    def _encode(self, slot: int) -> np.ndarray:
        chunk = self._chunks.get(slot)
        if chunk is None:
            raise HearthError("an image in this prompt was not prepared by this model; send the message again")
        t0 = time.perf_counter()
        rc = mt.mtmd_encode_chunk(self._ctx, chunk)
        stop = self._abort[0] is not None and self._abort[0].is_set()
        if stop:
            raise Cancelled("stopped while reading an image")
        if rc != 0:
            raise HearthError(f"the vision model failed to encode an image (mtmd error {rc})")
        n = mt.mtmd_input_chunk_get_n_tokens(chunk)
        ptr = mt.mtmd_get_output_embd(self._ctx)
        rows = np.ctypeslib.as_array(ptr, shape=(n * self.n_embd,)).reshape(n, self.n_embd).copy()
        self.encode_s += time.perf_counter() - t0
        self.encodes += 1
        mt.mtmd_input_chunk_free(self._chunks.pop(slot))
        self._embd[slot] = rows
        while sum(r.nbytes for r in self._embd.values()) > EMBD_BUDGET and len(self._embd) > 1:
            self._embd.popitem(last=False)
        return rows

    def forget(self) -> None:
        """Drop the encoded rows (the next use encodes again); the bench's uncached row uses it."""
        self._embd.clear()

    def close(self) -> None:
        with getattr(self, "_lock", threading.RLock()):
            for c in self._chunks.values() if hasattr(self, "_chunks") else ():
                mt.mtmd_input_chunk_free(c)
            if hasattr(self, "_chunks"):
                self._chunks.clear()
            if self._ctx:
                mt.mtmd_free(self._ctx)
                self._ctx = None


def _grid_positions(chunk: object, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """An M-RoPE image chunk's positions for a first position of 0, how each moves with the first
    (the decoder's sections are t, y, x, z, as llama.cpp's own helper writes them; read for two
    first positions), and its n_pos."""
    tokens = mt.mtmd_input_chunk_get_tokens_image(chunk)
    at = []
    for base in (0, 1):
        out = (mt.mtmd_decoder_pos * n)()
        mt.mtmd_helper_image_get_decoder_pos(tokens, base, out)
        at.append(np.array([[p.t for p in out], [p.y for p in out], [p.x for p in out], [p.z for p in out]],
                           dtype=np.int64))
    return at[0], at[1] - at[0], int(mt.mtmd_input_chunk_get_n_pos(chunk))
