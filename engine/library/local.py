"""The model library: every model on disk, what it is, and whether it fits this machine.

Sources, in this order: the bundled model, GGUF files in Hearth's models folder
(``catalogue.model_dir()``), GGUF files in folders the user added, and the
Hugging Face cache (hf_cache.py: GGUF files and transformers checkpoints).
Every figure comes from the model's own header (GGUF metadata or config.json +
safetensors headers through engine.sizing.shape), never from a file name.

The library's own state (added folders, when each model was last used) is a
small JSON file the caller names; a damaged one is moved aside, never trusted.
Importing a dropped ``.gguf`` hard-links it into the models folder when both are
on one file system (instant, no second copy on disk, and the library keeps the
model when the user cleans up the original), and copies it otherwise; a
symbolic link would break as soon as the original is moved or deleted.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..atomic import atomic_write
from ..errors import HearthError
from ..models.catalogue import bundled_model_path, model_dir
from ..models.gguf import model_info
from ..models.projector import find_projector, is_projector
from .errors import LibraryError
from .hf_cache import delete_cached, hf_cache_models

ORIGIN_BUNDLED, ORIGIN_MODELS, ORIGIN_ADDED, ORIGIN_HF = "bundled", "models folder", "added folder", "HF cache"
FIT_GPU, FIT_OFFLOAD, FIT_CPU, FIT_NO = "fits on the GPU", "partly offloaded", "CPU only", "won't fit"
RECENT_MAX = 5
LIBRARY_FILE = "library.json"   # the library's own state (added folders, last use), in the data folder


@dataclass(slots=True)
class LibraryModel:
    """One model on disk, as the library lists it."""

    path: Path
    kind: str                 # "gguf" (a file) or "hf_dir" (a transformers snapshot folder)
    origin: str               # ORIGIN_*
    name: str = ""
    architecture: str = ""
    n_params: int = 0
    quant: str = ""           # GGUF general.file_type, or the checkpoint's stored dtype class
    size: int = 0             # bytes on disk
    n_ctx: int = 0            # context the model was trained for
    last_used: float | None = None
    repo_id: str = ""         # for the HF cache
    error: str = ""           # the header could not be read: shown instead of the figures
    projector: str = ""       # a GGUF's vision projector beside it (paired by its header): it sees images

    @property
    def deletable(self) -> bool:
        return self.origin != ORIGIN_BUNDLED

    @property
    def key(self) -> str:
        return str(self.path)


@dataclass(slots=True)
class LibraryState:
    """What the library remembers between runs."""

    folders: list[str] = field(default_factory=list)
    last_used: dict[str, float] = field(default_factory=dict)


class Library:
    """The models on disk. Qt-free; the window's library page is a view of this."""

    def __init__(self, state_file: Path, *, models_folder: Path | None = None,
                 hf_cache: Path | None = None) -> None:
        self.state_file = Path(state_file)
        self._models_folder = models_folder
        self._hf_cache = hf_cache
        self.notice = ""
        self.state = self._load_state()

    # -- state --------------------------------------------------------------

    @property
    def models_folder(self) -> Path:
        return self._models_folder or model_dir()

    @property
    def hf_cache(self) -> Path:
        if self._hf_cache is not None:
            return self._hf_cache
        from ..models.hub import hub_cache_dir

        return hub_cache_dir()

    def _load_state(self) -> LibraryState:
        if not self.state_file.is_file():
            return LibraryState()
        try:
            d = json.loads(self.state_file.read_text())
            folders = [str(f) for f in d.get("folders", []) if isinstance(f, str)]
            used = {str(k): float(v) for k, v in d.get("last_used", {}).items()}
            return LibraryState(folders, used)
        except (OSError, ValueError, TypeError, AttributeError) as e:
            aside = self.state_file.with_name(self.state_file.name + f".corrupt-{int(time.time())}")
            os.replace(self.state_file, aside)
            self.notice = f"The model library's list was unreadable ({e}); it was moved to {aside.name}."
            return LibraryState()

    def _save_state(self) -> None:
        atomic_write(self.state_file, json.dumps({"folders": self.state.folders, "last_used": self.state.last_used},
                                                 indent=1))

    def add_folder(self, folder: str | os.PathLike[str]) -> None:
        """Also list the GGUF files in ``folder`` (kept where they are)."""
        p = Path(folder).expanduser().resolve()
        if not p.is_dir():
            raise LibraryError(f"{p} is not a folder")
        if str(p) not in self.state.folders:
            self.state.folders.append(str(p))
            self._save_state()

    def mark_used(self, path: str | os.PathLike[str]) -> None:
        """Record that a model was loaded now (for "last used" and the recent-models menu)."""
        self.state.last_used[str(Path(path))] = time.time()
        self._save_state()

    def recent(self, n: int = RECENT_MAX) -> list[str]:
        """The paths of the models used last, newest first, that are still on disk."""
        paths = sorted(self.state.last_used, key=lambda p: -self.state.last_used[p])
        return [p for p in paths if os.path.exists(p)][:n]

    # -- listing ------------------------------------------------------------

    def scan(self) -> list[LibraryModel]:
        """Every model on disk, each described from its header (an unreadable one keeps its error)."""
        out: list[LibraryModel] = []
        seen: set[str] = set()

        def add(path: Path, kind: str, origin: str, repo: str = "") -> None:
            real = str(path.resolve())
            if real in seen:
                return
            seen.add(real)
            m = LibraryModel(path, kind, origin, repo_id=repo)
            read_details(m)
            m.last_used = self.state.last_used.get(str(path))
            out.append(m)

        try:
            add(bundled_model_path(), "gguf", ORIGIN_BUNDLED)
        except HearthError:
            pass  # not installed: the library still lists the rest
        for folder, origin in [(self.models_folder, ORIGIN_MODELS)] + [(Path(f), ORIGIN_ADDED)
                                                                        for f in self.state.folders]:
            for p in sorted(folder.glob("*.gguf")) if folder.is_dir() else []:
                if not is_projector(p):  # a projector is a model's eyes, not a model: it shows on its model's row
                    add(p, "gguf", origin)
        for path, kind, repo in hf_cache_models(self.hf_cache):
            add(path, kind, ORIGIN_HF, repo)
        return out

    # -- changing what is on disk -------------------------------------------

    def delete(self, m: LibraryModel) -> None:
        """Remove a model from disk. The bundled model cannot be deleted."""
        if not m.deletable:
            raise LibraryError("the bundled model ships with Hearth and cannot be deleted")
        if m.origin == ORIGIN_HF:
            delete_cached(m.path, self.hf_cache, snapshot=m.kind == "hf_dir")
        else:
            m.path.unlink()
        self.state.last_used.pop(str(m.path), None)
        self._save_state()

    def import_gguf(self, src: str | os.PathLike[str]) -> Path:
        """Add a dropped ``.gguf`` to the models folder: a hard link where the file system
        allows it, else a copy (through a temporary name, so a failed copy leaves nothing).
        The header is checked first; a file that is not a model is refused with the reason."""
        from ..models.gguf import model_info

        s = Path(src).expanduser()
        if s.suffix.lower() != ".gguf":
            raise LibraryError(f"{s.name} is not a .gguf file; drop a GGUF model file")
        model_info(s)  # raises ModelFileError with what is wrong with it
        folder = self.models_folder
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / s.name
        if dest.exists() and os.path.samefile(dest, s):
            return dest
        n = 1
        while dest.exists():
            dest = folder / f"{s.stem}-{n}{s.suffix}"
            n += 1
        try:
            os.link(s, dest)
        except OSError:  # another file system, or links not allowed: copy
            tmp = dest.with_name(dest.name + ".partial")
            try:
                shutil.copyfile(s, tmp)
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        return dest


