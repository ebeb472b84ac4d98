"""Hugging Face Hub downloads into the standard Hugging Face cache.

``huggingface_hub`` resolves the repository (file list, sizes, commit, ETags,
auth) and owns the cache layout; Hearth moves the bytes itself because the
library's own downloader deletes a partial file when it stops, so a
cancelled or crashed multi-gigabyte download would start again from zero.
Checked against huggingface_hub 2.4.0 (file_download.py): ``hf_hub_download``
writes each file to a process-unique ``<etag>.<uuid>.incomplete`` and its
``_download_to_tmp_and_move`` unlinks that file in a ``finally`` on any failure,
KeyboardInterrupt and a cancel included; ``http_get`` resumes with ``Range`` only
inside one call (its retries after a dropped connection). It does have a progress
hook (``tqdm_class``) but no cancel. So the library downloads the small files that
need neither (config.json for the Hub browser's fit check), and this module the weights.
Here a partial file (``blobs/<etag>.incomplete``) survives and the next call
continues it with an HTTP ``Range`` request. The finished files land exactly
where ``hf_hub_download`` puts them (``blobs/`` + ``snapshots/<commit>/`` +
``refs/``), so the cache is shared with every other Hugging Face tool.

Offline (``HF_HUB_OFFLINE=1``, or the Hub cannot be reached) the cached copy
is used; if there is none the error says so in one line.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import HearthError
from .catalogue import ModelRef, parse_hub_id
from .hub_files import HubError, projector_files, select_gguf_files, select_model_files, select_named_files

log = logging.getLogger("hearth.hub")

# (bytes done, bytes total, file being fetched) -- called from the downloading thread.
ProgressFn = Callable[[int, int, str], None]

class DownloadCancelled(HearthError):
    """The user stopped a download. Its partial file is kept, so a retry resumes it."""

    exit_code = 130


# -- settings, read at call time (tests and the app may change them after import) -------

def hub_endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """The standard cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_CACHE")
    if env:
        return Path(os.path.expanduser(env))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    return Path(constants.HF_HUB_CACHE)


def offline_mode() -> bool:
    v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return v.strip().upper() in ("1", "ON", "YES", "TRUE")


def _network_errors() -> tuple[type[BaseException], ...]:
    errs: list[type[BaseException]] = [OSError]
    for mod in ("httpx2", "httpx"):  # huggingface_hub 2.x ships httpx2; 1.x used httpx
        try:
            m = __import__(mod)
            errs.append(m.TransportError)
        except ImportError:
            pass
    try:
        from huggingface_hub.errors import OfflineModeIsEnabled
        errs.append(OfflineModeIsEnabled)
    except ImportError:
        pass
    return tuple(errs)


# -- the cache layout ---------------------------------------------------------------------

def _repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _is_commit(rev: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-f]{40}", rev))


