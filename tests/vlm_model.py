"""A small real vision model for the image tests: SmolLM2 with random eyes.

No vision model can be downloaded on these machines, so this builds one the way a
real SmolVLM is built: an Idefics3 model (SigLIP-style vision tower, pixel-shuffle
connector, Llama text model) whose **text model is the bundled SmolLM2-135M**
(its real weights and tokenizer, read from the bundled GGUF by transformers) and
whose vision tower and connector have seeded random weights. llama.cpp's own
``convert_hf_to_gguf.py`` (from the llama-cpp-python source package that set-up
builds, fetched with ``pip download``) then writes the model GGUF and, with
``--mmproj``, its projector. The result is cached by a key of everything above.

The replies are SmolLM2's own text; what the model "sees" is noise, which is
all the exactness and caching tests need.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

LLAMA_VERSION = "0.3.36"
IMAGE_SIZE = 64      # the vision tower's tile; mtmd splits larger images into tiles of this
LONGEST_EDGE = 128   # the preprocessor resizes the longest edge to this (so at most 2x2 tiles + a global)
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
          "patch_size": 16, "image_size": IMAGE_SIZE, "model_type": "idefics3_vision"}
SEED = 25
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>",
                *(f"<row_{r}_col_{c}>" for r in range(1, 3) for c in range(1, 3))]
_KEY = f"v1-{LLAMA_VERSION}-{json.dumps(VISION, sort_keys=True)}-{SEED}-{LONGEST_EDGE}"


def cache_dir() -> Path:
    root = Path(os.environ.get("HEARTH_FIXTURE_CACHE", Path.home() / ".cache" / "hearth" / "fixtures"))
    return root / f"tiny-vlm-{hashlib.sha256(_KEY.encode()).hexdigest()[:12]}"


def converter_source() -> Path:
    """llama.cpp's converter and gguf-py from the llama-cpp-python sdist, cached once."""
    dest = Path.home() / ".cache" / "hearth" / f"llama-convert-{LLAMA_VERSION}"
    if (dest / "convert_hf_to_gguf.py").is_file():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", tmp, f"llama-cpp-python=={LLAMA_VERSION}"], check=True)
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        prefix = f"llama_cpp_python-{LLAMA_VERSION}/vendor/llama.cpp/"
        with tarfile.open(sdist) as t:
            wanted = [m for m in t.getmembers() if m.name.startswith(prefix) and (
                m.name == prefix + "convert_hf_to_gguf.py" or m.name.startswith(prefix + "conversion/")
                or m.name.startswith(prefix + "gguf-py/"))]
            t.extractall(tmp, members=wanted, filter="data")
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(Path(tmp) / prefix, part)
        part.rename(dest)
    return dest


def _write_hf_model(bundled: Path, out: Path) -> None:
    import torch
    from transformers import (AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration,
                              Idefics3ImageProcessor, LlamaForCausalLM)

    tok = AutoTokenizer.from_pretrained(str(bundled.parent), gguf_file=bundled.name)
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    text = LlamaForCausalLM.from_pretrained(str(bundled.parent), gguf_file=bundled.name, torch_dtype=torch.float32)
    tcfg = text.config.to_dict()
    tcfg["vocab_size"] = len(tok)
    tcfg.pop("quantization_config", None)  # the weights are dequantized already
    tcfg["architectures"] = ["VLlama3ForCausalLM"]  # what a real SmolVLM names its text model; the converter reads it
    cfg = Idefics3Config(text_config=tcfg, vision_config=VISION, scale_factor=2,
                         image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=True)
    torch.manual_seed(SEED)
    model = Idefics3ForConditionalGeneration(cfg)
    emb = text.get_input_embeddings().weight.data
    with torch.no_grad():
        state = {k: v for k, v in text.model.state_dict().items() if k != "embed_tokens.weight"}
        missing, unexpected = model.model.text_model.load_state_dict(state, strict=False)
        assert missing == ["embed_tokens.weight"] and not unexpected, (missing, unexpected)
        new = model.model.text_model.embed_tokens.weight
        new[: emb.shape[0]] = emb
        new[emb.shape[0]:] = emb.mean(0)
        model.lm_head.weight = model.model.text_model.embed_tokens.weight
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    proc = Idefics3ImageProcessor(size={"longest_edge": LONGEST_EDGE},
                                  max_image_size={"longest_edge": IMAGE_SIZE})
    proc.save_pretrained(str(out))


def build(bundled: Path) -> tuple[Path, Path]:
    """(model GGUF, projector GGUF), built once and cached."""
    d = cache_dir()
    model, mmproj = d / "tiny-vlm-q8_0.gguf", d / "mmproj-tiny-vlm-f16.gguf"
    if model.is_file() and mmproj.is_file():
        return model, mmproj
    src = converter_source()
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        _write_hf_model(bundled, hf)
        part = d.with_name(d.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
        conv = [sys.executable, str(src / "convert_hf_to_gguf.py"), str(hf)]
        subprocess.run([*conv, "--outtype", "q8_0", "--outfile", str(part / model.name)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        subprocess.run([*conv, "--mmproj", "--outtype", "f16", "--outfile", str(part / mmproj.name)], check=True,
                       env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
        part.rename(d)
    return model, mmproj


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from engine.models.catalogue import bundled_model_path

    print(*build(bundled_model_path()), sep="\n")
