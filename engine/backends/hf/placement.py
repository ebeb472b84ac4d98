"""Quantization and placement: the bitsandbytes choice, the compute dtype, and where
accelerate puts the weights (GPU, RAM, or split between them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import HearthError

QUANTS = ("none", "int8", "int4")
DEVICES = ("auto", "cpu", "gpu")


def _gpu_ok() -> bool:
    return torch.cuda.is_available()


def compute_dtype(on_gpu: bool) -> torch.dtype:
    """fp16/bf16 where a GPU supports it, fp32 on the CPU."""
    if on_gpu:
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def quant_config(quant: str, *, on_gpu: bool, offload: bool = False, config: dict | None = None):
    """(BitsAndBytesConfig or None, torch dtype) for a quant choice; HearthError for bad combos."""
    if quant not in QUANTS:
        raise HearthError(f"unknown quantization {quant!r}; choose one of {', '.join(QUANTS)}")
    dtype = compute_dtype(on_gpu)
    existing = (config or {}).get("quantization_config")
    if existing and quant != "none":
        method = existing.get("quant_method", "?")
        raise HearthError(f"this model is already quantized ({method}); choose quantization 'none'")
    if quant == "none":
        return None, dtype
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise HearthError(f"quantization {quant} needs bitsandbytes; run `python3 scripts/setup.py --hf`") from None
    if not on_gpu and torch.backends.mps.is_available():
        raise HearthError(f"bitsandbytes {quant} is not supported on Apple GPUs (MPS); choose quantization 'none'")
    from transformers import BitsAndBytesConfig

    if quant == "int8":
        # LLM.int8 keeps outlier features in 16-bit; offloaded layers stay fp32 on the CPU.
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=offload), dtype
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=dtype,
                              llm_int8_enable_fp32_cpu_offload=offload), dtype


@dataclass(slots=True)
class HFPlacement:
    """Where the weights go: an accelerate ``device_map`` and its ``max_memory`` budget."""

    device_map: str | dict
    max_memory: dict | None
    on_gpu: bool

    @property
    def offload(self) -> bool:
        return bool(self.on_gpu and self.max_memory and self.max_memory.get("cpu"))


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """K and V bytes one token adds to the cache over every layer (GQA-aware)."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(c, "num_attention_heads", 1)
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def default_placement(device: str, *, kv_reserve: int = 0, max_memory: dict | None = None) -> HFPlacement:
    """The simple plan used until engine/sizing.py supplies one (pass its ``max_memory``).

    gpu: everything on GPU 0. cpu: everything in RAM. auto: GPU(s) first, up to
    90% of free memory less the KV reserve, the rest offloaded to 80% of free RAM.
    """
    if device not in DEVICES:
        raise HearthError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "gpu" and not _gpu_ok():
        raise HearthError("device 'gpu' was chosen but torch sees no CUDA GPU; choose 'cpu' or 'auto'")
    if device == "cpu" or not _gpu_ok():
        return HFPlacement({"": "cpu"}, None, False)
    if device == "gpu":
        return HFPlacement({"": 0}, None, True)
    if max_memory is None:
        import psutil

        max_memory = {}
        for i in range(torch.cuda.device_count()):
            free, _total = torch.cuda.mem_get_info(i)
            max_memory[i] = max(0, int(free * 0.9) - (kv_reserve if i == 0 else 0))
        max_memory["cpu"] = int(psutil.virtual_memory().available * 0.8)
    return HFPlacement("auto", max_memory, True)


def device_summary(model: Any) -> str:
    """Where the weights went: "cpu", "cuda:0", or e.g. "cuda:0+cpu" when accelerate
    split the model (GPUs in index order, then RAM, then disk)."""
    placed = getattr(model, "hf_device_map", None) or {"": next(model.parameters()).device}
    names = {f"cuda:{d}" if isinstance(d, int) else str(d) for d in placed.values()}
    names = {"cuda:0" if n == "cuda" else n for n in names}

    def order(n: str) -> tuple[int, int, str]:
        if n.startswith("cuda:"):
            return (0, int(n.split(":", 1)[1]), n)
        return ({"cpu": 1, "disk": 2}.get(n, 3), 0, n)

    return "+".join(sorted(names, key=order))


def parameter_bytes(model: Any) -> int:
    """Bytes of the model's parameters as loaded (packed, for bitsandbytes weights)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