def cached_snapshot(repo_id: str, revision: str | None = None, *, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder for a revision, if the cache has one."""
    repo = _repo_dir(cache or hub_cache_dir(), repo_id)
    rev = revision or "main"
    if _is_commit(rev):
        commit = rev
    else:
        ref = repo / "refs" / rev
        if not ref.is_file():
            return None
        commit = ref.read_text().strip()
    snap = repo / "snapshots" / commit
    return snap if snap.is_dir() else None


def _link_into_snapshot(blob: Path, snapshot_file: Path) -> None:
    snapshot_file.parent.mkdir(parents=True, exist_ok=True)
    if snapshot_file.is_symlink() or snapshot_file.exists():
        snapshot_file.unlink()
    try:
        snapshot_file.symlink_to(os.path.relpath(blob, snapshot_file.parent))
    except OSError:  # no symlinks (Windows without developer mode): copy like huggingface_hub does
        import shutil
        shutil.copyfile(blob, snapshot_file)


# -- the transfer -------------------------------------------------------------------------

@dataclass(slots=True)
class _Remote:
    name: str
    url: str
    etag: str
    size: int
    sha256: str = ""  # the LFS sha256 the Hub lists for the file, when it lists one


class _Meter:
    """Sums bytes over all files of one download and reports them, at most every 50 ms."""

    def __init__(self, total: int, progress: ProgressFn | None, cancel: threading.Event | None) -> None:
        self.total, self.done, self.progress, self.cancel = total, 0, progress, cancel
        self._last = 0.0

    def add(self, n: int, name: str, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.progress and (force or now - self._last >= 0.05):
            self._last = now
            self.progress(self.done, self.total, name)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled("download cancelled; the part already fetched is kept and a retry resumes it")


def _fetch_blob(r: _Remote, blob: Path, meter: _Meter, headers: dict[str, str], *,
                retries: int = 5, backoff: float = 0.5) -> None:
    """Download one file into ``blob`` via ``blob.incomplete``, resuming what is there."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    partial = blob.with_name(blob.name + ".incomplete")
    have = partial.stat().st_size if partial.exists() else 0
    if have > r.size:  # not ours or a different version: start over
        partial.unlink()
        have = 0
    meter.add(have, r.name, force=True)
    net_errors = _network_errors()
    left = retries
    while have < r.size:
        meter.check_cancel()
        hdrs = dict(headers, **({"Range": f"bytes={have}-"} if have else {}))
        hdrs["Accept-Encoding"] = "identity"
        got = 0
        try:
            with get_session().stream("GET", r.url, headers=hdrs, follow_redirects=True,
                                      timeout=30) as resp:
                if resp.status_code == 416 and have:  # server says the range is past the end
                    partial.unlink()
                    meter.add(-have, r.name)
                    have = 0
                    continue
                hf_raise_for_status(resp)
                mode = "ab"
                if have and resp.status_code == 200:  # range ignored: the body is the whole file
                    meter.add(-have, r.name)
                    have, mode = 0, "wb"
                with open(partial, mode) as f:
                    for chunk in resp.iter_bytes():  # as received: a drop loses nothing already read
                        meter.check_cancel()
                        f.write(chunk)
                        have += len(chunk)
                        got += len(chunk)
                        meter.add(len(chunk), r.name)
        except DownloadCancelled:
            raise
        except net_errors as e:
            if got:
                left = retries  # progress was made: the connection dropped, not the network
            left -= 1
            if left < 0:
                raise HubError(f"download of {r.name} failed after {retries} retries ({e}); "
                               "run it again to resume") from None
            log.info("connection dropped during %s at %d/%d bytes (%s); resuming", r.name, have, r.size, e)
            time.sleep(backoff)
            continue
        if have < r.size and not got:
            raise HubError(f"the server sent no data for {r.name} at byte {have} of {r.size}")
    if have != r.size:
        partial.unlink()
        raise HubError(f"{r.name}: got {have} bytes, expected {r.size}; the partial file was removed, retry")
    want = r.sha256 or (r.etag if re.fullmatch(r"[0-9a-f]{64}", r.etag) else "")  # LFS: ETag = SHA-256
    if want:
        h = hashlib.sha256()
        with open(partial, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        if h.hexdigest() != want:
            partial.unlink()
            raise HubError(f"{r.name} is corrupt (SHA-256 mismatch); the partial file was removed, retry")
    os.replace(partial, blob)
    meter.add(0, r.name, force=True)


# -- public entry points ------------------------------------------------------------------

def download(repo_id: str, *, revision: str | None = None, filename: str | None = None,
             quant: str | None = None, allow_pickle: bool = False, allow_remote_code: bool = False,
             progress: ProgressFn | None = None, cancel: threading.Event | None = None,
             cache_dir: str | os.PathLike[str] | None = None, token: str | bool | None = None,
             files: Sequence[str] | None = None) -> Path:
    """Make a Hub model available locally and return its path.

    A transformers repo returns the snapshot folder. With ``filename`` or
    ``quant`` (a GGUF repo) only that file (or its shards) is fetched and its
    path returned. With ``files``, exactly those files are fetched (a speech
    model's: engine/voice/models.py) and the snapshot folder returned.
    Progress reports ``(done, total, filename)`` in bytes over the whole
    download; ``cancel`` stops it between chunks (DownloadCancelled) and the
    next call resumes from the bytes already on disk.
    """
    cache = Path(cache_dir) if cache_dir else hub_cache_dir()
    gguf = bool(filename or quant)
    if offline_mode():
        return _from_cache(repo_id, revision, cache, gguf, filename, quant, allow_pickle,
                           why="offline mode is on (HF_HUB_OFFLINE)", files=files)
    try:
        remotes, commit = _resolve_remote(repo_id, revision, filename, quant, allow_pickle,
                                          allow_remote_code, token, files)
    except _network_errors() as e:
        return _from_cache(repo_id, revision, cache, gguf, filename, quant, allow_pickle,
                           why=f"cannot reach {hub_endpoint()} ({type(e).__name__})", files=files)
    return _download_files(repo_id, revision, commit, remotes, cache, progress, cancel, token, gguf)


def _resolve_remote(repo_id, revision, filename, quant, allow_pickle, allow_remote_code, token, files=None):
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    endpoint = hub_endpoint()
    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, token=token, files_metadata=True)
        names = [s.rfilename for s in (info.siblings or [])]
        listed = {s.rfilename: s.lfs.sha256 for s in (info.siblings or []) if s.lfs is not None and s.lfs.sha256}
        if files is not None:
            wanted = select_named_files(names, files, repo_id)
        elif filename or quant:
            wanted = select_gguf_files(names, filename=filename, quant=quant, repo_id=repo_id)
            if not any(n in wanted for n in names if "mmproj" in n.lower()):
                wanted += projector_files(names, wanted)  # a vision model's eyes come with it
        else:
            wanted = select_model_files(names, allow_pickle=allow_pickle,
                                        allow_remote_code=allow_remote_code, repo_id=repo_id)
        commit = info.sha or revision or "main"
        remotes = []
        for name in wanted:
            url = hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint)
            meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
            if not meta.etag or meta.size is None:
                raise HubError(f"the Hub sent no ETag/size for {name}; cannot cache it safely")
            remotes.append(_Remote(name, meta.location or url, meta.etag, meta.size, listed.get(name, "")))
            commit = meta.commit_hash or commit
        return remotes, commit
    except GatedRepoError:
        raise HubError(f"{repo_id} is gated: accept its terms on the Hugging Face website, then log in "
                       "(`hf auth login`) and retry") from None
    except RepositoryNotFoundError:
        raise HubError(f"no model {repo_id!r} on the Hugging Face Hub (or it is private: log in with "
                       "`hf auth login`)") from None
    except RevisionNotFoundError:
        raise HubError(f"{repo_id} has no revision {revision!r}") from None
    except EntryNotFoundError as e:
        raise HubError(f"{repo_id}: a listed file is missing on the Hub ({e})") from None


