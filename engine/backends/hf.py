"""Hugging Face models through transformers (+ bitsandbytes, accelerate).

The shared decode loop drives this backend exactly like the llama.cpp one:
``forward`` appends tokens to a KV cache the backend owns (a transformers
``DynamicCache``) and returns float32 logits as numpy; ``truncate`` crops the
cache, ``snapshot``/``restore`` deep-copy its tensors. ``model.generate()`` is
never used. torch and transformers are imported here only, and this module is
imported only when the user picks this backend.

Sources: a local transformers folder (safetensors; pickled weights and
remote code only when explicitly allowed), a Hub id (downloaded by
``engine.models.hub``), or a GGUF file, dequantized by transformers once and kept as
a safetensors folder in Hearth's cache so the next load takes seconds.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer

from ..errors import ContextFullError, HearthError, ModelFileError, ModelLoadError, UnsupportedModelError

log = logging.getLogger("hearth.hf")

QUANTS = ("none", "int8", "int4")
DEVICES = ("auto", "cpu", "gpu")
STATE_FORMAT = "hearth-hf-kv-1"
DEFAULT_CTX = 8192
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")

# Progress bars go to the terminal, which the window does not have; load times are logged instead.
transformers.utils.logging.disable_progress_bar()


class _DropInt8CastNotice(logging.Filter):
    """bitsandbytes logs, on every int8 matmul, that fp32 activations are cast to
    fp16 for LLM.int8; that is the documented behaviour and would flood the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "inputs will be cast from" not in record.getMessage()


logging.getLogger("bitsandbytes.autograd._functions").addFilter(_DropInt8CastNotice())


# -- sources ----------------------------------------------------------------------------

def check_folder(path: Path, *, allow_pickle: bool = False, allow_remote_code: bool = False) -> bool:
    """Refuse what a model folder should not make Hearth do; return whether to use safetensors.

    Pickled weights (``.bin``/``.pt``) can run arbitrary code when loaded, and
    ``trust_remote_code`` runs the folder's own Python. Both need an explicit yes.
    """
    if not (path / "config.json").is_file():
        raise ModelFileError(f"{path} is not a transformers model folder (no config.json)")
    files = [p.name for p in path.iterdir() if p.is_file()]
    safe = any(n.endswith(".safetensors") for n in files)
    pickled = [n for n in files if n.endswith(PICKLE_SUFFIXES) and n != "training_args.bin"]
    if not safe:
        if not pickled:
            raise ModelFileError(f"{path} holds no model weights (*.safetensors)")
        if not allow_pickle:
            raise UnsupportedModelError(
                f"{path.name} has only pickled PyTorch weights ({pickled[0]}). Loading a pickle can run "
                "arbitrary code hidden in the file, so Hearth refuses it; convert the model to safetensors, "
                "or allow pickled weights for this model if you trust its source")
    config = json.loads((path / "config.json").read_text())
    if needs_remote_code(config) and not allow_remote_code:
        raise UnsupportedModelError(
            f"{path.name} needs its own Python code to run (model type {config.get('model_type')!r} is not "
            "built into transformers; trust_remote_code). That code would run with your permissions, so "
            "Hearth refuses it unless you allow remote code for this model")
    return safe


