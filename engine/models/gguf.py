"""What Hearth knows about a GGUF model from its header alone: GgufInfo.

The header itself is read by gguf_header.py (strict: a truncated or corrupt file
gets a clear message); this module distills the fields sizing, the draft check
and ``python -m engine info`` use.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .vocab import Vocab
from .gguf_header import FILE_TYPES, read_gguf


@dataclass(slots=True, frozen=True)
class GgufInfo:
    """What sizing, the draft check and ``engine info`` need to know about a model."""

    path: Path
    name: str
    architecture: str
    file_size: int
    n_layers: int
    n_embd: int
    n_heads: int
    n_kv_heads: int
    head_dim: int          # key head size
    head_dim_v: int        # value head size
    n_ctx_train: int
    n_vocab: int
    file_type: str         # from general.file_type, e.g. "Q4_K_M"
    tensor_types: dict[str, int]  # ggml type name -> tensor count
    weight_bytes: int
    layer_bytes: list[int]  # bytes of weights per transformer block
    other_bytes: int        # embeddings, output head, norms outside blocks
    chat_template: str | None
    bos_token_id: int | None
    eos_token_id: int | None
    eot_token_id: int | None
    special_tokens: dict[str, str] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list, repr=False)
    tokenizer_model: str = ""

    def kv_bytes_per_token(self, bytes_per_elem: float = 2.0) -> float:
        """K and V for every layer: 2 x layers x kv_heads x head_dim (GQA-aware)."""
        return self.n_layers * self.n_kv_heads * (self.head_dim + self.head_dim_v) * bytes_per_elem

    def vocab(self) -> Vocab:
        """The header's tokenizer, for the draft-compatibility check (no model load needed)."""
        return Vocab(name=self.name, tokenizer_model=self.tokenizer_model, tokens=self.tokens,
                     weight_bytes=self.weight_bytes, path=str(self.path))

    def summary(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in (
            "name", "architecture", "file_size", "file_type", "n_layers", "n_embd", "n_heads",
            "n_kv_heads", "head_dim", "head_dim_v", "n_ctx_train", "n_vocab", "weight_bytes",
            "other_bytes", "tensor_types", "bos_token_id", "eos_token_id", "eot_token_id",
            "special_tokens", "tokenizer_model")}
        d["path"] = str(self.path)
        d["layer_bytes_mean"] = int(sum(self.layer_bytes) / len(self.layer_bytes)) if self.layer_bytes else 0
        d["kv_bytes_per_token_f16"] = int(self.kv_bytes_per_token(2.0))
        d["chat_template"] = self.chat_template
        return d


def _first_int(v: Any) -> int:
    # Some architectures store per-layer head counts as an array; take the max,
    # which is what memory planning must budget for.
    if isinstance(v, list):
        return int(max(v)) if v else 0
    return int(v)


def model_info(path: str | os.PathLike[str]) -> GgufInfo:
    """Read a GGUF file and distill the fields the rest of Hearth uses.

    Remembered per file version (path, size, mtime): the draft search plans a
    badge for every model on disk and reads every candidate's vocabulary, each
    100k+ strings, and a changed or replaced file is read again."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return _model_info(p)  # the clear "not found" message
    return _model_info_cached(str(p), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4)  # a vocabulary of 150k strings is ~10 MB
def _model_info_cached(path: str, size: int, mtime_ns: int) -> GgufInfo:
    return _model_info(Path(path))


def _model_info(path: Path) -> GgufInfo:
    g = read_gguf(path)
    m = g.metadata
    arch = m.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"{g.path.name}: GGUF has no general.architecture; not a model file")

    def key(name: str, default: Any = None) -> Any:
        return m.get(f"{arch}.{name}", default)

    n_layers = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_heads = _first_int(key("attention.head_count", 0))
    n_kv = _first_int(key("attention.head_count_kv", n_heads))
    head_dim = int(key("attention.key_length", n_embd // n_heads if n_heads else 0))
    head_dim_v = int(key("attention.value_length", head_dim))
    tokens = m.get("tokenizer.ggml.tokens") or []
    n_vocab = int(key("vocab_size", len(tokens)))

    layer_bytes = [0] * n_layers
    other = 0
    types: dict[str, int] = {}
    for t in g.tensors:
        types[t.type_name] = types.get(t.type_name, 0) + 1
        parts = t.name.split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layers:
            layer_bytes[int(parts[1])] += t.nbytes
        else:
            other += t.nbytes

    ftype_id = m.get("general.file_type")
    if ftype_id is None:
        file_type = max(types, key=lambda k: types[k]) if types else "unknown"
    else:
        file_type = FILE_TYPES.get(int(ftype_id), f"ftype{ftype_id}")

    def tok_id(name: str) -> int | None:
        v = m.get(f"tokenizer.ggml.{name}_token_id")
        return int(v) if v is not None else None

    special: dict[str, str] = {}
    for nm in ("bos", "eos", "eot", "eom", "unknown", "padding", "sep"):
        i = tok_id(nm)
        if i is not None and 0 <= i < len(tokens):
            special[nm] = tokens[i]

    return GgufInfo(
        path=g.path,
        name=str(m.get("general.name") or g.path.stem),
        architecture=arch,
        file_size=g.file_size,
        n_layers=n_layers,
        n_embd=n_embd,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        n_ctx_train=int(key("context_length", 0)),
        n_vocab=n_vocab,
        file_type=file_type,
        tensor_types=dict(sorted(types.items(), key=lambda kv: -kv[1])),
        weight_bytes=sum(layer_bytes) + other,
        layer_bytes=layer_bytes,
        other_bytes=other,
        chat_template=m.get("tokenizer.chat_template"),
        bos_token_id=tok_id("bos"),
        eos_token_id=tok_id("eos"),
        eot_token_id=tok_id("eot"),
        special_tokens=special,
        tokens=list(tokens),
        tokenizer_model=str(m.get("tokenizer.ggml.model", "")),
    )
