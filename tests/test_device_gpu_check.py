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