def needs_remote_code(config: dict) -> bool:
    """True when transformers cannot build the model without the folder's own code."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    auto_map = config.get("auto_map") or {}
    known = config.get("model_type") in CONFIG_MAPPING
    return bool(auto_map) and not known


def _hearth_cache() -> Path:
    env = os.environ.get("HEARTH_MODEL_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hearth")) / "models"


def gguf_as_folder(path: Path, *, cache: Path | None = None) -> Path:
    """The GGUF file dequantized (float32, exact) into a safetensors folder, converted once.

    transformers' own GGUF reader takes ~30 s even for the 135M bundled model
    (its metadata parser is pure Python); the converted folder loads in about
    a second. Keyed by the file's SHA-256, so an edited file is converted anew.
    float32 is 4 bytes a weight: this route suits small models and quality
    references; large GGUF files belong on the llama.cpp backend, and a file
    whose float32 copy cannot fit in RAM or on disk gets a clear error first.
    """
    import psutil

    from ..models.gguf import read_gguf
    from ..kv.disk_store import file_sha256

    root = (cache or _hearth_cache()) / "from-gguf"
    root.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(path, memo_dir=root)
    out = root / digest[:24]
    if (out / ".complete").is_file():
        return out
    n_weights = sum(int(np.prod(t.shape)) for t in read_gguf(path).tensors)
    need = 4 * n_weights
    gib = f"{need / 2**30:.1f} GiB"
    if need > psutil.virtual_memory().available * 0.9:
        raise ModelLoadError(f"{path.name} dequantized to float32 needs {gib} of RAM, more than is free; "
                             "run it on the llama.cpp backend instead")
    if shutil.disk_usage(root).free < need * 1.1 + (256 << 20):
        raise ModelLoadError(f"not enough disk space in {root} for {path.name} dequantized ({gib})")
    log.info("dequantizing %s through transformers (once, %s)", path.name, gib)
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise UnsupportedModelError(f"transformers cannot read {path.name}: {e}") from None
    tmp = root / f".{digest[:24]}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    # Dequantized, these are plain Linear layers; drop the GGUF marker so the
    # folder reads as an ordinary float32 checkpoint (and can take int8/int4).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / ".complete").write_text(json.dumps({"source": str(path), "sha256": digest}))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    del model
    gc.collect()
    return out


# -- quantization and placement ----------------------------------------------------------

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
class Placement:
    """Where the weights go: an accelerate ``device_map`` and its ``max_memory`` budget."""

    device_map: str | dict
    max_memory: dict | None
    on_gpu: bool

    @property
    def offload(self) -> bool:
        return bool(self.on_gpu and self.max_memory and self.max_memory.get("cpu"))


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(c, "num_attention_heads", 1)
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def default_placement(device: str, *, kv_reserve: int = 0, max_memory: dict | None = None) -> Placement:
    """The simple plan used until engine/sizing.py supplies one (pass its ``max_memory``).

    gpu: everything on GPU 0. cpu: everything in RAM. auto: GPU(s) first, up to
    90% of free memory less the KV reserve, the rest offloaded to 80% of free RAM.
    """
    if device not in DEVICES:
        raise HearthError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "gpu" and not _gpu_ok():
        raise HearthError("device 'gpu' was chosen but torch sees no CUDA GPU; choose 'cpu' or 'auto'")
    if device == "cpu" or not _gpu_ok():
        return Placement({"": "cpu"}, None, False)
    if device == "gpu":
        return Placement({"": 0}, None, True)
    if max_memory is None:
        import psutil

        max_memory = {}
        for i in range(torch.cuda.device_count()):
            free, _total = torch.cuda.mem_get_info(i)
            max_memory[i] = max(0, int(free * 0.9) - (kv_reserve if i == 0 else 0))
        max_memory["cpu"] = int(psutil.virtual_memory().available * 0.8)
    return Placement("auto", max_memory, True)


# -- token bytes ---------------------------------------------------------------------------

def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character alias for each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eot|>", "<|endoftext|>")


def _decoder_kind(tok: Any) -> str:
    """'bytelevel', 'spm' (▁ for space + <0xNN> byte fallback) or 'other', from the tokenizer's decoder."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:  # a slow SentencePiece tokenizer
        return "spm" if getattr(tok, "sp_model", None) is not None or "▁" in "".join(list(tok.get_vocab())[:2000]) else "other"
    dec = json.loads(backend.to_str()).get("decoder") or {}
    text = json.dumps(dec)
    if '"ByteLevel"' in text:
        return "bytelevel"
    if "ByteFallback" in text or "Metaspace" in text or "\u2581" in text or "\\u2581" in text:
        return "spm"
    return "other"


# -- the KV cache ----------------------------------------------------------------------------

class GrowingLayer(DynamicLayer):
    """A full-attention cache layer that writes new K/V in place into a buffer
    grown by doubling, instead of ``torch.cat``-ing the whole history each step.

    transformers' DynamicLayer copies every cached token on every decode step
    (quadratic memory traffic over a reply: at 2k tokens of context that copy
    is as large as the step's own work on small models). Here a step copies
    only the new token; ``keys``/``values`` are views of the buffer's prefix.
    """

    min_capacity = 256

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._len = 0
        self._kbuf = self._vbuf = None
        self.keys = key_states[..., :0, :]
        self.values = value_states[..., :0, :]
        self.is_initialized = True

    def _reserve(self, need: int, k: torch.Tensor, v: torch.Tensor) -> None:
        cap = 0 if self._kbuf is None else self._kbuf.shape[-2]
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
        self.keys = self._kbuf[..., :end, :]
        self.values = self._vbuf[..., :end, :]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self._len = max(0, self._len + tokens_to_remove)
        self.keys = self._kbuf[..., :self._len, :]
        self.values = self._vbuf[..., :self._len, :]

    def reset(self) -> None:
        self.keys = self.values = self._kbuf = self._vbuf = None
        self._len = 0
        self.is_initialized = False

    def nbytes(self) -> int:
        """Bytes actually allocated (the buffer's capacity, not just the used prefix)."""
        if self._kbuf is None:
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


