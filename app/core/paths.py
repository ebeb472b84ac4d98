"""Where Hearth keeps its files. Qt-free.

``HEARTH_DATA_DIR`` puts the database *and* the settings file in one folder;
tests and ``--self-test`` use it so they never touch the user's real history.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

APP_NAME = "Hearth"
ENV_DATA_DIR = "HEARTH_DATA_DIR"
LIBRARY_FILE = "library.json"   # the model library's index, in the data folder


def _app_dir(platform_dir) -> Path:
    """HEARTH_DATA_DIR when set (tests, portable installs), else the platform's folder."""
    override = os.environ.get(ENV_DATA_DIR)
    d = Path(override).expanduser() if override else Path(platform_dir(APP_NAME, appauthor=False))
    d.mkdir(parents=True, exist_ok=True)
    return d


def data_dir() -> Path:
    """The folder for the conversation database (created if missing)."""
    from platformdirs import user_data_dir

    return _app_dir(user_data_dir)


def config_dir() -> Path:
    """The folder for settings.json (created if missing)."""
    from platformdirs import user_config_dir

    return _app_dir(user_config_dir)


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
