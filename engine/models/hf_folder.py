"""Whether a transformers folder can (and may) be loaded, checked without importing torch.

The settings dialog refuses a folder the engine would refuse, with the same
reason, while the dialog is still open. The transformers backend's own check at
load time (engine.backends.hf.check_folder) stays the authority.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Container

from ..errors import ModelFileError, UnsupportedModelError

log = logging.getLogger("hearth.loading")

# Pickled weight files (the transformers backend's list too: checking a folder here never imports torch).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def check_hf_folder(path: Path) -> None:
    """Raise a HearthError with the engine's reason if the folder cannot (or must not) be loaded.

    Hearth loads only safetensors weights and built-in architectures: a
    pickle can run arbitrary code hidden in the file, and a model that needs
    its own Python code (``trust_remote_code``) would run it with the user's
    permissions.
    """
    if not path.is_dir():
        raise ModelFileError(f"model folder not found: {path}")
    if not (path / "config.json").is_file():
        raise ModelFileError(f"{path} is not a transformers model folder (no config.json)")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFileError(f"{path / 'config.json'} cannot be read ({e})") from None
    if not isinstance(config, dict):
        raise ModelFileError(f"{path / 'config.json'} does not hold a model configuration")
    files = [p.name for p in path.iterdir() if p.is_file()]
    if not any(n.endswith(".safetensors") for n in files):
        pickled = [n for n in files if n.endswith(PICKLE_SUFFIXES) and n != "training_args.bin"]
        if not pickled:
            raise ModelFileError(f"{path} holds no model weights (*.safetensors)")
        raise UnsupportedModelError(
            f"{path.name} has only pickled PyTorch weights ({sorted(pickled)[0]}). Loading a pickle can run "
            "arbitrary code hidden in the file, so Hearth refuses it; convert the model to safetensors")
    if needs_remote_code(config):
        raise UnsupportedModelError(
            f"{path.name} needs its own Python code to run (model type {config.get('model_type')!r} is not "
            "built into transformers; trust_remote_code). That code would run with your permissions, so "
            "Hearth refuses it")


def needs_remote_code(config: dict, known: Container[str] | None = None) -> bool:
    """True when transformers cannot build the model without the folder's own code
    (the engine's rule: an ``auto_map`` and a model type transformers does not know).

    ``known``: transformers' model types; the transformers backend passes its own table.
    By default they are read without importing transformers; where that cannot be
    done the answer is False, and the backend checks again when it loads."""
    if not config.get("auto_map"):
        return False
    types = known if known is not None else _known_model_types()
    if types is None:
        return False  # cannot tell here; the engine checks again when it loads
    return config.get("model_type") not in types


_KNOWN: frozenset[str] | None = None


def _known_model_types() -> frozenset[str] | None:
    """transformers' built-in model types, read from its generated table without importing
    transformers itself (that would pull in torch on the GUI thread)."""
    global _KNOWN
    if _KNOWN is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec("transformers")
            table = Path(spec.origin).parent / "models" / "auto" / "auto_mappings.py" if spec and spec.origin \
                else None
            if table is None or not table.is_file():
                return None
            found = importlib.util.spec_from_file_location("_hearth_transformers_auto_mappings", table)
            if found is None or found.loader is None:
                return None
            mod = importlib.util.module_from_spec(found)
            found.loader.exec_module(mod)
            _KNOWN = frozenset(mod.CONFIG_MAPPING_NAMES)
        except Exception as e:  # any other layout: leave the decision to the engine
            log.info("cannot read transformers' model types (%s); the engine checks at load time", e)
            return None
    return _KNOWN

