"""The local server's settings rules (Qt-free; app/core/settings.py calls them)."""
from __future__ import annotations

import ipaddress
import re
from typing import Any

PORT = 8765  # not LM Studio's 1234, Ollama's 11434, Jan's 1337, GPT4All's 4891 or llama-server's 8080
MAX_QUEUE_WAIT = 120  # seconds, as `engine serve --max-queue-wait` (engine/serve/http/server.py)
MAX_QUEUE_WAIT_LIMIT = 3600
_KEY = re.compile(r"[\w\-.~+/=]*")           # what secrets.token_urlsafe writes, and base64 keys
_ORIGIN = re.compile(r"https?://[\w\-.\[\]:]+")  # scheme://host[:port], as browsers send it


def problem(enabled: Any, port: Any, key: Any, cors: Any, listen: Any = "",
            max_wait: Any = MAX_QUEUE_WAIT) -> str | None:
    """The first invalid server setting as "field: rule", or None when all are valid."""
    if not isinstance(enabled, bool):
        return f"server_enabled: must be true or false, got {enabled!r}"
    if not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535:
        return f"server_port: must be a whole number from 1024 to 65535, got {port!r}"
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return "server_api_key: only letters, digits and - _ . ~ + / = may be used"
    if not isinstance(cors, list) or not all(isinstance(o, str) and _ORIGIN.fullmatch(o) for o in cors):
        return "server_cors: each entry must be a web origin such as http://localhost:3000"
    if not isinstance(listen, str):
        return f"server_listen: must be an address or empty, got {listen!r}"
    if listen:
        try:
            ipaddress.ip_address(listen)
        except ValueError:
            return f"server_listen: {listen!r} is not an IP address (0.0.0.0 means every network of this machine)"
    if not isinstance(max_wait, int) or isinstance(max_wait, bool) or not 0 <= max_wait <= MAX_QUEUE_WAIT_LIMIT:
        return (f"server_max_queue_wait: must be a whole number of seconds from 0 (no limit) to "
                f"{MAX_QUEUE_WAIT_LIMIT}, got {max_wait!r}")
    return None
