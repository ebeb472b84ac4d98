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
all the exactness and caching tests need. ``build_mrope`` makes a tiny random Qwen2-VL the same
way, whose images take fewer positions than tokens (M-RoPE).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
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
QWEN_VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
_KEY = f"v1-{LLAMA_VERSION}-{json.dumps(VISION, sort_keys=True)}-{SEED}-{LONGEST_EDGE}"


def cache_dir(kind: str = "smolvlm") -> Path:
    root = Path(os.environ.get("HEARTH_FIXTURE_CACHE", Path.home() / ".cache" / "hearth" / "fixtures"))
    name = "tiny-vlm" if kind == "smolvlm" else f"tiny-{kind}"
    key = _KEY if kind == "smolvlm" else f"{_KEY}-{kind}"
    return root / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def converter_source() -> Path:
    """llama.cpp's converter and gguf-py from the llama-cpp-python sdist, cached once."""
    dest = Path.home() / ".cache" / "hearth" / f"llama-convert-{LLAMA_VERSION}"
    if (dest / "convert_hf_to_gguf.py").is_file():
        return dest
    from engine.bench.llama_tools import source

    with tempfile.TemporaryDirectory() as tmp:
        src = source(Path(tmp), lambda name: name == "convert_hf_to_gguf.py"
                     or name.startswith(("conversion/", "gguf-py/")))
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(src, part)
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


def _write_mrope_model(bundled: Path, out: Path) -> None:
    """A tiny Qwen2-VL (random weights, M-RoPE: an image takes fewer positions than tokens) that reads
    SmolLM2's tokenizer with Qwen-VL's vision tokens added."""
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    tok = AutoTokenizer.from_pretrained(str(bundled.parent), gguf_file=bundled.name)
    tok.add_special_tokens({"additional_special_tokens": QWEN_VL_TOKENS})
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_VL_TOKENS}
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_theta=10000.0, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                         tie_word_embeddings=True),
        # depth 3: the converter maps the merger's mlp.2 through the block numbers
        vision_config=dict(depth=3, embed_dim=32, num_heads=2, mlp_ratio=2, hidden_size=64, in_channels=3,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True)
    torch.manual_seed(SEED)
    Qwen2VLForConditionalGeneration(cfg).save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112).save_pretrained(str(out))


def _convert(write, bundled: Path, d: Path, model: Path, mmproj: Path, outtype: str) -> tuple[Path, Path]:
    if model.is_file() and mmproj.is_file():
        return model, mmproj
    src = converter_source()
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        write(bundled, hf)
        part = d.with_name(d.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
        conv = [sys.executable, str(src / "convert_hf_to_gguf.py"), str(hf)]
        subprocess.run([*conv, "--outtype", outtype, "--outfile", str(part / model.name)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        subprocess.run([*conv, "--mmproj", "--outtype", "f16", "--outfile", str(part / mmproj.name)], check=True,
                       env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
        part.rename(d)
    return model, mmproj


def build(bundled: Path) -> tuple[Path, Path]:
    """(model GGUF, projector GGUF) of SmolLM2 with random eyes, built once and cached."""
    d = cache_dir()
    return _convert(_write_hf_model, bundled, d, d / "tiny-vlm-q8_0.gguf", d / "mmproj-tiny-vlm-f16.gguf", "q8_0")


def build_mrope(bundled: Path) -> tuple[Path, Path]:
    """(model GGUF, projector GGUF) of a tiny random Qwen2-VL, built once and cached."""
    d = cache_dir("qwen2vl")
    return _convert(_write_mrope_model, bundled, d, d / "tiny-qwen2vl-f16.gguf", d / "mmproj-tiny-qwen2vl-f16.gguf",
                    "f16")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from engine.models.catalogue import bundled_model_path

    print(*build(bundled_model_path()), sep="\n")
