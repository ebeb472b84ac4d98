"""Images on a real Vulkan device (Mesa's lavapipe in CI): the test VLM with every layer and its
projector there (libmtmd's use_gpu) replies as it does on the CPU's plan, a repeated question reads
the image from the prefix cache without encoding it again and gives the same tokens, and the logits
after a restored snapshot equal those computed in the same batches without it; and the same for a
Qwen2-VL, whose images take 2-D positions (M-RoPE). The device runs in a
worker subprocess (this file as a script), as in test_device_vulkan.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine.config import EngineConfig

HERE = Path(__file__).resolve()
pytestmark = pytest.mark.timeout(1800)
DEVICE_ENV = {"GGML_VK_VISIBLE_DEVICES": "0"}
CTX = 512


def _twice(model: str, mmproj: str, data: bytes) -> list[dict]:
    """The same question about an image twice on a fresh engine with every layer on the device."""
    from engine import Engine, SamplingParams
    from engine.inputs.images import probe_image
    from engine.prompt.messages import ImagePart, Message, TextPart

    img = probe_image(data)
    msgs = [Message.of("user", ImagePart(img.sha256, img.mime, data), TextPart("What is it?"))]
    e = Engine.open(EngineConfig(model, n_ctx=CTX, n_threads=2, n_gpu_layers=999, mmproj=mmproj))
    try:
        runs = []
        for _ in range(2):
            ev = [x for x in e.stream(msgs, SamplingParams(temperature=0.0, max_tokens=4))][-1]
            runs.append({"tokens": ev.token_ids, "cached": ev.stats.cached_tokens, "prompt": ev.stats.prompt_tokens,
                         "encodes": e.backend._projector.encodes, "device": e.backend.describe().device})
        return runs
    finally:
        e.close()


def worker(model: str, mmproj: str, qwen: str, qwen_mmproj: str) -> dict:
    import numpy as np

    from engine import Engine, SamplingParams
    from engine.backends.llama import devices
    from engine.inputs.images import decode, probe_image
    from engine.prompt.messages import ImagePart, Message, TextPart
    from test_images import png

    out: dict = {"devices": [repr(d) for d in devices.list_devices()]}
    if not devices.gpu_devices():
        return out
    e = Engine.open(EngineConfig(model, n_ctx=CTX, n_threads=2, n_gpu_layers=999, mmproj=mmproj))
    try:
        out["device"] = e.backend.describe().device
        data = png(50, size=(200, 130))
        img = probe_image(data)
        msgs = [Message.of("user", ImagePart(img.sha256, img.mime, data), TextPart("What is it?"))]
        proj = e.backend._projector
        runs = []
        for _ in range(2):
            ev = [x for x in e.stream(msgs, SamplingParams(temperature=0.0, max_tokens=4))][-1]
            runs.append({"tokens": ev.token_ids, "cached": ev.stats.cached_tokens,
                         "prompt": ev.stats.prompt_tokens, "encodes": proj.encodes})
        out["runs"] = runs
        b = e.backend
        toks = b.tokenize_images(["<|im_start|>user\n", decode(data), "Hi<|im_end|>\n"], add_bos=False)
        cut = next(i for i, t in enumerate(toks) if t < 0) + 20 if len(toks) > 30 else len(toks) - 2
        b.truncate(0)
        b.forward(toks[:cut])
        snap = b.snapshot()
        direct = b.forward(toks[cut:]).copy()
        b.truncate(0)
        b.restore(snap)
        restored = b.forward(toks[cut:]).copy()
        out["restored_equal"] = bool(np.array_equal(direct, restored))
        out["image_positions"] = sum(t < 0 for t in toks)
    finally:
        e.close()
    out["mrope_runs"] = _twice(qwen, qwen_mmproj, png(51, size=(150, 100)))  # Qwen2-VL's 2-D positions
    return out


@pytest.fixture(scope="module")
def dev(tiny_vlm, tiny_qwen2vl) -> dict:
    env = dict(os.environ, **DEVICE_ENV, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE.parents[1])]))
    proc = subprocess.run([sys.executable, str(HERE), *map(str, (*tiny_vlm, *tiny_qwen2vl))], capture_output=True,
                          text=True, env=env, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "device" not in out:
        msg = f"no GPU device for the device tests (ggml sees {out['devices']})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + "; CI must run the device path")
        pytest.skip(msg)
    return out


def test_an_image_on_the_device_is_read_once_and_the_cached_reply_is_the_same(dev):
    first, second = dev["runs"]
    assert dev["device"] != "CPU" and first["tokens"]
    assert second["tokens"] == first["tokens"]
    assert second["cached"] == second["prompt"] - 1  # all but the last token, the image included
    assert second["encodes"] == first["encodes"] > 0  # not encoded again


def test_an_m_rope_model_on_the_device_reads_the_image_once_and_replies_the_same(dev):
    first, second = dev["mrope_runs"]
    assert first["device"] != "CPU" and second["tokens"] == first["tokens"]
    assert second["cached"] >= second["prompt"] - 1 and second["encodes"] == first["encodes"] > 0


def test_logits_after_a_restored_snapshot_through_an_image_are_bit_identical_on_the_device(dev):
    assert dev["image_positions"] >= 4 and dev["restored_equal"]


if __name__ == "__main__":
    print(json.dumps(worker(*sys.argv[1:5])))
