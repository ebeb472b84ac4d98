"""Browsing the Hugging Face Hub before downloading: search, a repository's files, and the fit.

Everything goes through ``huggingface_hub`` (HfApi against ``hub_endpoint()``):
``list_models`` to search (filter ``gguf`` or library ``transformers``),
``model_info(files_metadata=True)`` for each file's size and LFS sha256.

The fit badge before a download is the planner's (engine.sizing.plan_for) on the
model's real shapes, never on a name:
- a GGUF file: its header, read with HTTP ``Range`` requests on the resolve URL
  (the first MiB, growing until the tensor table is complete; a split file's
  shards each give their part of the table); the file size comes from the Hub;
- a transformers repository: ``config.json`` (huggingface_hub's own
  ``hf_hub_download``: a small file, nothing to resume) and the safetensors
  headers (``HfApi.get_safetensors_metadata``, Range requests too).

Offline (``HF_HUB_OFFLINE=1``, or the Hub cannot be reached) every call raises
HubOffline with one line saying so; the library of models on disk does not need the Hub.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HearthError
from ..models.hub import _network_errors, hub_endpoint, offline_mode
from ..models.hub_files import HubError, projector_files

KINDS = ("gguf", "transformers")
HEADER_FIRST = 1 << 20
HEADER_MAX = 64 << 20      # a GGUF header (vocabulary + tensor table) is a few MiB; past this, give up
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


class HubOffline(HubError):
    """The Hub cannot be reached (or offline mode is on)."""


@dataclass(slots=True)
class HubModel:
    """One search result."""

    repo_id: str
    kind: str                  # "gguf" or "transformers"
    downloads: int = 0
    likes: int = 0
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class HubFile:
    """One downloadable model in a repository: a GGUF file (all shards of a split one) or,
    for a transformers repository, its weights together."""

    name: str                          # the first shard, or "" for a transformers repository
    parts: list[str]
    size: int                          # bytes, every part together
    sha256: dict[str, str]             # part -> the LFS sha256 the Hub lists (when it lists one)
    etags: dict[str, str] = field(default_factory=dict)  # part -> the blob name in the cache
    projector: str = ""                # a GGUF's vision projector, fetched with it (engine/models/hub_files.py)
    projector_size: int = 0


def _api():
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint())


def _offline_guard(what: str) -> None:
    if offline_mode():
        raise HubOffline(f"offline mode is on (HF_HUB_OFFLINE), so the Hub cannot be {what}; "
                         "the models already on disk still work")


def _check_reachable() -> None:
    """One request to the Hub, without huggingface_hub's retries: offline is said at once, not after its
    five retries with backoff (23 s). Any answer at all means the Hub can be reached."""
    from huggingface_hub import get_session

    try:
        with get_session().stream("GET", hub_endpoint(), timeout=10, follow_redirects=False):
            pass  # the answer's head is enough; its body (the Hub's home page) is not read
    except _network_errors() as e:
        raise _offline(e) from None


def _offline(e: BaseException) -> HubOffline:
    return HubOffline(f"cannot reach {hub_endpoint()} ({type(e).__name__}); you seem to be offline. "
                      "The models already on disk still work.")


def search(query: str, kind: str = "gguf", *, limit: int = 40) -> list[HubModel]:
    """Models on the Hub matching ``query``, most downloaded first."""
    if kind not in KINDS:
        raise HearthError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    _offline_guard("searched")
    _check_reachable()
    try:
        found = _api().list_models(search=query.strip() or None, filter=kind, sort="downloads", limit=limit)
        return [HubModel(m.id, kind, int(m.downloads or 0), int(m.likes or 0), list(m.tags or []))
                for m in found]
    except _network_errors() as e:
        raise _offline(e) from None


def repo_files(repo_id: str, revision: str | None = None) -> tuple[list[HubFile], list[HubFile]]:
    """(GGUF files, transformers weights) of a repository, with sizes and sha256.

    A split GGUF is one entry; the transformers list has one entry (all safetensors
    shards) or none. Projector files (mmproj) are not models: each GGUF entry names the one
    that is downloaded with it, if the repository has one."""
    from huggingface_hub.errors import RepositoryNotFoundError

    _offline_guard("asked for files")
    _check_reachable()
    try:
        info = _api().model_info(repo_id, revision=revision, files_metadata=True)
    except RepositoryNotFoundError:
        raise HubError(f"no model {repo_id!r} on the Hugging Face Hub") from None
    except _network_errors() as e:
        raise _offline(e) from None
    sizes, shas = {}, {}
    for s in info.siblings or []:
        sizes[s.rfilename] = int(s.size or 0)
        if s.lfs is not None and s.lfs.sha256:
            shas[s.rfilename] = s.lfs.sha256
    ggufs: dict[str, list[str]] = {}
    for n in sorted(sizes):
        if n.endswith(".gguf") and "mmproj" not in n.lower():
            ggufs.setdefault(_SPLIT.sub("", n), []).append(n)
    out = [_entry(parts[0], parts, sizes, shas) for parts in ggufs.values()]
    for entry in out:
        for proj in projector_files(sorted(sizes), entry.parts):
            entry.projector, entry.projector_size = proj, sizes[proj]
    weights = [n for n in sizes if "/" not in n and n.endswith(".safetensors")]
    hf = [_entry("", sorted(weights), sizes, shas)] if weights and "config.json" in sizes else []
    return out, hf


def _entry(name: str, parts: list[str], sizes: dict, shas: dict) -> HubFile:
    sha = {p: shas[p] for p in parts if p in shas}
    return HubFile(name, parts, sum(sizes[p] for p in parts), sha, etags=dict(sha))


# -- the shapes, before downloading -------------------------------------------------------

def _get_range(url: str, start: int, end: int) -> bytes:
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = dict(build_hf_headers(), Range=f"bytes={start}-{end - 1}")
    r = get_session().get(url, headers=headers, follow_redirects=True, timeout=30)
    hf_raise_for_status(r)
    return r.content[: end - start]  # a server that ignores Range sends it all


def remote_gguf_header(repo_id: str, filename: str, size: int, revision: str | None = None):
    """The parsed header (engine.models.gguf.GGUFFile) of a GGUF file on the Hub, read with
    Range requests: the first MiB, then four times as much until the tensor table is whole."""
    from huggingface_hub import hf_hub_url

    from ..errors import ModelFileError
    from ..models.gguf_header import GGUF_MAGIC, _parse, _Reader

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=hub_endpoint())
    n = HEADER_FIRST
    while True:
        want = min(n, size)
        try:
            buf = _get_range(url, 0, want)
        except _network_errors() as e:
            raise _offline(e) from None
        if buf[:4] != GGUF_MAGIC:
            raise HubError(f"{repo_id}/{filename} is not a GGUF file (its first bytes are not a GGUF header)")
        try:
            return _parse(_Reader(buf, Path(filename)), size)
        except ModelFileError as e:
            if want >= size or n >= HEADER_MAX or "truncated or corrupt" not in str(e):
                raise HubError(f"{repo_id}/{filename}: cannot read its GGUF header ({e})") from None
            n *= 4


def remote_spec(repo_id: str, f: HubFile, revision: str | None = None):
    """The planner's ModelSpec of a GGUF entry, from the headers of all its parts."""
    from ..sizing.shape import gguf_spec

    meta = None
    tensors: list[tuple[str, tuple[int, ...], str]] = []
    for part in f.parts:
        g = remote_gguf_header(repo_id, part, _part_size(repo_id, part, f), revision)
        meta = meta or g.metadata
        tensors.extend((t.name, t.shape, t.type_name) for t in g.tensors)
    assert meta is not None  # an entry has at least one part
    spec = gguf_spec(meta, tensors, source=f"{repo_id}/{f.name}", file_size=f.size)
    if f.projector:  # its eyes come with it: the plan and the fit badge count them
        from ..models.projector import memory_of

        try:
            g = remote_gguf_header(repo_id, f.projector, f.projector_size, revision)
        except HubOffline:
            raise
        except HubError:
            # An unreadable projector must not hide the model's badge: it is downloaded with the
            # model, so its bytes count; loading it later refuses it with the file's own error.
            spec.vision_bytes = f.projector_size
        else:
            if g.metadata.get("clip.vision.projection_dim") in (None, spec.n_embd):
                spec.vision_bytes = sum(memory_of(g.metadata, sum(t.nbytes for t in g.tensors)))
    return spec


