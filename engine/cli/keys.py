"""``python -m engine keys new NAME | list | revoke ID | set ID --priority CLASS``: the API keys other
devices use with ``serve --listen``, kept as hashes in the data folder (engine/serve/http/keys.py)."""
from __future__ import annotations

import argparse
import sys

from ..errors import HearthError


def add_keys_parser(sub) -> None:
    """``keys`` and its options."""
    p = sub.add_parser("keys", help="API keys other devices use with `serve --listen`: new NAME, list, revoke ID, "
                                    "set ID --priority CLASS")
    p.add_argument("action", choices=["new", "list", "revoke", "set"])
    p.add_argument("name", nargs="?", default=None, help="new: what the key is for; revoke, set: its id")
    p.add_argument("--priority", choices=["interactive", "background"], default=None,
                   help="new, set: the class of the key's requests that name no priority of their own "
                        "(new: interactive unless given)")
    p.set_defaults(func=cmd_keys)


def cmd_keys(a: argparse.Namespace) -> int:
    import time

    from ..paths import data_dir
    from ..serve.http.other_devices import key_ring

    ring = key_ring(data_dir())
    if a.priority is not None and a.action not in ("new", "set"):
        raise HearthError(f"--priority goes with `keys new` or `keys set`, not `keys {a.action}`")
    if a.action == "new":
        entry, key = ring.create(a.name or "key", a.priority or "interactive")
        print(key)
        print(f"key {entry.id} ({entry.name}, {entry.priority}) made; it is shown this once and stored only as a "
              "hash. Give it to the device that will use this server.", file=sys.stderr)
    elif a.action in ("revoke", "set"):
        if not a.name:
            raise HearthError(f"{a.action} needs a key's id: `python -m engine keys list` shows them")
        if a.action == "revoke":
            entry = ring.revoke(a.name)
            print(f"revoked {entry.id} ({entry.name})", file=sys.stderr)
        else:
            if a.priority is None:
                raise HearthError("set needs what to set: --priority interactive or --priority background")
            entry = ring.set_priority(a.name, a.priority)
            print(f"key {entry.id} ({entry.name}): its requests are {entry.priority} unless they say otherwise",
                  file=sys.stderr)
    else:
        for e in ring.entries():
            print(f"{e.id}  {time.strftime('%Y-%m-%d', time.localtime(e.created))}  {e.priority:<11}  {e.name}")
    return 0
