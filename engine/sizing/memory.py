"""How many bytes a configuration needs on each GPU and in system RAM.

llama.cpp (fitted to, and tested against, the buffers it reports on the CPU):

* weights: per block. llama.cpp counts n_layers + 1 positions, the blocks and
  then the output head, and ``n_gpu_layers = k`` puts the *last* k positions on
  the GPU (``i_gpu_start = n_layer + 1 - k``): the head and k - 1 blocks (measured
  on lavapipe: 15 -> the head + 14 blocks). The token embedding always stays in
  RAM (llama.cpp looks rows up on the CPU). A tied head is copied to the GPU
  when offloaded.
* KV: ``streams x cells x layers x kv_heads x (head_dim_k + head_dim_v) x bytes(type)``,
  with cells = n_ctx rounded up to 256 (llama.cpp pads the cache), on the
  device of each layer. One context holds the window's sequence and ``parallel``
  API sequences (``n_seq_max = 1 + parallel``, ``kv_unified = false``: a KV stream
  per sequence, each of the full context; llama.cpp's ``n_ctx = cells x n_seq``).
* compute: the graph allocator's peak, which is the larger of two moments
  (per token of the micro-batch ``ub = min(n_batch, n_seq x cells, 512)``, in float32;
  llama.cpp clamps the batch to the context, so a 256-token context computes
  at most 256 tokens at once):
    - output: the logits ``n_vocab`` plus ~2 hidden vectors;
    - attention without flash attention: the KQ scores ``cells x n_heads``,
      the f32 mask ``cells``, plus ~5 hidden and 2 KV-width vectors.
      With flash attention there is no score matrix and the mask is f16.
  Flash attention is the profile's: the fast profile turns it on everywhere
  (the exact profile only with a GPU or a quantized V cache); the CPU repack
  buffers change no compute buffer. Several streams share one compute buffer:
  attention runs per stream over one stream's cells, the micro-batch's tokens
  split evenly over the streams (llama.cpp rounds it up to a multiple of n_seq).
  Fitted on SmolLM2-135M, Qwen2.5-Coder-0.5B and -1.5B at n_ctx 256-32k,
  n_batch 32-2048, KV f16/q8_0/q4_0, flash attention on and off, 1-5 streams
  (see engine/bench/sizing.py): within 1% on the CPU, 3% with flash attention
  at 2k on SmolLM2 (the allocator's layout).
* GPU runtime overhead (CUDA context, cuBLAS workspace, llama.cpp's pool)
  and a fixed RAM overhead for the process's own buffers.

transformers, as engine/backends/hf.py loads it (weights checked on the
CPU against its memory_report; GPU figures are first-principles estimates):
16-bit or bitsandbytes weights per block, the first k blocks on the GPU
(accelerate's order); with no block on a GPU everything is float32 (twice
the 16-bit bytes, and a float32 KV cache), and with a GPU, blocks that
bitsandbytes offloads stay float32 in RAM. Plus a dynamic KV cache,
per-chunk activations, the torch runtime and a 10% allocator slack.

Every pool then gets a MARGIN on its subtotal.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config import default_exactness
from .hardware import GPU, Hardware, MiB
from .shape import ModelSpec

MARGIN = 0.10  # of each pool's subtotal; also the reality-check warning threshold

KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
KV_PAD = 256

# The CUDA context plus cuBLAS workspace and llama.cpp's scratch pool measure
# 300-450 MiB on current drivers; ROCm's HIP runtime is heavier. Apple's Metal
# runtime lives in the same unified memory and is small.
# An RPC worker's device reports its free memory with the worker's own runtime already started, so
# only llama.cpp's small per-device pool is left to count.
GPU_OVERHEAD = {"nvidia": 400 * MiB, "simulated": 400 * MiB, "amd": 512 * MiB, "apple": 64 * MiB, "rpc": 32 * MiB}
CPU_OVERHEAD = 128 * MiB     # llama.cpp threads, batch, token-piece cache, logits copies
OUTPUT_ROWS = 16             # logits rows kept for draft verification
HF_TORCH_RUNTIME = 768 * MiB  # RSS of torch + transformers + bitsandbytes once imported
HF_GPU_CONTEXT = 512 * MiB    # torch's CUDA context, cuBLAS/cuDNN handles
HF_ALLOC_SLACK = 0.10        # torch's caching allocator fragments ~10% of what moves


@dataclass(slots=True)
class Usage:
    """One memory pool (a GPU, or system RAM)."""

    name: str
    available: int
    is_gpu: bool = False
    weights: int = 0
    kv: int = 0
    compute: int = 0
    overhead: int = 0
    draft: int = 0
    prefix_cache: int = 0
    vision: int = 0          # the vision projector: its weights and compute buffer
    shared: int = 0          # RAM only: what a unified-memory GPU holds in the same memory
    layers: int = 0          # blocks placed here
    positions: int = 0       # llama.cpp's offloaded positions here: its blocks, plus the head on the last device

    @property
    def subtotal(self) -> int:
        return (self.weights + self.kv + self.compute + self.overhead + self.draft + self.prefix_cache
                + self.vision)

    @property
    def margin(self) -> int:
        return int(self.subtotal * MARGIN)

    @property
    def total(self) -> int:
        return self.subtotal + self.margin + self.shared

    @property
    def fits(self) -> bool:
        return self.total <= self.available


@dataclass(slots=True, frozen=True)
class Config:
    """One concrete way to load a model, every knob set (no AUTO): a candidate the search prices.

    Not a LoadSpec: the search makes many of these for one spec and keeps one, the plan's."""

    spec: ModelSpec
    n_ctx: int
    n_gpu_layers: int        # llama.cpp meaning: the head + the last k-1 blocks; hf: first k blocks
    kv_type: str = "f16"
    n_batch: int = 512
    draft: ModelSpec | None = None
    prefix_cache: int = 0
    parallel: int = 0         # API sequences beside the window's in the one context (0: the window alone)
    exactness: str = field(default_factory=default_exactness)  # engine.config.EXACTNESS

    @property
    def backend(self) -> str:
        return "hf" if self.spec.format == "hf" else "llama_cpp"

    @property
    def n_seq(self) -> int:
        """Sequences in the context, each with a KV stream of the whole context: the window's and the API's."""
        return 1 + self.parallel

    @property
    def flash_attn(self) -> bool:
        # Mirrors LlamaCppBackend: the fast profile turns it on; the exact profile keeps it off on the
        # CPU (bit-exact batching) and on with a GPU, and a quantized V cache needs it.
        return (self.exactness == "fast" or self.n_gpu_layers > 0
                or self.kv_type not in ("f16", "f32", "bf16"))

    @property
    def all_on_gpu(self) -> bool:
        return self.n_gpu_layers > self.spec.n_layers


