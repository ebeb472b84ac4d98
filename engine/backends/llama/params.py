"""llama.cpp's model and context parameters for one load, and the exactness profiles' switches.

The exactness profiles (engine/config.py's EXACTNESS). "exact": batch-invariant kernels, so
cached and speculative output equal plain decoding bit for bit. "fast": the two runtime switches
llama.cpp offers back on (repack buffers, flash attention). LLAMAFILE is a compile-time switch and
stays off in either profile; the tiled K-quant matmul is read once per process
(GGML_CPU_TILED_MM, set in init()), so a profile chosen after start-up cannot change it.
"""
from __future__ import annotations

import ctypes

import llama_cpp as lc

from ...errors import HearthError

KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2, "f32": 0, "bf16": 30}  # the name -> ggml's type


def model_params(n_gpu_layers: int, repack: bool, tensor_split: tuple[float, ...] | None = None):
    """The model's load parameters: ``n_gpu_layers`` blocks on the GPU, shared over the devices by
    ``tensor_split`` (llama.cpp's device order; None: by free memory), and the repack buffers."""
    mparams = lc.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    if tensor_split:
        n = lc.llama_max_devices()
        if len(tensor_split) > n:
            raise HearthError(f"this llama.cpp build splits over at most {n} devices, not {len(tensor_split)}")
        # The struct keeps a reference to the array (ctypes' _objects) for as long as the load reads it.
        mparams.tensor_split = (ctypes.c_float * n)(*tensor_split)
    # The CPU "repack" buffers (interleaved Q4_0/Q4_K/IQ4_NL weights on
    # AVX2) run batches through a gemm that quantizes activations in groups
    # of four rows and single tokens through a gemv that does not: a token's
    # logits then depend on its place in the batch (0.2-0.9 logit measured
    # on Q4_K_M), which breaks the exactness of speculative verification
    # and of the prefix cache. Off by default; measured cost on the 1.5B
    # Q4_K_M here: ~12% decode, none on prefill, and it saves the repacked
    # duplicate of those weights. ``repack=True`` trades exactness for speed.
    mparams.use_extra_bufts = repack
    return mparams


def context_params(*, n_ctx: int, n_batch: int, n_threads: int, kv_type: str, flash_attn: bool | None,
                   n_gpu_layers: int):
    """The context's parameters, and whether flash attention is on (None: chosen here)."""
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = n_batch
    cparams.n_ubatch = min(n_batch, 512)
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    cparams.type_k = cparams.type_v = KV_TYPES[kv_type]
    # On the CPU, flash attention makes a token's logits depend on how it
    # was batched; with it off (and tinyBLAS off in our build) a batch of k
    # tokens gives bit-identical logits to k single steps, which keeps the
    # prefix cache and speculative decoding exact. On a GPU the default is
    # llama.cpp's auto. A quantized V cache needs flash attention.
    if flash_attn is None:
        flash_attn = n_gpu_layers > 0 or kv_type not in ("f16", "f32", "bf16")
    cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.no_perf = True
    # With no layer on a device, llama.cpp still copies weights to a visible GPU for big batches
    # (op offload): device memory the plan never counted, and a prefill computed by other
    # kernels than the decode steps. "Nothing on the GPU" means nothing there.
    cparams.op_offload = n_gpu_layers != 0
    return cparams, flash_attn
