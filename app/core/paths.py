"""Where Hearth keeps its files. Qt-free.

``HEARTH_DATA_DIR`` puts the database *and* the settings file in one folder;
tests and ``--self-test`` use it so they never touch the user's real history.
"""
from __future__ import annotations

from pathlib import Path

from engine import move_aside  # noqa: F401  (damaged files are kept: the app's callers import it here)
from engine.library import LIBRARY_FILE  # noqa: F401  (the model library's index, in the data folder)

ENV_DATA_DIR = "HEARTH_DATA_DIR"  # read by engine.paths


def data_dir() -> Path:
    """The folder for the conversation database (created if missing); the engine's data folder."""
    from engine import data_dir as engine_data_dir

    return engine_data_dir()


def config_dir() -> Path:
    """The folder for settings.json (created if missing): the engine's config folder."""
    from engine import config_dir as engine_config_dir

    return engine_config_dir()


def prefix_store_dir() -> Path:
    """The disk prefix store in the data folder: system-prompt KV snapshots that survive a restart."""
    from engine.loading import prefix_store_dir as in_folder

    return in_folder(data_dir())


def plan_log_path() -> Path:
    """One JSON line per load in the data folder: the plan against what the backend allocated."""
    from engine.loading import PLAN_LOG

    return data_dir() / PLAN_LOG
