"""The memory-relevant shape of a model, from a GGUF header or a transformers
checkpoint's safetensors headers (what a reference names, catalogue models included,
is ``resolve``'s job).

The planner needs bytes per block (so a partial GPU offload can be costed),
the embedding and output head separately (llama.cpp keeps the embedding on
the CPU and copies a tied head to the GPU), and the attention shapes that
size the KV cache and compute buffers. Nothing here reads tensor data or
imports torch: a transformers checkpoint is sized from ``config.json`` and
the JSON header at the start of each ``.safetensors`` file, times the
chosen quantization's bytes per parameter.
"""
from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..config import HF_QUANTS
from ..errors import ModelFileError
from ..models.gguf import _first_int
from ..models.gguf_header import FILE_TYPES, GGML_TYPES, read_gguf

_GGML_BY_NAME = {name: (block, size) for name, block, size in GGML_TYPES.values()}

# Auto quantization never goes below these: under ~4 bits per weight quality
# drops noticeably, and offloading layers to the CPU (slower, same answers)
# is the better trade. Lower quants are used only when the user picks them.
AUTO_QUANTS = frozenset({
    "F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1", "Q4_K_M", "Q4_K_S",
    "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "MXFP4_MOE", "none", "int8", "int4"})

# The transformers backend's choices (HF_QUANTS, engine/config.py): "none" loads 16-bit
# on a GPU and float32 on the CPU; int8/int4 are bitsandbytes.


@dataclass(slots=True)
class ModelSpec:
    """One model at one quantization, as the memory planner sees it."""

    name: str
    format: str            # "gguf" (llama.cpp) or "hf" (transformers)
    quant: str             # "Q4_K_M", "Q8_0", "F16", ... or transformers' "none", "int8", "int4"
    architecture: str
    n_layers: int
    n_embd: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    layer_bytes: list[int]          # weights of each block at this quantization (hf: 16-bit compute dtype)
    input_bytes: int                # token embedding (+ tiny tensors outside blocks)
    output_bytes: int               # output head; for a tied head, the embedding's size
    tied_output: bool = False       # the head is the embedding: stored once
    layer_params: list[int] = field(default_factory=list)  # parameters per block
    n_params: int = 0
    download_bytes: int = 0
    source: str = ""                # path, folder or catalogue id
    hf_modules: dict[str, str] = field(default_factory=dict)  # transformers module names for device_map
    vision_bytes: int = 0           # a GGUF's vision projector beside it: its weights and compute buffer

    @property
    def weight_bytes(self) -> int:
        return sum(self.layer_bytes) + self.input_bytes + (0 if self.tied_output else self.output_bytes)

    @property
    def label(self) -> str:
        return f"{self.name} {'unquantized' if self.quant == 'none' else self.quant}"

    def kv_bytes_per_token(self, bytes_per_elem: float = 2.0) -> float:
        """K and V of every layer for one token, GQA-aware:
        2 x layers x kv_heads x head_dim x bytes (K and V head sizes may differ)."""
        return self.n_layers * self.n_kv_heads * (self.head_dim + self.head_dim_v) * bytes_per_elem

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelSpec":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


# -- GGUF -------------------------------------------------------------------------

def _tensor_bytes(shape: Iterable[int], type_name: str) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    block, size = _GGML_BY_NAME[type_name]
    return n // block * size


def gguf_spec(meta: Mapping[str, Any], tensors: Iterable[tuple[str, tuple[int, ...], str]], *,
              source: str = "", file_size: int = 0) -> ModelSpec:
    """A spec from GGUF metadata and a tensor table of (name, shape, ggml type name).

    Used for real files and by the fixture generator for synthetic ones.
    """
    arch = str(meta.get("general.architecture") or "")
    key = lambda k, d=0: meta.get(f"{arch}.{k}", d)  # noqa: E731
    n_layers = int(key("block_count"))
    n_embd = int(key("embedding_length"))
    n_heads = _first_int(key("attention.head_count"))
    n_kv = _first_int(key("attention.head_count_kv", n_heads))
    head_dim = int(key("attention.key_length", n_embd // n_heads if n_heads else 0))
    layer_bytes, layer_params = [0] * n_layers, [0] * n_layers
    inp = out = embd = n_params = 0
    n_vocab = int(key("vocab_size", 0)) or len(meta.get("tokenizer.ggml.tokens") or [])
    has_output = False
    counts: dict[str, int] = {}
    for name, shape, tname in tensors:
        nb = _tensor_bytes(shape, tname)
        ne = 1
        for d in shape:
            ne *= int(d)
        n_params += ne
        counts[tname] = counts.get(tname, 0) + 1
        parts = name.split(".")
        if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) < n_layers:
            layer_bytes[int(parts[1])] += nb
            layer_params[int(parts[1])] += ne
        elif name.startswith("output.") and not name.startswith("output_norm"):
            out += nb
            has_output = True
        else:
            inp += nb
            if name == "token_embd.weight":
                embd = nb
                n_vocab = n_vocab or int(shape[-1])
    ftype = meta.get("general.file_type")
    quant = FILE_TYPES.get(int(ftype), f"ftype{ftype}") if ftype is not None else (
        max(counts, key=lambda t: counts[t]) if counts else "unknown")
    return ModelSpec(
        name=str(meta.get("general.name") or Path(source).stem or arch), format="gguf", quant=quant,
        architecture=arch, n_layers=n_layers, n_embd=n_embd, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim, head_dim_v=int(key("attention.value_length", head_dim)),
        n_ff=_first_int(key("feed_forward_length", 0)), n_vocab=n_vocab,
        n_ctx_train=int(key("context_length", 0)), layer_bytes=layer_bytes, input_bytes=inp,
        output_bytes=out if has_output else embd, tied_output=not has_output,
        layer_params=layer_params, n_params=n_params, download_bytes=file_size, source=source)


@lru_cache(maxsize=32)
def _gguf_spec_cached(path: str, size: int, mtime: float) -> ModelSpec:
    g = read_gguf(path, vocab=False)  # sizes need the vocabulary's length, not its strings
    return gguf_spec(g.metadata, ((t.name, t.shape, t.type_name) for t in g.tensors),
                     source=str(g.path), file_size=g.file_size)


def spec_from_gguf(path: str | os.PathLike[str]) -> ModelSpec:
    """Read a GGUF header (cached by path, size and mtime: the settings dialog asks often)."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        read_gguf(p)  # raises the clear "not found" message
        raise
    spec = _gguf_spec_cached(str(p), st.st_size, st.st_mtime)
    out = ModelSpec.from_dict(spec.to_dict())  # a copy: callers may not mutate the cache
    try:
        folder_mtime = p.parent.stat().st_mtime  # a projector added beside the model changes the folder
    except OSError:
        folder_mtime = 0.0
    out.vision_bytes = _vision_cached(str(p), spec.n_embd, folder_mtime)
    return out


@lru_cache(maxsize=32)
def _vision_cached(path: str, n_embd: int, _folder_mtime: float) -> int:
    from ..models.projector import find_projector, projector_memory

    found = find_projector(path, n_embd)
    return sum(projector_memory(found)) if found is not None else 0


# -- transformers checkpoints (safetensors) ---------------------------------------------

SAFETENSORS_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                           "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4}
_MAX_HEADER = 100 * 1024 * 1024


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) from a .safetensors file's JSON header; no data is read."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ModelFileError(f"{p.name} is not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER:
                raise ModelFileError(f"{p.name} is not a safetensors file (header length {n})")
            header = json.loads(f.read(n))
    except OSError as e:
        raise ModelFileError(f"cannot read {p}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError):
        raise ModelFileError(f"{p.name}: safetensors header is not valid JSON; the file is damaged") from None
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in header.items() if k != "__metadata__"}


_LAYER_RE = re.compile(r"^(.*?\b(?:layers|h|blocks))\.(\d+)\.")


def hf_spec(config: Mapping[str, Any], tensors: Mapping[str, tuple[str, tuple[int, ...]]], quant: str, *,
            name: str = "", source: str = "") -> ModelSpec:
    """Size a transformers checkpoint loaded at ``quant`` (engine/backends/hf.py's choices).

    none: 2 bytes per parameter, the GPU compute dtype (bf16/fp16). On a
          CPU-only machine the backend computes in float32; engine/sizing/memory.py
          doubles these bytes there.
    int8: bitsandbytes LLM.int8: 1 byte per weight plus a float32 scale per
          output row, for every Linear inside the blocks.
    int4: bitsandbytes NF4 with double quantization, as the backend loads it:
          half a byte per weight, a uint8 absmax per 64 weights and a float32
          per 256 of those blocks.
    Embeddings, norms, biases and the output head stay in the compute dtype:
    transformers does not quantize the head, and bitsandbytes only replaces
    Linear layers. A checkpoint that is already quantized
    (``quantization_config``) is sized as stored.
    """
    cfg = dict(config.get("text_config") or config)
    prequant = config.get("quantization_config")
    n_layers = int(cfg.get("num_hidden_layers", 0))
    n_embd = int(cfg.get("hidden_size", 0))
    n_heads = int(cfg.get("num_attention_heads", 0))
    head_dim = int(cfg.get("head_dim") or (n_embd // n_heads if n_heads else 0))
    layer_bytes, layer_params = [0] * n_layers, [0] * n_layers
    inp = out = embd = n_params = 0
    mods: dict[str, str] = {}
    for tname, (dtype, shape) in tensors.items():
        ne = 1
        for d in shape:
            ne *= int(d)
        n_params += ne
        elem = SAFETENSORS_DTYPE_BYTES.get(dtype, 2)
        as_loaded = ne * elem if prequant or elem < 2 or not dtype.startswith(("F", "BF")) else ne * 2
        m = _LAYER_RE.match(tname)
        if m and int(m.group(2)) < n_layers:
            i = int(m.group(2))
            mods.setdefault("layers", m.group(1))
            linear = len(shape) == 2 and tname.endswith(".weight") and not prequant
            if linear and quant == "int8":
                as_loaded = ne + 4 * int(shape[0])
            elif linear and quant == "int4":
                blocks = (ne + 63) // 64
                as_loaded = (ne + 1) // 2 + blocks + (blocks + 255) // 256 * 4
            layer_bytes[i] += as_loaded
            layer_params[i] += ne
        elif "lm_head" in tname:
            out += as_loaded
            mods["head"] = tname.rsplit(".", 1)[0]
        else:
            inp += as_loaded
            if re.search(r"embed_tokens|wte|word_embeddings", tname) and len(shape) == 2:
                embd = as_loaded
                mods["embed"] = tname.rsplit(".", 1)[0]
            elif len(shape) == 1 and "norm" in tname:
                mods["norm"] = tname.rsplit(".", 1)[0]
    tied = out == 0
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or source or cfg.get("model_type", "model")),
        format="hf", quant=str(prequant.get("quant_method", "prequantized")) if prequant else quant,
        architecture=str(cfg.get("model_type", "")), n_layers=n_layers, n_embd=n_embd,
        n_heads=n_heads, n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        head_dim=head_dim, head_dim_v=head_dim, n_ff=int(cfg.get("intermediate_size", 0)),
        n_vocab=int(cfg.get("vocab_size", 0)), n_ctx_train=int(cfg.get("max_position_embeddings", 0)),
        layer_bytes=layer_bytes, input_bytes=inp, output_bytes=out if not tied else embd,
        tied_output=tied, layer_params=layer_params, n_params=n_params, source=source, hf_modules=mods)


def specs_from_hf_dir(folder: str | os.PathLike[str]) -> list[ModelSpec]:
    """none (16-bit), int8 and int4 specs of a local transformers checkpoint (one if pre-quantized)."""
    d = Path(folder)
    try:
        config = json.loads((d / "config.json").read_text())
    except OSError:
        raise ModelFileError(f"{d} has no config.json; it is not a transformers model folder") from None
    except ValueError:
        raise ModelFileError(f"{d / 'config.json'} is not valid JSON") from None
    shards = sorted(d.glob("*.safetensors"))
    if not shards:
        raise ModelFileError(f"{d} has no .safetensors files (PyTorch .bin checkpoints are not supported)")
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for s in shards:
        tensors.update(read_safetensors_header(s))
    size = sum(s.stat().st_size for s in shards)
    quants = ("as-stored",) if config.get("quantization_config") else HF_QUANTS
    out = []
    for q in quants:
        spec = hf_spec(config, tensors, q, name=d.name, source=str(d))
        spec.download_bytes = size
        out.append(spec)
    return out
