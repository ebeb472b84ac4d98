"""Hearth's data folder, shared by the window and the command line.

``HEARTH_DATA_DIR`` when set (tests, portable installs), else the platform's
user data folder for "Hearth" (and its config folder for settings). The disk prefix store, the memory-plan log, the
GPU-crash marker and saved benchmark runs live there, so ``engine serve`` and
the window reuse each other's cached prompts.
"""
from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "Hearth"
ENV_DATA_DIR = "HEARTH_DATA_DIR"


def app_dir(platform_dir) -> Path:
    """HEARTH_DATA_DIR when set, else ``platform_dir(APP_NAME)`` (a platformdirs function); created."""
    override = os.environ.get(ENV_DATA_DIR)
    d = Path(override).expanduser() if override else Path(platform_dir(APP_NAME, appauthor=False))
    d.mkdir(parents=True, exist_ok=True)
    return d


def data_dir() -> Path:
    """The data folder (created if missing)."""
    from platformdirs import user_data_dir

    return app_dir(user_data_dir)


def config_dir() -> Path:
    """The settings folder (created if missing): the window's settings.json and each model's own settings,
    which ``engine models defaults`` edits too."""
    from platformdirs import user_config_dir

    return app_dir(user_config_dir)