def _part_size(repo_id: str, part: str, f: HubFile) -> int:
    if len(f.parts) == 1:
        return f.size
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    meta = get_hf_file_metadata(hf_hub_url(repo_id, part, endpoint=hub_endpoint()), endpoint=hub_endpoint())
    return int(meta.size or 0)


def remote_hf_specs(repo_id: str, revision: str | None = None):
    """16-bit, int8 and int4 specs of a transformers repository, from config.json and the
    safetensors headers (no weights downloaded)."""
    from huggingface_hub import hf_hub_download

    from ..config import HF_QUANTS
    from ..sizing.shape import hf_spec

    try:
        cfg_path = hf_hub_download(repo_id, "config.json", revision=revision, endpoint=hub_endpoint())
        config = json.loads(Path(cfg_path).read_text())
        st = _api().get_safetensors_metadata(repo_id, revision=revision)
    except _network_errors() as e:
        raise _offline(e) from None
    except ValueError as e:
        raise HubError(f"{repo_id}: cannot read its config.json ({e})") from None
    tensors = {name: (t.dtype, tuple(t.shape)) for fm in st.files_metadata.values()
               for name, t in fm.tensors.items()}
    quants = ("as-stored",) if config.get("quantization_config") else HF_QUANTS
    return [hf_spec(config, tensors, q, name=repo_id, source=repo_id) for q in quants]


def fit(repo_id: str, f: HubFile, hardware=None, *, kind: str = "gguf", revision: str | None = None):
    """(badge, summary, spec) for one entry on this machine (or ``hardware``): the
    planner on the real shapes. ``kind`` "transformers" plans the repository's weights."""
    from ..sizing.plan import plan_for
    from ..sizing.resolve import Resolved
    from .local import badge_for_plan

    if kind == "gguf":
        spec = remote_spec(repo_id, f, revision)
        res = Resolved([spec], "hub", explicit_quant=True)
    else:
        specs = remote_hf_specs(repo_id, revision)
        res = Resolved(sorted(specs, key=lambda s: -s.weight_bytes), "hub")
        spec = res.variants[0]
    plan = plan_for(res, hardware)
    badge, summary = badge_for_plan(plan)
    return badge, summary, plan.spec if kind != "gguf" else spec