def _download_files(repo_id, revision, commit, remotes, cache, progress, cancel, token, gguf) -> Path:
    from filelock import FileLock
    from huggingface_hub.utils import build_hf_headers

    repo = _repo_dir(cache, repo_id)
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    locks = cache / ".locks" / repo.name
    locks.mkdir(parents=True, exist_ok=True)
    headers = build_hf_headers(token=token)
    todo = [r for r in remotes if not (snap / r.name).exists()]
    meter = _Meter(sum(r.size for r in todo), progress, cancel)
    for r in todo:
        blob = blobs / r.etag
        # Same lock file hf_hub_download uses, so two tools never write one blob at once.
        with FileLock(str(locks / f"{r.etag}.lock")):
            if blob.exists() and blob.stat().st_size == r.size:
                meter.add(r.size, r.name, force=True)
            else:
                _fetch_blob(r, blob, meter, headers)
        _link_into_snapshot(blob, snap / r.name)
    if revision is None or not _is_commit(revision):
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / (revision or "main")).write_text(commit)
    if progress:
        progress(meter.done, meter.total, "")  # always one final call: the download is complete
    return snap / remotes[0].name if gguf else snap


def _from_cache(repo_id, revision, cache, gguf, filename, quant, allow_pickle, *, why: str, files=None) -> Path:
    snap = cached_snapshot(repo_id, revision, cache=cache)
    missing = f"{why}, and {repo_id} is not in the Hugging Face cache ({cache}); connect once to download it"
    if snap is None:
        raise HubError(missing)
    names = [p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()]
    try:
        if files is not None:
            chosen = select_named_files(names, files, repo_id)
        elif gguf:
            chosen = select_gguf_files(names, filename=filename, quant=quant, repo_id=repo_id)
        else:
            chosen = select_model_files(names, allow_pickle=allow_pickle, repo_id=repo_id)
            _check_complete(snap, names)
    except HubError as e:
        raise HubError(f"{missing} ({e})") from None
    log.info("%s; using the cached %s", why, snap)
    return snap / chosen[0] if gguf and files is None else snap


def _check_complete(snap: Path, names: list[str]) -> None:
    """A cached snapshot with an interrupted download lacks shards; say so rather than fail in torch."""
    import json

    if "config.json" not in names:
        raise HubError("the cached copy has no config.json")
    for index in (n for n in names if n.endswith(".index.json")):
        shards = set(json.loads((snap / index).read_text()).get("weight_map", {}).values())
        lacking = sorted(shards - set(names))
        if lacking:
            raise HubError(f"the cached copy is incomplete: {lacking[0]} is missing")


def discard_partial(repo_id: str, etags: list[str], *, cache: Path | None = None) -> int:
    """Delete the partial files (``blobs/<etag>.incomplete``) a cancelled download left;
    return how many bytes that freed. A paused download keeps them, to resume."""
    blobs = _repo_dir(cache or hub_cache_dir(), repo_id) / "blobs"
    freed = 0
    for tag in etags:
        p = blobs / f"{tag}.incomplete"
        if p.is_file():
            freed += p.stat().st_size
            p.unlink()
    return freed


def fetch_ref(ref, *, allow_pickle: bool = False, allow_remote_code: bool = False,
              progress: ProgressFn | None = None, cancel: threading.Event | None = None):
    """A ``hub`` ModelRef made local: a ``gguf`` ref for a GGUF pick, else an ``hf_dir`` ref."""
    spec = ref.label
    repo, filename, quant = parse_hub_id(spec)
    path = download(repo, filename=filename, quant=quant, allow_pickle=allow_pickle,
                    allow_remote_code=allow_remote_code, progress=progress, cancel=cancel)
    return ModelRef("gguf" if path.is_file() else "hf_dir", path, spec)


def cached_model(spec: str, *, cache: Path | None = None) -> Path | None:
    """The file or folder a Hub id names, if the cache holds it whole; None otherwise. Never touches
    the network (the window asks it for a model's own settings before any download)."""
    repo, filename, quant = parse_hub_id(spec)
    try:
        return _from_cache(repo, None, cache or hub_cache_dir(), bool(filename or quant), filename, quant, False,
                           why="looked up in the cache")
    except HearthError:
        return None
