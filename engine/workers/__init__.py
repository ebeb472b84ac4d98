"""Other machines' devices for one model: llama.cpp RPC workers, how Hearth reaches them, and the child
process a model that uses them runs in.

``machines`` reads what the user adds (``host:port``, or ``user@host`` reached over SSH) and opens a
link to it (``ssh`` starts the worker there and forwards its port); ``relay`` is the allow-list a worker
listening beyond loopback answers through; ``child`` runs a model that uses workers in a private
``engine serve`` the window talks to through the remote engine, so a lost worker, which aborts the
process llama.cpp's RPC client runs in, never takes the window with it.

This package is public: the app adds machines, checks them and opens a model on them through the
names below (docs/layout.md, "The engine's face"), each imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .child import open_split
    from .connect import open_machine
    from .machines import ROUND_TRIPS_PER_TOKEN, WORKER_COMMAND, WorkerMachine, is_address

_WHERE = {"open_split": ".child", "open_machine": ".connect",
          **dict.fromkeys(["ROUND_TRIPS_PER_TOKEN", "WORKER_COMMAND", "WorkerMachine", "is_address"], ".machines")}
__all__ = ["ROUND_TRIPS_PER_TOKEN", "WORKER_COMMAND", "WorkerMachine", "is_address", "open_machine", "open_split"]
__getattr__ = lazy_exports(__name__, _WHERE)
