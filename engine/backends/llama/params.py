"""llama.cpp's model and context parameters for one load, and the exactness profiles' switches.

The exactness profiles (engine/config.py's EXACTNESS). "exact": batch-invariant kernels, so
cached and speculative output equal plain decoding bit for bit. "fast": what llama.cpp runs
with (repack buffers, flash attention, and the batch kernels: tinyBLAS and the tiled K-quant
matmul). Hearth's build puts the batch kernels behind one run-time switch (scripts/ggml_patch.py):
off while any model in the exact profile is loaded in this process (ExactKernels).
"""
from __future__ import annotations

import ctypes
import threading

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


def kv_streams(n_seq: int) -> int:
    """The KV streams llama.cpp makes for a context of ``n_seq`` sequences here: one (a unified cache) for
    one sequence, else one per sequence (``context_params`` says why)."""
    return 1 if n_seq == 1 else n_seq


def context_params(*, n_ctx: int, n_batch: int, n_threads: int, kv_type: str, flash_attn: bool | None,
                   n_gpu_layers: int, n_seq: int = 1):
    """The context's parameters, and whether flash attention is on (None: chosen here).

    ``n_seq`` sequences of ``n_ctx`` tokens each: with more than one, each gets a KV stream of its
    own (kv_unified off): in a unified cache a sequence's cells interleave with the others' and its
    attention sums in another order, so its logits would depend on what else runs; with a stream each
    they are the solo run's, bit for bit."""
    if n_seq < 1:
        raise HearthError(f"a context holds at least one sequence, not {n_seq}")
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = n_ctx * n_seq
    cparams.n_seq_max = n_seq
    cparams.kv_unified = kv_streams(n_seq) == 1
    cparams.n_batch = n_batch
    cparams.n_ubatch = min(n_batch, 512)
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    cparams.type_k = cparams.type_v = KV_TYPES[kv_type]
    # On the CPU, flash attention makes a token's logits depend on how it
    # was batched; with it off (and the batch kernels off: ExactKernels) a batch of k
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


class ExactKernels:
    """The batch kernels (tinyBLAS, the tiled K-quant matmul) off while a model in the exact profile
    is loaded in this process.

    Both serve only batches (tinyBLAS two tokens or more, the tiled matmul 8+ rows), so with them a
    token's logits depend on its batch: the exact profile needs them off, the fast profile gains
    Q8_0, Q4_0 and F16 prefill from tinyBLAS and K-quant prefill from the tiled matmul. ggml reads
    the switch once per graph, so a graph's threads agree; while an exact model is loaded, a fast
    one beside it runs without them too (slower, never wrong). A build without the switch (an
    older wheel) has tinyBLAS compiled out and the tiled matmul off for the process (init()),
    which is exact already: ``available`` is then False and nothing changes."""

    _lock = threading.Lock()
    _holders = 0
    _switch: ctypes.c_int | None = None
    _looked = False

    @classmethod
    def switch(cls) -> ctypes.c_int | None:
        """The build's ``ggml_cpu_batch_kernels`` (1: on), or None in a build without it."""
        if not cls._looked:
            cls._looked = True
            # Through libllama's own handle: dlsym searches its dependencies, so this is the copy of
            # libggml-cpu that llama.cpp runs. The wheel ships the library three times (.so, .so.0,
            # .so.0.25.3: wheels have no symlinks), and opening another by path maps a second copy
            # whose switch nothing reads.
            from llama_cpp import llama_cpp as bindings

            try:
                cls._switch = ctypes.c_int.in_dll(getattr(bindings, "_lib"), "ggml_cpu_batch_kernels")
            except (AttributeError, ValueError):  # a build without the switch
                cls._switch = None
        return cls._switch

    @classmethod
    def available(cls) -> bool:
        return cls.switch() is not None

    @classmethod
    def batch_kernels_on(cls) -> bool:
        """Whether the next graph may use the batch kernels."""
        s = cls.switch()
        return bool(s.value) if s is not None else False

    @classmethod
    def holders(cls) -> int:
        """How many models in the exact profile hold the batch kernels off now."""
        return cls._holders

    @classmethod
    def hold(cls) -> None:
        with cls._lock:
            cls._holders += 1
            s = cls.switch()
            if s is not None:
                s.value = 0

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._holders = max(0, cls._holders - 1)
            s = cls.switch()
            if s is not None and cls._holders == 0:
                s.value = 1
