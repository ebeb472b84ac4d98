"""What the transformers backend may load, and from where: folder checks, GGUF files
converted once into a cached safetensors folder, and a source's content identity."""
from __future__ import annotations

import gc
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ...errors import ModelFileError, ModelLoadError, UnsupportedModelError
from ...models.hf_folder import PICKLE_SUFFIXES, needs_remote_code

log = logging.getLogger("hearth.hf")



def check_folder(path: Path, *, allow_pickle: bool = False, allow_remote_code: bool = False) -> bool:
    """Refuse what a model folder should not make Hearth do; return whether to use safetensors.

    Pickled weights (``.bin``/``.pt``) can run arbitrary code when loaded, and
    ``trust_remote_code`` runs the folder's own Python. Both need an explicit yes.
    """
    if not (path / "config.json").is_file():
        raise ModelFileError(f"{path} is not a transformers model folder (no config.json)")
    files = [p.name for p in path.iterdir() if p.is_file()]
    safe = any(n.endswith(".safetensors") for n in files)
    pickled = [n for n in files if n.endswith(PICKLE_SUFFIXES) and n != "training_args.bin"]
    if not safe:
        if not pickled:
            raise ModelFileError(f"{path} holds no model weights (*.safetensors)")
        if not allow_pickle:
            raise UnsupportedModelError(
                f"{path.name} has only pickled PyTorch weights ({pickled[0]}). Loading a pickle can run "
                "arbitrary code hidden in the file, so Hearth refuses it; convert the model to safetensors, "
                "or allow pickled weights for this model if you trust its source")
    config = json.loads((path / "config.json").read_text())
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if needs_remote_code(config, CONFIG_MAPPING) and not allow_remote_code:
        raise UnsupportedModelError(
            f"{path.name} needs its own Python code to run (model type {config.get('model_type')!r} is not "
            "built into transformers; trust_remote_code). That code would run with your permissions, so "
            "Hearth refuses it unless you allow remote code for this model")
    return safe


def hearth_cache() -> Path:
    """Where converted models live: $HEARTH_MODEL_DIR, else the user's cache folder."""
    env = os.environ.get("HEARTH_MODEL_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hearth")) / "models"


def gguf_as_folder(path: Path, *, cache: Path | None = None) -> Path:
    """The GGUF file dequantized (float32, exact) into a safetensors folder, converted once.

    transformers' own GGUF reader takes ~30 s even for the 135M bundled model
    (its metadata parser is pure Python); the converted folder loads in about
    a second. Keyed by the file's SHA-256, so an edited file is converted anew.
    float32 is 4 bytes a weight: this route suits small models and quality
    references; large GGUF files belong on the llama.cpp backend, and a file
    whose float32 copy cannot fit in RAM or on disk gets a clear error first.
    """
    import psutil

    from ...models.digest import file_sha256
    from ...models.gguf import read_gguf

    root = (cache or hearth_cache()) / "from-gguf"
    root.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(path, memo_dir=root)
    out = root / digest[:24]
    if (out / ".complete").is_file():
        return out
    n_weights = sum(int(np.prod(t.shape)) for t in read_gguf(path).tensors)
    need = 4 * n_weights
    gib = f"{need / 2**30:.1f} GiB"
    if need > psutil.virtual_memory().available * 0.9:
        raise ModelLoadError(f"{path.name} dequantized to float32 needs {gib} of RAM, more than is free; "
                             "run it on the llama.cpp backend instead")
    if shutil.disk_usage(root).free < need * 1.1 + (256 << 20):
        raise ModelLoadError(f"not enough disk space in {root} for {path.name} dequantized ({gib})")
    log.info("dequantizing %s through transformers (once, %s)", path.name, gib)
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise UnsupportedModelError(f"transformers cannot read {path.name}: {e}") from None
    tmp = root / f".{digest[:24]}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    # Dequantized, these are plain Linear layers; drop the GGUF marker so the
    # folder reads as an ordinary float32 checkpoint (and can take int8/int4).
    model.hf_quantizer = None  # type: ignore[assignment]  # nn.Module's setter types want a Tensor or Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / ".complete").write_text(json.dumps({"source": str(path), "sha256": digest}))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    del model
    gc.collect()
    return out


def source_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """A content identity for the prefix store: a GGUF file's SHA-256, or one over a
    folder's config and weight files (engine/models/digest.py)."""
    from ...models.digest import file_sha256, folder_sha256

    if path.is_file():
        return file_sha256(path, memo_dir=memo_dir)
    digest = folder_sha256(path, memo_dir)
    assert digest is not None  # memo_only is off: every file was hashed
    return digest