@dataclass(slots=True)
class Breakdown:
    pools: list[Usage]          # GPUs first, then RAM (always last)
    config: Config
    parts: dict[str, int] = field(default_factory=dict)  # predicted llama.cpp buffers (reality check)

    @property
    def ram(self) -> Usage:
        return self.pools[-1]

    @property
    def gpus(self) -> list[Usage]:
        return self.pools[:-1]

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.pools)

    def short(self) -> Usage | None:
        """The pool that overflows most, relative to its size."""
        over = [p for p in self.pools if not p.fits]
        return max(over, key=lambda p: p.total / max(p.available, 1)) if over else None


def kv_cells(n_ctx: int) -> int:
    return -(-n_ctx // KV_PAD) * KV_PAD


def kv_layer_bytes(spec: ModelSpec, cells: int, kv_type: str) -> int:
    return int(cells * spec.n_kv_heads * (spec.head_dim + spec.head_dim_v) * KV_BYTES[kv_type])


def _ub(n_batch: int) -> int:
    return max(1, min(n_batch, 512))


def output_peak(spec: ModelSpec, n_batch: int, hidden: int = 3) -> int:
    """Compute buffer at the logits: n_vocab plus a few live hidden vectors per
    token, f32. Measured on the CPU: 3 hidden vectors (2 with flash attention
    and an f16 cache; 3 is the safe side). CUDA logs show 1 (Llama-3-8B: 258.5 MiB at n_ubatch 512); we
    budget 2 on GPUs to stay on the safe side of that unmeasured figure."""
    return _ub(n_batch) * 4 * (spec.n_vocab + hidden * spec.n_embd)


def attention_peak(spec: ModelSpec, n_batch: int, cells: int, flash_attn: bool, n_seq: int = 1) -> int:
    """Compute buffer at the attention softmax (or flash-attention) step. With ``n_seq`` streams
    llama.cpp reserves the micro-batch rounded up to a multiple of n_seq (each stream attends over
    its own ``cells`` with an equal share of the tokens), so the scores grow by that rounding only."""
    rest = 5 * spec.n_embd + 2 * spec.n_kv_heads * spec.head_dim
    ub = -(-_ub(n_batch) // n_seq) * n_seq
    if flash_attn:
        return ub * (4 * rest + 2 * cells)
    return ub * 4 * (cells * (spec.n_heads + 1) + rest)


def split_peak(spec: ModelSpec, n_batch: int, cells: int, head: bool) -> int:
    """Compute buffer of one device in a split over several (llama.cpp's layer split): its graph copies
    its inputs (the mask, f32 and f16, and the hidden state), and a device without the head peaks in the
    feed-forward block (gate, up and their product) instead of at the logits. Measured over loopback RPC
    workers (engine/bench/rpc.py), SmolLM2-135M at n_ctx 1k-4k: within 1% per device."""
    ub = _ub(n_batch)
    if head:
        return ub * (4 * (spec.n_vocab + 5 * spec.n_embd) + 8 * cells)
    return ub * (4 * (3 * spec.n_ff + 7 * spec.n_embd) + 8 * cells)


def _split(n: int, gpus: list[GPU]) -> list[int]:
    """llama.cpp's default layer split: proportional to each GPU's free memory,
    by cumulative fraction (accelerate's greedy fill ends up close to it too)."""
    if not gpus:
        return []
    total = sum(g.free for g in gpus) or 1
    cum, acc = [], 0
    for g in gpus:
        acc += g.free
        cum.append(acc / total)
    counts = [0] * len(gpus)
    for p in range(n):
        x = p / n
        counts[next((i for i, c in enumerate(cum) if x < c), len(gpus) - 1)] += 1
    return counts


def pool_name(g: GPU, several: bool) -> str:
    """A device's pool as people read it: "GPU", "GPU 1", or "worker 10.0.0.5:50052" (an RPC worker)."""
    if g.vendor == "rpc":
        return f"worker {g.name}"
    return f"GPU {g.index}" if several else "GPU"


def _pools(hw: Hardware) -> list[Usage]:
    pools = [Usage(pool_name(g, len(hw.gpus) > 1), g.free, True) for g in hw.gpus]
    return pools + [Usage("RAM", hw.ram_available)]


def estimate(cfg: Config, hw: Hardware) -> Breakdown:
    """Bytes per pool for ``cfg`` on ``hw`` (margin included in each pool's total)."""
    b = (_estimate_hf if cfg.backend == "hf" else _estimate_llama)(cfg, hw)
    if cfg.draft is not None:
        _add_draft(b, cfg, cfg.draft, hw)
    if cfg.spec.vision_bytes and cfg.backend == "llama_cpp":
        # libmtmd puts the projector on the first GPU registered whenever layers are on one (use_gpu), else
        # in RAM; other machines' workers register after this machine's GPUs.
        local = [p for p, g in zip(b.gpus, hw.gpus) if g.vendor != "rpc"] or b.gpus
        (local[0] if local and cfg.n_gpu_layers != 0 else b.ram).vision += cfg.spec.vision_bytes
    b.ram.prefix_cache = cfg.prefix_cache  # snapshots are copied to host memory
    for g, pool in zip(hw.gpus, b.gpus):
        if g.unified:  # Apple: the GPU's allocations come out of the same RAM
            b.ram.shared += pool.subtotal + pool.margin
    return b


def _estimate_llama(cfg: Config, hw: Hardware) -> Breakdown:
    s = cfg.spec
    pools = _pools(hw)
    ram = pools[-1]
    ngl = min(cfg.n_gpu_layers, s.n_layers + 1) if hw.gpus else 0
    k = max(0, ngl - 1)        # blocks on GPUs: the head takes the first offloaded position
    out_gpu = ngl > 0
    cells = kv_cells(cfg.n_ctx)
    n_seq = cfg.n_seq
    kv_l = n_seq * kv_layer_bytes(s, cells, cfg.kv_type)  # one stream per sequence
    fa = cfg.flash_attn
    ub = min(cfg.n_batch, n_seq * cells)  # llama.cpp clamps the batch to the whole context
    a_gpu = output_peak(s, ub, hidden=2)
    a = output_peak(s, ub)
    # Offloaded positions: the last k blocks, then the head as one more "layer".
    counts = _split(ngl, list(hw.gpus))
    split = sum(1 for c in counts if c) > 1   # several devices: each one's graph holds its own inputs
    first = s.n_layers - k
    pos = 0
    for i, pool in enumerate(pools[:-1]):
        idx = list(range(first + pos, min(first + pos + counts[i], s.n_layers)))
        has_out = out_gpu and pos + counts[i] == ngl
        pos += counts[i]
        pool.layers = len(idx)
        pool.positions = counts[i]
        pool.weights = sum(s.layer_bytes[j] for j in idx) + (s.output_bytes if has_out else 0)
        pool.kv = kv_l * len(idx)
        if idx or has_out:
            att = attention_peak(s, ub, cells, fa, n_seq) if idx else 0
            # In a split each device's graph has its own peak; without flash attention a long context's
            # scores can still be larger.
            pool.compute = max(att, split_peak(s, ub, cells, has_out) if split else a_gpu if has_out else 0)
            pool.overhead = GPU_OVERHEAD.get(hw.gpus[i].vendor, GPU_OVERHEAD["nvidia"])
    cpu_layers = s.n_layers - k
    ram.layers = cpu_layers
    ram.weights = s.input_bytes + sum(s.layer_bytes[:cpu_layers]) + (
        0 if out_gpu or s.tied_output else s.output_bytes)
    ram.kv = kv_l * cpu_layers
    att_cpu = attention_peak(s, ub, cells, fa, n_seq) if cpu_layers else 0
    ram.compute = max(att_cpu, 0 if out_gpu else a)
    if split:
        ram.compute += _ub(ub) * (8 * cells + 20 * s.n_embd)
    elif ngl:  # the host-side inputs of the GPU graph: embeddings and the mask
        ram.compute += _ub(ub) * 4 * (s.n_embd + cells)
    ram.overhead = CPU_OVERHEAD + OUTPUT_ROWS * 4 * s.n_vocab
    parts = {"weights": sum(p.weights for p in pools), "kv": sum(p.kv for p in pools),
             "compute": sum(p.compute for p in pools)}
    return Breakdown(pools, cfg, parts)


def _estimate_hf(cfg: Config, hw: Hardware) -> Breakdown:
    s = cfg.spec
    pools = _pools(hw)
    ram = pools[-1]
    k = min(cfg.n_gpu_layers, s.n_layers) if hw.gpus else 0
    quantized = s.quant in ("int8", "int4")
    # With no block on a GPU the backend loads on the CPU and computes in
    # float32: 16-bit tensors double, and so does the KV cache. bitsandbytes'
    # packed weights keep their size.
    f32 = 1 if k else 2
    kv_l = int(cfg.n_ctx * s.n_kv_heads * (s.head_dim + s.head_dim_v) * 2 * f32)
    chunk = _ub(cfg.n_batch)
    act = chunk * 2 * f32 * (3 * s.n_ff + 8 * s.n_embd)
    logits = OUTPUT_ROWS * 4 * s.n_vocab
    head = 0 if s.tied_output else s.output_bytes
    counts = _split(k, list(hw.gpus))
    pos = 0
    for i, pool in enumerate(pools[:-1]):
        idx = list(range(pos, pos + counts[i]))
        pos += counts[i]
        pool.layers = len(idx)
        if not idx:
            continue
        first, last = idx[0] == 0, idx[-1] == s.n_layers - 1
        pool.weights = sum(s.layer_bytes[j] for j in idx) + (s.input_bytes if first else 0) + (
            head if last else 0)
        pool.kv = kv_l * len(idx)
        pool.compute = act + (logits if last else 0)
        if i == 0 and k < s.n_layers:  # offloaded blocks pass through the first GPU
            pool.compute += max(s.layer_bytes, default=0)
        pool.overhead = HF_GPU_CONTEXT + int(HF_ALLOC_SLACK * (pool.kv + pool.compute))
    cpu_idx = range(k, s.n_layers)
    ram.layers = len(cpu_idx)
    if quantized and k and s.layer_params:
        per = lambda j: s.layer_params[j] * 4  # noqa: E731  bitsandbytes offloads blocks in float32
    elif not k and not quantized:
        per = lambda j: s.layer_bytes[j] * 2  # noqa: E731  float32 on the CPU
    else:
        per = lambda j: s.layer_bytes[j]  # noqa: E731
    ram.weights = sum(per(j) for j in cpu_idx) + (0 if k else s.input_bytes * f32) + (
        head * f32 if k < s.n_layers else 0)
    ram.kv = kv_l * len(cpu_idx)
    ram.compute = (act if len(cpu_idx) else 0) + (logits if k < s.n_layers else 0)
    ram.overhead = HF_TORCH_RUNTIME + int(HF_ALLOC_SLACK * (ram.kv + ram.compute))
    # Only the weights are comparable with the backend's report: its KV cache
    # grows with the conversation and torch reports no compute buffers.
    return Breakdown(pools, cfg, {"weights": sum(p.weights for p in pools)})


def _add_draft(b: Breakdown, cfg: Config, d: ModelSpec, hw: Hardware) -> None:
    """The draft model (``d``, which is ``cfg.draft``) runs on the GPU when the target is
    fully offloaded (a CPU draft would slow a GPU target down), otherwise in RAM; never on another
    machine's worker (it runs every step: each would cross the link). It holds a sequence for each of
    the target's (every request may speculate), a KV stream of the whole context each."""
    cells = kv_cells(cfg.n_ctx)
    local = [p for p, g in zip(b.gpus, hw.gpus) if g.vendor != "rpc"]
    on_gpu = bool(local) and cfg.all_on_gpu
    fa = on_gpu or cfg.kv_type not in ("f16", "f32", "bf16")
    need = (d.weight_bytes + (d.output_bytes if on_gpu and d.tied_output else 0)
            + cfg.n_seq * kv_layer_bytes(d, cells, cfg.kv_type) * d.n_layers
            + max(output_peak(d, cfg.n_batch, 2 if on_gpu else 3),
                  attention_peak(d, cfg.n_batch, cells, fa, cfg.n_seq)))
    target = max(local, key=lambda p: p.available - p.total) if on_gpu else b.ram
    target.draft += need
