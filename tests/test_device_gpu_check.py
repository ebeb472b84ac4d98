"""scripts/gpu_check.py's parts that run without a GPU: the benchmark modules' loads are
redirected to put every layer on the GPU (drafts too), and the kit keeps what a build needs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CODE = """
import json, sys
sys.argv = ["gpu_check.py"]
sys.path.insert(0, "scripts")
import gpu_check
gpu_check._offload_everything()
import llama_cpp
from engine.engine import Engine
from engine.config import EngineConfig
from engine.backends.llama.backend import LlamaCppBackend
e = Engine.open(EngineConfig(n_ctx=256, cache_budget=0))
d = LlamaCppBackend(e.backend.path, n_ctx=256)
explicit = Engine.open(EngineConfig(n_ctx=256, n_gpu_layers=3, cache_budget=0))
print(json.dumps({"engine": e.backend.describe().n_gpu_layers, "draft": d.n_gpu_layers,
                  "explicit": explicit.backend.n_gpu_layers}))
"""


def test_every_benchmark_load_is_sent_to_the_gpu():
    out = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"engine": 999, "draft": 999, "explicit": 3}


def test_the_slim_source_keeps_what_the_build_needs():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    needed = ("vendor/llama.cpp/ggml", "vendor/llama.cpp/src", "vendor/llama.cpp/include", "vendor/llama.cpp/common",
              "vendor/llama.cpp/vendor", "vendor/llama.cpp/tools/mtmd", "vendor/llama.cpp/cmake", "llama_cpp")
    for drop in gpu_check.SLIM_DROP:
        assert not any(n == drop or n.startswith(drop + "/") for n in needed), drop


def test_the_profile_comparison_runs_and_the_exact_profile_is_batch_invariant(bundled_path):
    """The GPU check's exact-vs-fast part, run here on the CPU (no layer offloaded): both profiles
    load and answer, and on the CPU the exact one's batch equals its single steps bit for bit."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    got = gpu_check._profiles(bundled_path, rounds=1, tokens=4, repeat=8)
    assert got["exact"]["batch_vs_single_max_logit_diff"] == 0.0
    for profile in ("exact", "fast"):
        assert got[profile]["runtime"] == "cpu" and got[profile]["prefill_tok_s"] > 0 < got[profile]["decode_tok_s"]
    assert got["fast_vs_exact"]["decode_tok_s"] > 0
