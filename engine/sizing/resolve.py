"""What a model reference names, for the planner: a GGUF file, a folder, a transformers
checkpoint in the Hugging Face cache, or a model of the catalogue (metadata only, nothing
downloaded). The shapes themselves are read by ``shape``."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from ..errors import ModelFileError
from .shape import ModelSpec, spec_from_gguf, specs_from_hf_dir


# -- the catalogue of known models (metadata only, nothing downloaded) ----------------

@dataclass(slots=True)
class KnownModel:
    id: str
    name: str
    gguf_repo: str
    hf_repo: str
    aliases: list[str]
    draft: str | None
    variants: list[ModelSpec]


@lru_cache(maxsize=1)
def known_models() -> tuple[KnownModel, ...]:
    """The catalogue in engine/data/known_models.json (written by
    tests/fixtures/sizing/make_fixtures.py from published configs)."""
    data = json.loads(files("engine").joinpath("data/known_models.json").read_text())
    return tuple(KnownModel(m["id"], m["name"], m.get("gguf_repo", ""), m.get("hf_repo", ""),
                            list(m.get("aliases", [])), m.get("draft"),
                            [ModelSpec.from_dict(v) for v in m["variants"]]) for m in data["models"])


def _norm(ref: str) -> str:
    r = ref.strip().lower()
    for prefix in ("https://huggingface.co/", "hf.co/", "huggingface.co/"):
        if r.startswith(prefix):
            r = r[len(prefix):]
    return r.rstrip("/")


def find_known(ref: str) -> tuple[KnownModel, str | None] | None:
    """Look a model up by id, alias or repository. The second item says which
    format the name implies: "gguf" for the GGUF repository, "hf" for the
    transformers one, None for a bare id."""
    r = _norm(ref)
    for m in known_models():
        if r == m.gguf_repo.lower():
            return m, "gguf"
        if r == m.hf_repo.lower():
            return m, "hf"
        if r == m.id or r in (a.lower() for a in m.aliases):
            return m, None
    return None


def _hf_cache_dir(repo: str) -> Path | None:
    """A hub id already in the local Hugging Face cache (newest snapshot)."""
    if repo.count("/") != 1:
        return None
    home = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or
                Path.home() / ".cache" / "huggingface") / "hub")
    snaps = home / f"models--{repo.replace('/', '--')}" / "snapshots"
    found = sorted(snaps.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snaps.is_dir() else []
    return found[-1].parent if found else None


@dataclass(slots=True)
class Resolved:
    """What a model reference names: its variants (best quality first) and where they come from."""

    variants: list[ModelSpec]
    where: str                 # "file", "folder", "hf-folder", "catalogue"
    known: KnownModel | None = None
    explicit_quant: bool = False  # the reference names one file: its quantization is the user's choice


def resolve_spec(ref: str | os.PathLike[str] | None) -> Resolved:
    """Turn a path, folder, catalogue id or hub id into sizing variants."""
    if ref is None or str(ref) in ("", "bundled", "default"):
        from ..models.catalogue import bundled_model_path

        return Resolved([spec_from_gguf(bundled_model_path())], "file", explicit_quant=True)
    p = Path(ref).expanduser()
    if p.is_file():
        return Resolved([spec_from_gguf(p)], "file", explicit_quant=True)
    if p.is_dir():
        if (p / "config.json").is_file():
            return Resolved(_best_first(specs_from_hf_dir(p)), "hf-folder")
        ggufs = sorted(p.glob("*.gguf"))
        if not ggufs:
            raise ModelFileError(f"{p} holds no .gguf files and no transformers checkpoint")
        specs = [spec_from_gguf(g) for g in ggufs]
        shapes = {(s.architecture, s.n_layers, s.n_embd, s.n_vocab) for s in specs}
        if len(shapes) > 1:
            raise ModelFileError(f"{p} holds different models; choose one .gguf file")
        return Resolved(_best_first(specs), "folder")
    hit = find_known(str(ref))
    if hit:
        m, fmt = hit
        variants = [v for v in m.variants if fmt is None or v.format == fmt]
        return Resolved(_best_first(variants), "catalogue", known=m)
    cached = _hf_cache_dir(str(ref))
    if cached:
        return Resolved(_best_first(specs_from_hf_dir(cached)), "hf-folder")
    names = ", ".join(m.id for m in known_models())
    raise ModelFileError(f"{ref}: not a model file or folder, and not a model Hearth knows ({names})")


def _best_first(specs: list[ModelSpec]) -> list[ModelSpec]:
    # More bytes per weight = closer to the original model. GGUF before
    # transformers at equal size: llama.cpp is the faster path on most machines.
    return sorted(specs, key=lambda s: (-s.weight_bytes, s.format != "gguf"))
