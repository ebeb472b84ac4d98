"""From a reference to a torch model and its tokenizer: the source checks, the
quantization and placement choices, ``from_pretrained``, and its failures as
clear messages. HFBackend (backend.py) wraps what this returns."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ...errors import HearthError, ModelFileError, ModelLoadError
from .placement import default_placement, kv_bytes_per_token, quant_config
from .sources import check_folder, gguf_as_folder

DEFAULT_CTX = 8192


@dataclass(slots=True)
class HFModel:
    """A model ready to wrap: ``source`` is what the user gave (a folder or a .gguf file);
    ``info`` is a GGUF source's header (engine.models.gguf.GgufInfo), else None."""

    model: Any
    tokenizer: Any
    quant: str
    source: str
    info: Any = None


def load_hf_model(ref: Any, *, n_ctx: int | None = None, quant: str = "none", device: str = "auto",
               max_memory: dict | None = None, n_threads: int | None = None, allow_pickle: bool = False,
               allow_remote_code: bool = False) -> HFModel:
    """Load a local ModelRef (kind ``hf_dir`` or ``gguf``) or a path with transformers.

    ``n_ctx`` only sizes the GPU room left for the KV cache. ``max_memory`` is
    the hook for engine/sizing.py's plan; without it a simple default is used
    (see ``default_placement``).
    """
    path = Path(getattr(ref, "path", ref))
    if getattr(ref, "kind", None) == "hub":
        raise HearthError("fetch Hub models with engine.models.hub.fetch_ref before loading them")
    if n_threads:
        torch.set_num_threads(n_threads)
    source = str(path)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelFileError(f"{path.name}: give a .gguf file or a transformers model folder")
        path = gguf_as_folder(path)
    if not path.is_dir():
        raise ModelFileError(f"model not found: {path}")
    safe = check_folder(path, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code)
    config = json.loads((path / "config.json").read_text())
    place = default_placement(device, max_memory=max_memory)
    qc, dtype = quant_config(quant, on_gpu=place.on_gpu, offload=place.offload, config=config)
    if place.max_memory is not None and max_memory is None:
        # Leave room for the KV cache on the GPU before accelerate fills it with weights.
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(path, trust_remote_code=allow_remote_code)
        ctx = n_ctx or min(getattr(cfg, "max_position_embeddings", DEFAULT_CTX) or DEFAULT_CTX, DEFAULT_CTX)
        place = default_placement(device, kv_reserve=ctx * kv_bytes_per_token(cfg, dtype))
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=allow_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, quantization_config=qc, device_map=place.device_map,
            max_memory=place.max_memory, use_safetensors=safe, trust_remote_code=allow_remote_code)
    except torch.OutOfMemoryError:
        raise ModelLoadError(f"not enough GPU memory for {path.name} ({quant}); try int4, or device 'auto' "
                             "to offload part of it to RAM") from None
    except (ValueError, ImportError, RuntimeError, OSError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "out of memory" in msg.lower() or "not enough memory" in msg.lower():
            raise ModelLoadError(f"not enough memory to load {path.name} ({quant}): {msg}") from None
        if quant != "none" and ("bitsandbytes" in msg or "quantiz" in msg.lower()):
            raise HearthError(f"{quant} quantization is not available here: {msg}") from None
        raise ModelLoadError(f"transformers could not load {path.name}: {msg}") from None
    info = None
    if source.lower().endswith(".gguf"):
        from ...models.gguf import model_info

        info = model_info(source)
    return HFModel(model, tok, quant, source, info)
