"""Where Hearth keeps its files. Qt-free.

``HEARTH_DATA_DIR`` puts the database *and* the settings file in one folder;
tests and ``--self-test`` use it so they never touch the user's real history.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from engine.library.local import LIBRARY_FILE  # noqa: F401  (the model library's index, in the data folder)

ENV_DATA_DIR = "HEARTH_DATA_DIR"  # read by engine.paths


def data_dir() -> Path:
    """The folder for the conversation database (created if missing); the engine's data folder."""
    from engine.paths import data_dir as engine_data_dir

    return engine_data_dir()


def config_dir() -> Path:
    """The folder for settings.json (created if missing)."""
    from platformdirs import user_config_dir

    from engine.paths import app_dir

    return app_dir(user_config_dir)


def move_aside(path: Path, reason: str = "corrupt") -> Path:
    """Rename a damaged file to ``<name>.<reason>-<timestamp>`` and return the new path.

    Damaged files are kept, never deleted: the user may want to recover them.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{n}")
        n += 1
    os.replace(path, target)
    return target


def prefix_store_dir() -> Path:
    """The disk prefix store in the data folder: system-prompt KV snapshots that survive a restart."""
    from engine.loading.plan import prefix_store_dir as in_folder

    return in_folder(data_dir())


def plan_log_path() -> Path:
    """One JSON line per load in the data folder: the plan against what the backend allocated."""
    from engine.loading.load import PLAN_LOG

    return data_dir() / PLAN_LOG