# -- the backend ------------------------------------------------------------------------------

@dataclass(slots=True)
class HFState:
    """A deep copy of the KV cache: (keys, values) per layer, ``n_tokens`` long."""

    n_tokens: int
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class HFBackend:
    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, n_ctx: int | None = None, quant: str = "none",
                 source: str = "", prefill_chunk: int = 512) -> None:
        self.model = model.eval()
        self.tok = tokenizer
        self.info = None  # a GGUF source's header (engine.models.gguf.ModelInfo), for draft-model checks
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
        self._in_device = model.get_input_embeddings().weight.device
        self._cache = self._new_cache()
        self._n = 0
        self._kv_devices: list[torch.device] | None = None
        self._pieces: list[bytes | None] = [None] * max(self.n_vocab, len(tokenizer))
        self._kind = _decoder_kind(tokenizer)
        self._byte_dec = _byte_decoder() if self._kind == "bytelevel" else None
        self._control = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        self._control.update(tokenizer.all_special_ids)

        self.bos_token = tokenizer.bos_token or ""
        self.eos_token = tokenizer.eos_token or ""
        self._bos_id = tokenizer.bos_token_id
        with_special = tokenizer.encode("a", add_special_tokens=True)
        self.add_bos = self._bos_id is not None and with_special[:1] == [self._bos_id]
        eos: set[int] = set()
        gen = getattr(model, "generation_config", None)
        for src in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
            if isinstance(src, int):
                eos.add(src)
            elif src:
                eos.update(int(x) for x in src)
        tmpl = tokenizer.chat_template
        if isinstance(tmpl, dict):  # several named templates: the default one drives chat
            tmpl = tmpl.get("default") or next(iter(tmpl.values()), None)
        self.chat_template = tmpl
        # End-of-turn tokens the template writes also end generation (llama.cpp
        # marks the same ones end-of-generation), even where generation_config
        # names only the base model's end-of-text.
        for text in _END_OF_TURN:
            tid = tokenizer.convert_tokens_to_ids(text)
            if tmpl and text in tmpl and isinstance(tid, int) and tid in self._control:
                eos.add(tid)
        self.eos_ids = frozenset(eos)
        self.kv_dtype = self._warm_up()

    def _new_cache(self) -> HearthCache:
        return HearthCache()

    @torch.inference_mode()
    def _warm_up(self) -> torch.dtype:
        """One token through the model: records each layer's KV device and dtype (for
        restoring snapshots from disk) and takes first-call costs off the first reply."""
        self.forward([self._bos_id if self._bos_id is not None else 0])
        layers = self._cache.layers
        self._kv_devices = [layer.keys.device for layer in layers]
        dtype = layers[0].keys.dtype
        self.truncate(0)
        return dtype

    # -- tokens ------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False, split_special_tokens=not special)
        if add_bos and self._bos_id is not None:
            ids = [self._bos_id, *ids]
        return list(ids)

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._pieces[token_id] if token_id < len(self._pieces) else None
        if piece is None:
            piece = self._piece(token_id)
            if token_id < len(self._pieces):
                self._pieces[token_id] = piece
        return piece

    def _piece(self, tid: int) -> bytes:
        if tid in self._control:
            return b""
        text = self.tok.convert_ids_to_tokens(tid)
        if text is None:  # padding rows of the output layer beyond the vocabulary
            return b""
        added = self.tok.added_tokens_decoder.get(tid)
        if added is not None:  # added tokens are stored as plain text, not byte-encoded
            return added.content.encode("utf-8")
        if self._kind == "bytelevel":
            try:
                return bytes(self._byte_dec[c] for c in text)
            except KeyError:
                return text.encode("utf-8")
        if self._kind == "spm":
            m = _BYTE_TOKEN.fullmatch(text)
            if m:
                return bytes([int(m.group(1), 16)])
            return text.replace("\u2581", " ").encode("utf-8")
        return self.tok.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False).encode("utf-8")

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
                logits = self.model(input_ids=torch.tensor([list(tokens)], device=self._in_device),
                                    cache=self._cache, use_cache=True,
                                    logits_to_keep=0 if all_logits else 1).logits
                self._n += n
                return _to_numpy(logits[0] if all_logits else logits[0, -1])
            rows = []
            for s in range(0, n, self.prefill_chunk):
                part = list(tokens[s:s + self.prefill_chunk])
                last = s + len(part) == n
                logits = self.model(input_ids=torch.tensor([part], device=self._in_device),
                                    cache=self._cache, use_cache=True,
                                    logits_to_keep=0 if all_logits else 1).logits
                self._n += len(part)
                if all_logits:
                    rows.append(_to_numpy(logits[0]))
                elif last:
                    return _to_numpy(logits[0, -1])
            return np.concatenate(rows)
        except BaseException:
            # Roll back whatever part of this call landed, so kv_len stays the truth.
            self._n = self._cache.get_seq_length()
            self.truncate(start_len)
            raise

    def truncate(self, n: int) -> None:
        n = max(0, n)
        if n >= self._n:
            return
        if n == 0:
            self._cache = self._new_cache()
        else:
            self._cache.crop(n - self._n)
        self._n = n

    def snapshot(self) -> HFState:
        n = self._n
        layers = [] if n == 0 else [(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone())
                                    for layer in self._cache.layers]
        return HFState(n, layers)

    def restore(self, state: HFState) -> None:
        if not isinstance(state, HFState):
            raise HearthError("could not restore a KV snapshot: it was taken from another backend")
        cache = self._new_cache()
        if state.n_tokens:
            if len(state.layers) != len(self._kv_devices or ()):
                raise HearthError("could not restore a KV snapshot: it was taken from another model")
            for i, (k, v) in enumerate(state.layers):
                cache.update(k, v, i)  # copies into the new cache's buffer; the snapshot stays untouched
        self._cache = cache
        self._n = state.n_tokens

    def nbytes(self, state: HFState) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in state.layers)

    def state_bytes(self, state: HFState) -> bytes:
        from safetensors.torch import save

        tensors = {}
        for i, (k, v) in enumerate(state.layers):
            tensors[f"k.{i}"] = k.detach().to("cpu").contiguous()
            tensors[f"v.{i}"] = v.detach().to("cpu").contiguous()
        return save(tensors, metadata={"format": STATE_FORMAT, "n_tokens": str(state.n_tokens),
                                       "n_layers": str(len(state.layers))})

    def state_from_bytes(self, n_tokens: int, data: bytes | bytearray) -> HFState:
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
        n_layers = int(meta.get("n_layers", 0))
        devices = self._kv_devices or []
        if n_tokens and n_layers != len(devices):
            raise HearthError("stored KV state was taken from another model")
        layers = []
        for i in range(n_layers if n_tokens else 0):
            k, v = tensors[f"k.{i}"], tensors[f"v.{i}"]
            if k.shape[-2] != n_tokens or k.dtype != self.kv_dtype:
                raise HearthError("stored KV state does not match this model's cache layout")
            layers.append((k.to(devices[i]), v.to(devices[i])))
        return HFState(n_tokens, layers)

    def state_identity(self) -> dict[str, str]:
        return {"backend": self.name,
                "format": f"{STATE_FORMAT} transformers {transformers.__version__} torch {torch.__version__}",
                "quant": self.quant, "kv_dtype": str(self.kv_dtype),
                "devices": ",".join(sorted({str(d) for d in self._kv_devices or []}))}

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
        for layer in self._cache.layers:
            b = layer.nbytes() if isinstance(layer, GrowingLayer) else 0
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
        self._cache = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # float32 on the CPU is a no-op view; anything else costs one copy of the row(s).
    return t.float().cpu().numpy()


