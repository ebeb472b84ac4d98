"""The KV cache the transformers backend owns: a DynamicCache whose layers grow in
place, and snapshots of it (HFState) for the prefix cache and the disk store."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ...errors import HearthError

STATE_FORMAT = "hearth-hf-kv-1"


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer that writes new K/V in place into a buffer
    grown by doubling, instead of ``torch.cat``-ing the whole history each step.

    transformers' DynamicLayer copies every cached token on every decode step
    (quadratic memory traffic over a reply: at 2k tokens of context that copy
    is as large as the step's own work on small models). Here a step copies
    only the new token; ``keys``/``values`` are views of the buffer's prefix.
    """

    min_capacity = 256
    device: torch.device
    _kbuf: torch.Tensor
    _vbuf: torch.Tensor
    _len: int

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._len = 0
        # Zero-capacity buffers of the right dtype and device; the first update grows them.
        self._kbuf = self.keys = key_states[..., :0, :]
        self._vbuf = self.values = value_states[..., :0, :]
        self.is_initialized = True

    def _reserve(self, need: int, k: torch.Tensor, v: torch.Tensor) -> None:
        cap = self._kbuf.shape[-2]
        if need <= cap:
            return
        cap = max(self.min_capacity, need, 2 * cap)
        kbuf = k.new_empty((*k.shape[:-2], cap, k.shape[-1]))
        vbuf = v.new_empty((*v.shape[:-2], cap, v.shape[-1]))
        if self._len:
            kbuf[..., :self._len, :].copy_(self._kbuf[..., :self._len, :])
            vbuf[..., :self._len, :].copy_(self._vbuf[..., :self._len, :])
        self._kbuf, self._vbuf = kbuf, vbuf

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self._len + n
        self._reserve(end, key_states, value_states)
        self._kbuf[..., self._len:end, :].copy_(key_states)
        self._vbuf[..., self._len:end, :].copy_(value_states)
        self._len = end
        keys, values = self.prefix(end)
        self.keys, self.values = keys, values
        return keys, values

    def prefix(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of the first ``n`` cached tokens' keys and values."""
        return self._kbuf[..., :n, :], self._vbuf[..., :n, :]

    @property
    def buffer_dtype(self) -> torch.dtype:
        return self._kbuf.dtype

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self._len = max(0, self._len + tokens_to_remove)
        self.keys, self.values = self.prefix(self._len)

    def keep(self, n: int) -> None:
        """Drop every token at position >= ``n`` (an absolute length, where ``crop`` is relative)."""
        if self.is_initialized and n < self._len:
            self._len = max(0, n)
            self.keys, self.values = self.prefix(self._len)

    def reset(self) -> None:
        self.keys = self.values = None
        self._kbuf = self._vbuf = torch.empty(0)
        self._len = 0
        self.is_initialized = False

    def nbytes(self) -> int:
        """Bytes actually allocated (the buffer's capacity, not just the used prefix)."""
        if not self.is_initialized:
            return 0
        return (self._kbuf.numel() + self._vbuf.numel()) * self._kbuf.element_size()


class HearthCache(DynamicCache):
    """A DynamicCache whose layers are all GrowingLayer (created lazily, one per model layer).

    Full attention everywhere, even for sliding-window models: a sliding layer
    forgets old tokens and could not be truncated or snapshotted exactly; the
    attention mask still applies the window.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layer_class_to_replicate = GrowingLayer

    def keep(self, n: int) -> None:
        """Every layer cut to its first ``n`` tokens. Absolute, unlike ``crop``: after a
        forward that failed inside the model, the layers before the failure hold more
        tokens than those after it, and a relative crop would keep them apart."""
        for layer in self.growing_layers():
            layer.keep(n)

    def growing_layers(self) -> list[GrowingLayer]:
        """The layers created so far (every one a GrowingLayer)."""
        return [layer for layer in self.layers if isinstance(layer, GrowingLayer)]

@dataclass(slots=True)
class HFState:
    """A deep copy of the KV cache: (keys, values) per layer, ``n_tokens`` long, in host
    RAM whatever device the cache is on: the sizing plan counts prefix snapshots there,
    so the GPU keeps its room for the live cache."""

    n_tokens: int
    layers: list[tuple[torch.Tensor, torch.Tensor]]


def snapshot_of(cache: HearthCache, n_tokens: int) -> HFState:
    """A copy, in host RAM, of the first ``n_tokens`` of every layer's keys and values."""
    layers = []
    for layer in cache.growing_layers() if n_tokens else ():
        k, v = layer.prefix(n_tokens)
        layers.append((k.to("cpu", copy=True), v.to("cpu", copy=True)))
    return HFState(n_tokens, layers)


def cache_from(state: HFState, devices: list[torch.device]) -> HearthCache:
    """A new cache holding a snapshot, layer ``i`` on ``devices[i]``; the snapshot stays untouched."""
    if not isinstance(state, HFState):
        raise HearthError("could not restore a KV snapshot: it was taken from another backend")
    cache = HearthCache()
    if state.n_tokens:
        if len(state.layers) != len(devices):
            raise HearthError("could not restore a KV snapshot: it was taken from another model")
        for i, (k, v) in enumerate(state.layers):
            # The layer's buffer is made on the device of what it is given first.
            cache.update(k.to(devices[i]), v.to(devices[i]), i)  # copies into the new cache's buffer
    return cache


def state_nbytes(state: HFState) -> int:
    """Bytes the snapshot's tensors occupy."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in state.layers)


def state_to_bytes(state: HFState) -> bytes:
    """A snapshot as safetensors bytes (no pickle), for the on-disk prefix store."""
    from safetensors.torch import save

    tensors = {}
    for i, (k, v) in enumerate(state.layers):
        tensors[f"k.{i}"] = k.detach().contiguous()
        tensors[f"v.{i}"] = v.detach().contiguous()
    return save(tensors, metadata={"format": STATE_FORMAT, "n_tokens": str(state.n_tokens),
                                   "n_layers": str(len(state.layers))})


def state_from_bytes(n_tokens: int, data: bytes | bytearray, *, n_layers: int,
                     kv_dtype: torch.dtype) -> HFState:
    """Inverse of ``state_to_bytes`` (the snapshot stays in host RAM); HearthError when
    the bytes are not a snapshot of ``n_tokens`` tokens from a model with this cache layout."""
    from safetensors.torch import load

    data = bytes(data)
    try:
        (hlen,) = struct.unpack("<Q", data[:8])
        meta = json.loads(data[8:8 + hlen]).get("__metadata__") or {}
        tensors = load(data)
    except Exception as e:  # any parse failure means the bytes are not ours
        raise HearthError(f"stored KV state is unreadable ({type(e).__name__})") from None
    if meta.get("format") != STATE_FORMAT or int(meta.get("n_tokens", -1)) != n_tokens:
        raise HearthError("stored KV state has another format or length")
    stored = int(meta.get("n_layers", 0))
    if n_tokens and stored != n_layers:
        raise HearthError("stored KV state was taken from another model")
    layers = []
    for i in range(stored if n_tokens else 0):
        k, v = tensors[f"k.{i}"], tensors[f"v.{i}"]
        if k.shape[-2] != n_tokens or k.dtype != kv_dtype:
            raise HearthError("stored KV state does not match this model's cache layout")
        layers.append((k, v))
    return HFState(n_tokens, layers)