def read_details(m: LibraryModel) -> None:
    """Fill in name, architecture, parameters, quantization, size and context from the header."""
    from ..sizing.shape import spec_from_gguf, specs_from_hf_dir

    try:
        if m.kind == "gguf":
            spec = spec_from_gguf(m.path)
            m.size = m.path.stat().st_size
            m.quant = spec.quant
            found = find_projector(m.path, model_info(m.path).n_embd)
            m.projector = found.name if found is not None else ""
        else:
            spec = specs_from_hf_dir(m.path)[0]
            m.size = sum(p.stat().st_size for p in m.path.iterdir() if p.is_file())
            m.quant = "as stored" if spec.quant not in ("none", "int8", "int4") else "16-bit"
        m.name = m.repo_id if m.kind == "hf_dir" and m.repo_id else spec.name
        m.architecture, m.n_params, m.n_ctx = spec.architecture, spec.n_params, spec.n_ctx_train
    except (HearthError, OSError, ValueError, KeyError) as e:
        m.name = m.name or m.path.name
        m.error = str(e)


def fit_badge(model: LibraryModel | str | os.PathLike[str], hardware=None) -> tuple[str, str]:
    """The planner's verdict for this machine (or ``hardware``): (badge, one-line summary).

    The badge is FIT_GPU (everything on the GPU), FIT_OFFLOAD (some blocks on the
    CPU), FIT_CPU (no GPU to use, runs from RAM) or FIT_NO (not even the smallest
    plan fits)."""
    from ..sizing.plan import plan_for

    path = model.path if isinstance(model, LibraryModel) else model
    return badge_for_plan(plan_for(str(path), hardware))


def badge_for_plan(plan) -> tuple[str, str]:
    """The badge and summary for an engine.sizing Plan."""
    from ..sizing.plan import STATUS_NO

    if plan.status == STATUS_NO:
        return FIT_NO, plan.summary()
    if not plan.hardware.gpus or plan.n_gpu_layers == 0:
        return FIT_CPU, plan.summary()
    return (FIT_GPU if plan.config.all_on_gpu else FIT_OFFLOAD), plan.summary()


def compatible_drafts(target: str | os.PathLike[str], models: list[LibraryModel]) -> list[LibraryModel]:
    """The GGUF models on disk that can draft for ``target`` (a GGUF file): the same
    vocabulary (engine.spec.drafts.check_draft_compatible) and at most half its weights.
    Smallest first, the order a draft is best in."""
    from ..models.vocab import check_draft_compatible

    try:
        t_bytes, tv = _draft_facts(target)
    except (HearthError, OSError):
        return []
    found: list[tuple[int, LibraryModel]] = []
    for m in models:
        if m.kind != "gguf" or m.error or os.path.realpath(m.path) == os.path.realpath(target):
            continue
        try:
            d_bytes, dv = _draft_facts(m.path)
        except (HearthError, OSError):
            continue
        if d_bytes * 2 <= t_bytes and check_draft_compatible(tv, dv) is None:
            found.append((d_bytes, m))
    return [m for _, m in sorted(found, key=lambda x: (x[0], str(x[1].path)))]


def _draft_facts(path: str | os.PathLike[str]):
    """(weight bytes, vocabulary) of a GGUF, remembered by path, size and mtime: the
    Settings dialog and the library ask on every opening, and a vocabulary takes ~0.1 s to parse."""
    st = os.stat(path)
    return _draft_facts_cached(str(path), st.st_size, st.st_mtime)


@lru_cache(maxsize=64)
def _draft_facts_cached(path: str, size: int, mtime: float):
    from ..models.gguf import model_info

    info = model_info(path)
    return info.weight_bytes, info.vocab()
