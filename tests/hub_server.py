"""A local Hugging Face Hub for tests: the routes huggingface_hub really calls, on 127.0.0.1.

- ``GET /api/models?search=&filter=&sort=&limit=`` (HfApi.list_models)
- ``GET /api/models/<repo>[/revision/<rev>]`` (model_info; ``blobs=1`` adds sizes and LFS sha256)
- ``GET /api/models/<repo>/tree/<rev>`` (list_repo_tree)
- ``HEAD``/``GET /<repo>/resolve/<rev>/<file>`` with ``Range`` (``a-`` and ``a-b``), ``ETag``,
  ``X-Repo-Commit``, ``Content-Length``, ``X-Linked-Etag`` and ``X-Linked-Size``

Point huggingface_hub at it with ``HF_ENDPOINT`` (read at call time by Hearth, which passes the
endpoint to HfApi). A file is bytes, or a :class:`Sparse` one (a real GGUF header, then zeros up
to its full size) so a "7B" repository costs a few MB. Faults: ``drop_after`` (send part of a body,
then drop the connection, once), ``throttle`` (seconds per 4 KiB), ``lie_sha`` (list a wrong LFS
sha256 for a file), ``down`` (refuse every request with a closed connection).
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Sparse:
    """A file that is ``head`` followed by zeros up to ``size`` bytes."""

    head: bytes
    size: int

    def __len__(self) -> int:
        return self.size

    def slice(self, a: int, b: int) -> bytes:
        b = min(b, self.size)
        part = self.head[a:b]
        return part + b"\0" * max(0, b - max(a, len(self.head)))


def _slice(data, a: int, b: int) -> bytes:
    return data.slice(a, b) if isinstance(data, Sparse) else data[a:b]


class HubServer:
    """Serves ``repos`` = {repo_id: {filename: bytes | Sparse}}; ``cards`` = {repo_id: {tags, downloads, ...}}."""

    def __init__(self, repos: dict, cards: dict | None = None) -> None:
        self.repos = repos
        self.cards = cards or {}
        self.log: list[tuple[str, str, str | None]] = []   # (method, path, Range header)
        self.drop_after: dict[str, int] = {}
        self.throttle = 0.0
        self.lie_sha: set[str] = set()
        self.down = False
        self._etags: dict[tuple[str, str], tuple[str, bool]] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._serve(self, head=True)

            def do_GET(self):
                hub._serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- what a file looks like -------------------------------------------------------

    def etag(self, repo: str, name: str) -> tuple[str, bool]:
        """(ETag, is LFS): LFS files carry their content's sha256, small files a git blob id."""
        key = (repo, name)
        if key not in self._etags:
            data = self.repos[repo][name]
            if isinstance(data, Sparse):  # hashing gigabytes of zeros would only slow tests down
                self._etags[key] = (hashlib.sha256(data.head + str(data.size).encode()).hexdigest(), True)
            elif len(data) > 1000 or name.endswith((".safetensors", ".gguf", ".bin")):
                self._etags[key] = (hashlib.sha256(data).hexdigest(), True)
            else:
                self._etags[key] = (hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), False)
        return self._etags[key]

    def _entry(self, repo: str, name: str, tree: bool) -> dict:
        data = self.repos[repo][name]
        tag, lfs = self.etag(repo, name)
        sha = "f" * 64 if name in self.lie_sha else tag
        if tree:
            e = {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(name.encode()).hexdigest()}
            if lfs:
                e["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 130}
            return e
        s = {"rfilename": name, "size": len(data), "blobId": hashlib.sha1(name.encode()).hexdigest()}
        if lfs:
            s["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 130}
        return s

    def _card(self, repo: str) -> dict:
        c = self.cards.get(repo, {})
        return {"id": repo, "modelId": repo, "sha": COMMIT, "downloads": c.get("downloads", 0),
                "likes": c.get("likes", 0), "tags": c.get("tags", []), "library_name": c.get("library_name"),
                "private": False, "gated": False}

    # -- HTTP ---------------------------------------------------------------------------

    def _send(self, h, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h, obj) -> None:
        self._send(h, 200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _serve(self, h, head: bool) -> None:
        url = urlparse(h.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.log.append(("HEAD" if head else "GET", path, h.headers.get("Range")))
        if self.down:
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if path == "/api/models":
            return self._search(h, query)
        if path.startswith("/api/models/"):
            parts = path[len("/api/models/"):].split("/")
            repo = "/".join(parts[:2])
            if repo not in self.repos:
                return self._send(h, 404, b'{"error":"Repository not found"}',
                                  {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
            if len(parts) > 2 and parts[2] == "tree":
                return self._json(h, [self._entry(repo, n, True) for n in self.repos[repo]])
            info = self._card(repo)
            info["siblings"] = [self._entry(repo, n, False) if "blobs" in query else {"rfilename": n}
                                for n in self.repos[repo]]
            return self._json(h, info)
        parts = path.strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._send(h, 404, b"not found")
        self._resolve(h, "/".join(parts[:2]), "/".join(parts[4:]), head)

    def _search(self, h, query: dict) -> None:
        words = (query.get("search") or [""])[0].lower()
        filters = query.get("filter") or []
        hits = []
        for repo in self.repos:
            card = self._card(repo)
            tags = set(card["tags"]) | ({card["library_name"]} if card["library_name"] else set())
            if words in repo.lower() and all(f in tags for f in filters):
                hits.append(card)
        if (query.get("sort") or [""])[0] == "downloads":
            hits.sort(key=lambda c: -c["downloads"])
        limit = int((query.get("limit") or ["1000"])[0])
        self._json(h, hits[:limit])

    def _resolve(self, h, repo: str, name: str, head: bool) -> None:
        data = self.repos.get(repo, {}).get(name)
        if data is None:
            return self._send(h, 404, b"entry not found", {"X-Error-Code": "EntryNotFound"})
        size = len(data)
        tag, lfs = self.etag(repo, name)
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{tag}"', "Accept-Ranges": "bytes"}
        if lfs:
            headers.update({"X-Linked-Etag": f'"{tag}"', "X-Linked-Size": str(size)})
        if head:
            h.send_response(200)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(size))
            h.end_headers()
            return
        start, end, code = 0, size, 200
        rng = h.headers.get("Range")
        if rng:
            a, _, b = rng.split("=", 1)[1].partition("-")
            start, end, code = int(a), (int(b) + 1 if b else size), 206
            end = min(end, size)
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(end - start))
        h.end_headers()
        cut = self.drop_after.pop(name, None)
        if cut is not None:  # part of the body, then the connection drops
            h.wfile.write(_slice(data, start, start + cut))
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        step = 4096 if self.throttle else 1 << 20
        for i in range(start, end, step):
            try:
                h.wfile.write(_slice(data, i, min(i + step, end)))
                if self.throttle:
                    h.wfile.flush()
                    threading.Event().wait(self.throttle)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped: a cancel
                return

    def gets(self, name: str) -> list[str | None]:
        """Range headers of the GET requests for one file."""
        return [r for m, p, r in self.log if m == "GET" and p.endswith("/" + name)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
