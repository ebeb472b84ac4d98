"""Opening a remote model: a server URL, its key and a model id, as the window and ``engine chat`` give them.

The certificate pins live in the data folder (``remote/pins.json``), so a
Hearth on the network is trusted by the certificate it showed first, in the
window and the terminal alike.
"""
from __future__ import annotations

import threading
from pathlib import Path

from .client import Client, RemoteModel
from .engine import RemoteEngine
from .pins import MemoryPins, PinStore
from .transport import Endpoint, Pins


def pins_for(data_dir: Path | None) -> Pins:
    return MemoryPins() if data_dir is None else PinStore(Path(data_dir) / "remote" / "pins.json")


def client_for(url: str, key: str | None = None, *, data_dir: Path | None = None, pins: Pins | None = None) -> Client:
    return Client(Endpoint.parse(url), key=key or None, pins=pins if pins is not None else pins_for(data_dir))


def list_models(url: str, key: str | None = None, *, data_dir: Path | None = None,
                cancel: threading.Event | None = None) -> list[RemoteModel]:
    """What the server at ``url`` offers (raises RemoteError with the reason in one line)."""
    return client_for(url, key, data_dir=data_dir).models(cancel=cancel)


def open_remote(url: str, key: str | None = None, model: str | None = None, *, data_dir: Path | None = None,
                pins: Pins | None = None, cancel: threading.Event | None = None) -> RemoteEngine:
    """The remote engine for ``model`` (None: the server's first) on the server at ``url``."""
    return RemoteEngine.open(client_for(url, key, data_dir=data_dir, pins=pins), model, cancel=cancel)
