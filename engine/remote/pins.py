"""Certificates first seen, by address: trust on first use, as SSH's known_hosts.

A Hearth serving other devices makes its own certificate, which no authority
signs. The first connection to an address pins the certificate's SHA-256; a later
one with another certificate is refused (wire.CertificateChanged shows both), until
the user forgets the pin (removing the connection does).
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

from ..atomic import atomic_write
from .transport import Pins


class PinStore(Pins):
    """Pins in a JSON file (``{"host:port": "sha256 hex"}``), written atomically, readable by the user only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # a damaged file pins nothing; the next pin rewrites it whole
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, address: str) -> str | None:
        with self._lock:
            return self._read().get(address)

    def pin(self, address: str, fingerprint: str) -> None:
        with self._lock:
            pins = self._read()
            pins[address] = fingerprint
            self._write(pins)

    def forget(self, address: str) -> None:
        with self._lock:
            pins = self._read()
            if pins.pop(address, None) is not None:
                self._write(pins)

    def _write(self, pins: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(pins, indent=1, sort_keys=True))
        self.path.chmod(0o600)


class MemoryPins(Pins):
    """Pins for one process only (``engine chat --remote`` without a data folder, tests)."""

    def __init__(self) -> None:
        self.pins: dict[str, str] = {}

    def get(self, address: str) -> str | None:
        return self.pins.get(address)

    def pin(self, address: str, fingerprint: str) -> None:
        self.pins[address] = fingerprint
