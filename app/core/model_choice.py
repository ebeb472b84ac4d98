"""Which model the settings name, and what can be checked about it before loading. Qt-free.

The settings keep a model as a string plus its *source*: the bundled GGUF, a
local GGUF file, a local transformers folder or a Hugging Face Hub id. This
module turns that into the engine's ModelRef, names it for the window, and
checks a transformers folder without importing torch, so the settings
dialog can refuse a folder the engine would refuse, with the same reason,
while the dialog is still open. The engine's own check at load time
(engine.backends.hf.check_folder) stays the authority.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from engine.errors import HearthError, ModelFileError, UnsupportedModelError

log = logging.getLogger("hearth.app")

BUNDLED = "bundled"
SOURCES = ("bundled", "gguf", "hf_dir", "hub")
BACKENDS = ("auto", "llama_cpp", "hf")
QUANTS = ("auto", "none", "int8", "int4")
HF_QUANTS = ("none", "int8", "int4")
KV_TYPES = ("auto", "f16", "q8_0", "q4_0")  # llama.cpp's KV cache types the window offers
# Same list as engine/backends/hf.py (kept here so checking a folder never imports torch).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_PLACEHOLDER = "owner/name, owner/name:Q4_K_M or owner/name/file.gguf"


def infer_source(model: str) -> str:
    """The source of a model string from a settings file that does not say (older files held
    only "bundled" or a GGUF path; a hand-edited one may hold a folder or a Hub id)."""
    from engine.models.catalogue import is_hub_id

    if model in ("", BUNDLED):
        return "bundled"
    p = Path(model).expanduser()
    if p.is_dir():
        return "hf_dir"
    if not p.exists() and is_hub_id(model):
        return "hub"
    return "gguf"


def hub_is_gguf(spec: str) -> bool:
    """A Hub id that picks one GGUF file (``owner/repo:Q4_K_M``, ``owner/repo/file.gguf``)."""
    from engine.models.catalogue import parse_hub_id

    _repo, filename, quant = parse_hub_id(spec)
    return bool(filename or quant)


def runs_gguf(source: str, model: str) -> bool:
    """True when the model is a GGUF file (llama.cpp by default), false for transformers checkpoints."""
    return source in ("bundled", "gguf") or (source == "hub" and hub_is_gguf(model))


def effective_backend(source: str, model: str, backend: str) -> str:
    """The backend a load will use: the chosen one, or the one the model's type calls for."""
    if backend != "auto":
        return backend
    return "llama_cpp" if runs_gguf(source, model) else "hf"


def model_title(key: dict[str, Any] | None) -> str:
    """How the window names a model set-up: a file or folder by its name, a Hub id in full."""
    key = key or {}
    model = key.get("model") or BUNDLED
    if model == BUNDLED:
        return "the bundled model"
    source = key.get("source") or infer_source(model)
    return model if source == "hub" else (Path(model).name or model)


def model_ref(key: dict[str, Any]):
    """The engine's ModelRef for a settings load key, honouring the chosen source:
    a missing local path is an error, never silently taken for a Hub id."""
    from engine.models.catalogue import ModelRef, resolve

    model = key.get("model") or BUNDLED
    source = key.get("source") or infer_source(model)
    if source == "bundled":
        return resolve(None)
    if source == "hub":
        from engine.models.catalogue import is_hub_id

        if not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id (owner/name, owner/name:QUANT or owner/name/file.gguf)")
        return ModelRef("hub", Path(model), model)
    p = Path(model).expanduser()
    if source == "hf_dir":
        check_hf_folder(p)
        return ModelRef("hf_dir", p.resolve(), p.name)
    if not p.is_file():
        if p.is_dir():
            raise ModelFileError(f"{p} is a folder; choose “Hugging Face folder” for a transformers model")
        raise ModelFileError(f"model file not found: {p}")
    return ModelRef("gguf", p.resolve(), p.name)


class ModelCheck:
    """What can be known about a model choice without loading it, with the reason the
    engine would give when it cannot load; a GGUF file's metadata is read once and kept."""

    def __init__(self) -> None:
        self._info: dict[str, Any] = {}

    def info(self, model: str):
        """GGUF metadata for ``model`` ("bundled" or a path); raises HearthError with a clear message."""
        from engine.models.catalogue import bundled_model_path
        from engine.models.gguf import model_info

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
        from engine.models.catalogue import is_hub_id

        if source in ("bundled", "gguf"):
            return self.info(model)
        if not model:
            raise HearthError("choose a model folder" if source == "hf_dir" else "type a Hub id")
        if source == "hf_dir":
            check_hf_folder(Path(model).expanduser())
        elif not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id; type {HUB_PLACEHOLDER}")
        return None


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


def needs_remote_code(config: dict) -> bool:
    """True when transformers cannot build the model without the folder's own code
    (the engine's rule: an ``auto_map`` and a model type transformers does not know)."""
    if not config.get("auto_map"):
        return False
    known = _known_model_types()
    if known is None:
        return False  # cannot tell here; the engine checks again when it loads
    return config.get("model_type") not in known


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
            mod = importlib.util.module_from_spec(importlib.util.spec_from_file_location(
                "_hearth_transformers_auto_mappings", table))
            mod.__spec__.loader.exec_module(mod)
            _KNOWN = frozenset(mod.CONFIG_MAPPING_NAMES)
        except Exception as e:  # any other layout: leave the decision to the engine
            log.info("cannot read transformers' model types (%s); the engine checks at load time", e)
            return None
    return _KNOWN

