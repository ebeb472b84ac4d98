"""The Hugging Face cache as a folder of models: the model repositories it holds, the models in them,
and deleting one.

huggingface_hub owns the layout (``models--ORG--NAME/blobs``, ``snapshots/<commit>/`` links into the
blobs, ``refs/``); it is read with ``scan_cache_dir`` and never written here except to delete. Both
the model library (local.py: GGUF files and transformers snapshots) and the speech models on disk
(engine/voice/on_disk.py) list and delete through these.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from ..models.projector import is_projector
from .errors import LibraryError


def cached_model_repos(cache: Path) -> list:
    """The model repositories in the Hugging Face cache (huggingface_hub's CachedRepoInfo), by id;
    none for a cache that is missing or that huggingface_hub cannot read."""
    if not cache.is_dir():
        return []
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache)
    except Exception:  # huggingface_hub raises CacheNotFound and friends; an odd cache lists nothing
        return []
    return sorted((r for r in info.repos if r.repo_type == "model"), key=lambda r: r.repo_id)


def hf_cache_models(cache: Path) -> list[tuple[Path, str, str]]:
    """(path, kind, repo id) for each model in the Hugging Face cache: each GGUF file
    of a model repo's snapshots, and each snapshot that is a transformers checkpoint."""
    out: list[tuple[Path, str, str]] = []
    for repo in cached_model_repos(cache):
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            names = {f.file_name for f in rev.files}
            for f in sorted(rev.files, key=lambda f: str(f.file_path)):
                if f.file_name.endswith(".gguf") and not is_projector(f.file_path):
                    out.append((f.file_path, "gguf", repo.repo_id))
            if "config.json" in names and any(n.endswith(".safetensors") for n in names):
                out.append((rev.snapshot_path, "hf_dir", repo.repo_id))
    return out


def delete_cached(path: Path, cache: Path, *, snapshot: bool) -> None:
    """Delete from the Hugging Face cache one file of a snapshot (its link, and its blob unless another
    snapshot uses it) or a whole snapshot folder: each of its files so, then the folder and the refs
    that name it; the repository's folder goes with its last snapshot. (huggingface_hub's own deletion
    takes commit hashes for the whole cache, so it would also take the same commit of another repository.)"""
    if not snapshot:
        blob = path.resolve()
        path.unlink()
        repo_dir = next((p for p in path.parents if p.name.startswith("models--")), None)
        others = [p for p in repo_dir.glob("snapshots/*/**/*") if p.is_symlink() and p.resolve() == blob] \
            if repo_dir else []
        if not others and blob != path and blob.is_file():
            blob.unlink()
        return
    repo_dir = path.parent.parent
    if not repo_dir.name.startswith("models--") or path.parent.name != "snapshots":
        raise LibraryError(f"{path} is not a snapshot in the Hugging Face cache")
    for f in sorted(path.rglob("*")):
        if f.is_symlink() or f.is_file():
            delete_cached(f, cache, snapshot=False)
    shutil.rmtree(path)
    if not any((repo_dir / "snapshots").iterdir()):
        shutil.rmtree(repo_dir)
        return
    for ref in (repo_dir / "refs").rglob("*") if (repo_dir / "refs").is_dir() else []:
        if ref.is_file() and ref.read_text(encoding="utf-8").strip() == path.name:
            ref.unlink()
