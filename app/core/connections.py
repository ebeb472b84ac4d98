"""The servers the window uses models on: their addresses, the models they listed, and their keys.

Connections live in the data folder (``remote/connections.json``); their keys do
not. A key goes to the system's keyring (the ``keyring`` package: Keychain,
Windows Credential Locker, Secret Service) where one works, else to
``remote/keys.json``, readable by the user only. Neither is part of a
conversation, so an export never carries one.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from engine import HearthError, atomic_write
from engine.loading import remote_model
from engine.remote import Endpoint

KEYRING_SERVICE = "Hearth remote servers"


@dataclass(frozen=True, slots=True)
class Connection:
    """One server: its URL (normalised, ``…/v1``), what the user calls it, and the models it listed
    when last asked (id, context or None)."""
    url: str
    name: str = ""
    models: tuple[tuple[str, int | None], ...] = ()
    checked: float = 0.0      # when the models were last listed
    has_key: bool = False

    @property
    def host(self) -> str:
        return Endpoint.parse(self.url).address

    @property
    def title(self) -> str:
        return self.name or self.host

    def model_strings(self) -> list[str]:
        """Each listed model as the settings name it (``url#id``)."""
        return [remote_model(self.url, mid) for mid, _ in self.models]


class KeyStore:
    """Keys by server URL: the OS keyring where it works, else a file only the user can read."""

    def __init__(self, folder: Path, *, use_keyring: bool = True) -> None:
        self.path = folder / "keys.json"
        self._keyring = _keyring() if use_keyring else None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return "the system keyring" if self._keyring is not None else str(self.path)

    def get(self, url: str) -> str | None:
        if self._keyring is not None:
            try:
                return self._keyring.get_password(KEYRING_SERVICE, url)
            except Exception:  # a locked or broken keyring: the file is the fallback
                pass
        return self._read().get(url)

    def set(self, url: str, key: str | None) -> None:
        if self._keyring is not None:
            try:
                if key:
                    self._keyring.set_password(KEYRING_SERVICE, url, key)
                else:
                    try:
                        self._keyring.delete_password(KEYRING_SERVICE, url)
                    except Exception:
                        pass
                return
            except Exception:
                pass
        with self._lock:
            keys = self._read()
            if key:
                keys[url] = key
            else:
                keys.pop(url, None)
            atomic_write(self.path, json.dumps(keys, indent=1))
            os.chmod(self.path, 0o600)

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _keyring() -> Any:
    """The keyring module when a real backend is there (not the "fail" or plaintext ones), else None."""
    try:
        import keyring
        from keyring.backends import fail

        kr = keyring.get_keyring()
    except Exception:
        return None
    name = type(kr).__module__ + "." + type(kr).__name__
    if isinstance(kr, fail.Keyring) or "plaintext" in name.lower() or "null" in name.lower():
        return None
    return keyring


class Connections:
    """The list of servers, in ``data_dir/remote/connections.json``; keys in a KeyStore beside it;
    certificate pins in ``remote/pins.json`` (engine.remote.connect.pins_for)."""

    def __init__(self, data_dir: Path, *, use_keyring: bool = True) -> None:
        self.data_dir = Path(data_dir)
        self.folder = self.data_dir / "remote"
        self.path = self.folder / "connections.json"
        self.keys = KeyStore(self.folder, use_keyring=use_keyring)
        self.notice = ""

    def all(self) -> list[Connection]:
        try:
            rows = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            self.notice = f"The list of servers ({self.path}) could not be read ({e}); add them again."
            return []
        out = []
        for r in rows if isinstance(rows, list) else []:
            try:
                out.append(Connection(r["url"], r.get("name", ""), tuple((m[0], m[1]) for m in r.get("models", ())),
                                      float(r.get("checked", 0)), bool(r.get("has_key", False))))
            except (KeyError, TypeError, IndexError, ValueError):
                continue  # one bad row does not lose the others
        return out

    def get(self, url: str) -> Connection | None:
        return next((c for c in self.all() if c.url == url), None)

    def save(self, conn: Connection, key: str | None = None) -> Connection:
        """Add or update ``conn`` (a new key replaces the stored one; None keeps it)."""
        url = Endpoint.parse(conn.url).url
        if key is not None:
            self.keys.set(url, key or None)
            conn = replace(conn, has_key=bool(key))
        conn = replace(conn, url=url)
        rows = [c for c in self.all() if c.url != url] + [conn]
        self._write(rows)
        return conn

    def remove(self, url: str) -> None:
        """Forget a server: its entry, its key and its certificate pin."""
        from engine.remote import PinStore, pins_for

        self._write([c for c in self.all() if c.url != url])
        self.keys.set(url, None)
        pins = pins_for(self.data_dir)
        if isinstance(pins, PinStore):
            pins.forget(Endpoint.parse(url).address)

    def key(self, url: str) -> str | None:
        return self.keys.get(url)

    def _write(self, rows: list[Connection]) -> None:
        def row(c: Connection) -> dict[str, Any]:
            d = asdict(c)
            d["models"] = [list(m) for m in c.models]
            return d
        atomic_write(self.path, json.dumps([row(c) for c in rows], indent=1))
        os.chmod(self.path, 0o600)


def listed(url: str, models: list[Any], name: str = "", has_key: bool = False) -> Connection:
    """A Connection from a fresh model list (engine.remote.client.RemoteModel values)."""
    if not models:
        raise HearthError(f"{url} lists no models")
    return Connection(url, name, tuple((m.id, m.n_ctx) for m in models), time.time(), has_key)

