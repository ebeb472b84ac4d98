"""HFBackend: a transformers model behind the Backend protocol, and ``load()``.

``forward`` appends tokens to a KV cache the backend owns (kv.HearthCache) and
returns float32 logits as numpy; ``truncate`` crops the cache,
``snapshot``/``restore`` copy its tensors to host RAM and back. ``model.generate()``
is never used.
"""
from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import transformers
from transformers import DynamicCache

from ...errors import ContextFullError, NoVisionError, UnsupportedModelError
from ...errors import NoGrammar
from ..base import TokenConstraint
from ..base import BackendInfo, Flag, SingleSequencePool
from ...models.vocab import Vocab
from . import kv
from .kv import HearthCache, HFState
from .load import DEFAULT_CTX, load_hf_model
from .placement import device_summary, parameter_bytes
from .tokens import TokenBytes, chat_template, end_ids


class HFBackend:
    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, n_ctx: int | None = None, quant: str = "none",
                 source: str = "", info: Any = None, prefill_chunk: int = 512) -> None:
        self.model = model.eval()
        self.tok = tokenizer
        self.info = info  # a GGUF source's header (engine.models.gguf.GgufInfo), for draft-model checks
        self.quant = quant
        self.source = source
        self.prefill_chunk = prefill_chunk
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        limit = getattr(cfg, "max_position_embeddings", None) or DEFAULT_CTX
        self.n_ctx = min(n_ctx or min(limit, DEFAULT_CTX), limit)
        self.n_vocab = int(model.get_output_embeddings().weight.shape[0])
        from transformers.cache_utils import LinearAttentionCacheLayerMixin

        if any(isinstance(layer, LinearAttentionCacheLayerMixin)
               for layer in DynamicCache(config=model.config).layers):
            raise UnsupportedModelError(
                f"{source or 'this model'} has recurrent (linear-attention) layers whose state cannot be "
                "rolled back; Hearth's transformers backend needs an attention-only model")
        self.input_device = model.get_input_embeddings().weight.device
        self._cache = HearthCache()
        self._pool: SingleSequencePool | None = None
        self._n = 0
        self._kv_devices: list[torch.device] | None = None
        self._bytes = TokenBytes(tokenizer, max(self.n_vocab, len(tokenizer)))
        self._kind = self._bytes.kind
        self._control = self._bytes.control

        self.bos_token = tokenizer.bos_token or ""
        self.eos_token = tokenizer.eos_token or ""
        self._bos_id = tokenizer.bos_token_id
        with_special = tokenizer.encode("a", add_special_tokens=True)
        self.add_bos = self._bos_id is not None and with_special[:1] == [self._bos_id]
        self.chat_template = chat_template(tokenizer)
        self.eos_ids = end_ids(model, tokenizer, self.chat_template, self._control)
        self.kv_dtype = self._warm_up()

    @torch.inference_mode()
    def _warm_up(self) -> torch.dtype:
        """One token through the model: records each layer's KV device and dtype (for
        restoring snapshots from disk) and takes first-call costs off the first reply."""
        self.forward([self._bos_id if self._bos_id is not None else 0])
        layers = self._cache.growing_layers()
        self._kv_devices = [layer.device for layer in layers]
        dtype = layers[0].buffer_dtype
        self.truncate(0)
        return dtype

    # -- what it is ----------------------------------------------------------------------------

    def describe(self) -> BackendInfo:
        """Name, quantization label (the bitsandbytes choice, else the weights' dtype),
        source path, runtime, device placement, threads and weight bytes."""
        quant = self.quant if self.quant != "none" else str(self.model.dtype).removeprefix("torch.")
        device = device_summary(self.model)
        name = self.info.name if self.info is not None else Path(self.source).name
        return BackendInfo(backend=self.name, name=name, path=self.source, quant=quant,
                           runtime="torch-cuda" if "cuda" in device else "torch-cpu", device=device,
                           threads=torch.get_num_threads(), n_ctx=self.n_ctx,
                           kv_type=str(self.kv_dtype).removeprefix("torch."),
                           weight_bytes=parameter_bytes(self.model))

    def vocab(self) -> Vocab:
        """A GGUF source's header vocabulary, else the tokenizer's id -> token table."""
        if self.info is not None:
            return self.info.vocab()
        tok = self.tok
        return Vocab(name=tok.name_or_path or "model", tokenizer_model=f"hf-{type(tok).__name__}",
                     tokens=tok.convert_ids_to_tokens(list(range(len(tok)))),
                     weight_bytes=parameter_bytes(self.model), path="")

    def open_draft(self, path: str | os.PathLike[str], *, n_threads: int | None = None) -> "HFBackend":
        """Another model on transformers with this one's context size, to draft for it."""
        from ...models.catalogue import resolve

        return load(resolve(path), n_ctx=self.n_ctx, n_threads=n_threads)

    # -- tokens ------------------------------------------------------------------------------

    sees_images = False

    def tokenize_images(self, pieces: Sequence[object], *, add_bos: bool) -> list[int]:
        raise NoVisionError("images need a GGUF model with its projector (mmproj); "
                            "the transformers backend reads text only for now")

    def media_name(self, slot: int) -> str:
        raise NoVisionError("the transformers backend reads no images")

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False, split_special_tokens=not special)
        if add_bos and self._bos_id is not None:
            ids = [self._bos_id, *ids]
        return list(ids)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes.get(token_id)

    # -- KV cache -------------------------------------------------------------------------

    @property
    def kv_len(self) -> int:
        return self._n

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        n = len(tokens)
        if n == 0:
            raise ValueError("forward() needs at least one token")
        if self._n + n > self.n_ctx:
            raise ContextFullError(f"context is full ({self._n} + {n} > {self.n_ctx} tokens)")
        start_len = self._n
        try:
            if n <= self.prefill_chunk:  # the decode step: one model call, nothing else
                logits = self.model(input_ids=torch.tensor([list(tokens)], device=self.input_device),
                                    cache=self._cache, use_cache=True,
                                    logits_to_keep=0 if all_logits else 1).logits
                self._n += n
                return _to_numpy(logits[0] if all_logits else logits[0, -1])
            rows = []
            for s in range(0, n, self.prefill_chunk):
                part = list(tokens[s:s + self.prefill_chunk])
                last = s + len(part) == n
                logits = self.model(input_ids=torch.tensor([part], device=self.input_device),
                                    cache=self._cache, use_cache=True,
                                    logits_to_keep=0 if all_logits else 1).logits
                self._n += len(part)
                if all_logits:
                    rows.append(_to_numpy(logits[0]))
                elif last:
                    return _to_numpy(logits[0, -1])
            return np.concatenate(rows)
        except BaseException:
            # Roll back whatever part of this call landed, in every layer, so kv_len stays the truth.
            self._cut(start_len)
            raise

    def set_abort(self, flag: Flag | None) -> None:
        """A torch forward cannot be interrupted from outside; Stop takes effect
        between the prompt's chunks (the engine core's steps)."""

    def truncate(self, n: int) -> None:
        n = max(0, n)
        if n < self._n:
            self._cut(n)

    def _cut(self, n: int) -> None:
        if n == 0:
            self._cache = HearthCache()
        else:
            self._cache.keep(n)
        self._n = n

    def snapshot(self) -> HFState:
        return kv.snapshot_of(self._cache, self._n)

    def restore(self, state: HFState) -> None:
        self._cache = kv.cache_from(state, self._kv_devices or [])
        self._n = state.n_tokens

    def nbytes(self, state: HFState) -> int:
        return kv.state_nbytes(state)

    def state_bytes(self, state: HFState) -> bytes:
        return kv.state_to_bytes(state)

    def state_from_bytes(self, n_tokens: int, data: bytes | bytearray) -> HFState:
        return kv.state_from_bytes(n_tokens, data, n_layers=len(self._kv_devices or []), kv_dtype=self.kv_dtype)

    def state_identity(self) -> dict[str, str]:
        return {"backend": self.name,
                "format": f"{kv.STATE_FORMAT} transformers {transformers.__version__} torch {torch.__version__}",
                "quant": self.quant, "kv_dtype": str(self.kv_dtype),
                "devices": ",".join(sorted({str(d) for d in self._kv_devices or []}))}

    def pool(self) -> SingleSequencePool:
        # One sequence: the engine core serves requests one at a time, by priority.
        if self._pool is None:
            self._pool = SingleSequencePool(self)
        return self._pool

    def grammar(self, gbnf: str, triggers: tuple[str, ...] = ()) -> TokenConstraint:
        raise NoGrammar("grammars (response_format) need a GGUF model on the llama.cpp backend")

    def memory_report(self) -> dict[str, int]:
        """Bytes of parameters + buffers by device, and of the live KV cache."""
        rep: dict[str, int] = {"weights": 0, "kv": 0}
        seen: set[int] = set()
        for t in (*self.model.parameters(), *self.model.buffers()):
            if id(t) in seen:
                continue
            seen.add(id(t))
            b = t.numel() * t.element_size()
            rep["weights"] += b
            key = f"weights@{t.device}"
            rep[key] = rep.get(key, 0) + b
        for layer in self._cache.growing_layers():
            b = layer.nbytes()
            if b:
                rep["kv"] += b
                key = f"kv@{layer.device}"
                rep[key] = rep.get(key, 0) + b
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                rep[f"allocated@cuda:{i}"] = int(torch.cuda.memory_allocated(i))
        rep["model_size"] = rep["weights"]
        return rep

    def close(self) -> None:
        self.model = None
        self._cache = HearthCache()  # empty: the KV memory goes with the old one
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # float32 on the CPU is a no-op view; anything else costs one copy of the row(s).
    return t.float().cpu().numpy()


def load(ref: Any, *, n_ctx: int | None = None, quant: str = "none", device: str = "auto",
         max_memory: dict | None = None, n_threads: int | None = None, allow_pickle: bool = False,
         allow_remote_code: bool = False) -> HFBackend:
    """Build an HFBackend from a local ModelRef (kind ``hf_dir`` or ``gguf``) or a path.

    Hub ids are fetched first by ``engine.models.hub.fetch_ref``. ``max_memory`` is the
    hook for engine/sizing.py's plan; without it a simple default is used (see
    ``placement.default_placement``).
    """
    m = load_hf_model(ref, n_ctx=n_ctx, quant=quant, device=device, max_memory=max_memory, n_threads=n_threads,
                   allow_pickle=allow_pickle, allow_remote_code=allow_remote_code)
    return HFBackend(m.model, m.tokenizer, n_ctx=n_ctx, quant=m.quant, source=m.source, info=m.info)
