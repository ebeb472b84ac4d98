"""What can be known about a model choice before it loads (ModelCheck): the settings dialog's check.

What the user chose is a LoadSpec (engine/sizing/load_spec.py, where the model-string helpers live too).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import HearthError
from ..models.hf_folder import check_hf_folder
from ..sizing.load_spec import BUNDLED, HUB_PLACEHOLDER, check_model_string


class ModelCheck:
    """What can be known about a model choice without loading it, with the reason the
    engine would give when it cannot load; a GGUF file's metadata is read once and kept."""

    def __init__(self) -> None:
        self._info: dict[str, Any] = {}

    def info(self, model: str):
        """GGUF metadata for ``model`` ("bundled" or a path); raises HearthError with a clear message."""
        from ..models.catalogue import bundled_model_path
        from ..models.gguf import model_info

        if model not in self._info:
            if not model:
                raise HearthError("choose a .gguf file")
            path = bundled_model_path() if model == BUNDLED else Path(model).expanduser()
            if not path.is_file():
                raise HearthError(f"model file not found: {path}")
            self._info[model] = model_info(path)
        return self._info[model]

    def check(self, source: str, model: str):
        """A GGUF file's metadata, or None for a folder or a Hub id that looks loadable;
        raises HearthError with the reason the engine would give."""
        from ..models.catalogue import is_hub_id

        if source in ("bundled", "gguf"):
            return self.info(model)
        if source == "remote":
            check_model_string(source, model)  # the server answers when it loads
            return None
        if not model:
            raise HearthError("choose a model folder" if source == "hf_dir" else "type a Hub id")
        if source == "hf_dir":
            check_hf_folder(Path(model).expanduser())
        elif not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id; type {HUB_PLACEHOLDER}")
        return None