# -- loading -------------------------------------------------------------------------------

def load(ref: Any, *, n_ctx: int | None = None, quant: str = "none", device: str = "auto",
         max_memory: dict | None = None, n_threads: int | None = None, allow_pickle: bool = False,
         allow_remote_code: bool = False) -> HFBackend:
    """Build an HFBackend from a local ModelRef (kind ``hf_dir`` or ``gguf``) or a path.

    Hub ids are fetched first by ``engine.models.hub.fetch_ref``. ``max_memory`` is the
    hook for engine/sizing.py's plan; without it a simple default is used (see
    ``default_placement``).
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
    backend = HFBackend(model, tok, n_ctx=n_ctx, quant=quant, source=source)
    if source.lower().endswith(".gguf"):
        from ..models.gguf import model_info

        backend.info = model_info(source)
    return backend


def source_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """A content identity for the prefix store: a GGUF file's SHA-256, or one over a
    folder's config and weight files."""
    import hashlib

    from ..kv.disk_store import file_sha256

    if path.is_file():
        return file_sha256(path, memo_dir=memo_dir)
    h = hashlib.sha256()
    for p in sorted(path.iterdir()):
        if p.name == "config.json" or p.name.endswith((".safetensors",) + PICKLE_SUFFIXES):
            h.update(p.name.encode() + b"\0" + file_sha256(p.resolve(), memo_dir=memo_dir).encode())
    return h.hexdigest()
