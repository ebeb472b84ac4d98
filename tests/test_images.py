"""Images through a real vision GGUF and its projector (tests/vlm_model.py): exactness, the
prefix cache keyed by the image's hash, Stop during an encode, and every bad input."""
from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from engine.errors import HearthError, ModelFileError, NoVisionError
from engine.inputs.images import ImageError, decode, probe_image
from engine.prompt.messages import ImagePart, Message, TextPart
from engine.types import SamplingParams
from engine.config import EngineConfig

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def png(seed: int, size=(150, 100), fmt="PNG") -> bytes:
    from PIL import Image

    a = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, fmt)
    return buf.getvalue()


def image_part(data: bytes) -> ImagePart:
    img = probe_image(data)
    return ImagePart(img.sha256, img.mime, data)


def ask(*parts) -> list[Message]:
    return [Message.of("user", *parts)]


@pytest.fixture(scope="module")
def vlm(tiny_vlm):
    from engine.backends.llama.backend import LlamaCppBackend

    model, mmproj = tiny_vlm
    b = LlamaCppBackend(model, n_ctx=2048, n_threads=2, mmproj=mmproj)
    yield b
    b.close()


@pytest.fixture
def vengine(tiny_vlm):
    from engine.engine import Engine

    model, mmproj = tiny_vlm
    e = Engine.open(EngineConfig(model, n_ctx=2048, n_threads=2, mmproj=mmproj))
    yield e
    e.close()


def reply(engine, messages) -> tuple[str, object]:
    text, stats = "", None
    for ev in engine.stream(messages, GREEDY):
        text += ev.text
        stats = ev.stats or stats
    return text, stats


# -- the backend: logits are exact however the image is batched or cached ------------------------

def test_logits_after_an_image_do_not_depend_on_how_the_prompt_was_split(vlm):
    toks = vlm.tokenize_images(["<|im_start|>user\n", decode(png(1)), "What is in it?<|im_end|>\n"],
                               add_bos=False)
    assert sum(t < 0 for t in toks) >= 4 and vlm.sees_images
    vlm.truncate(0)
    whole = vlm.forward(toks).copy()
    for cut in (3, 7, 11, len(toks) - 2):
        vlm.truncate(0)
        vlm.forward(toks[:cut])
        assert np.array_equal(vlm.forward(toks[cut:]), whole), cut
    vlm.truncate(0)
    for t in toks[:-1]:
        vlm.forward([t])
    assert np.array_equal(vlm.forward(toks[-1:]), whole)
    snap = vlm.snapshot()
    vlm.truncate(0)
    vlm.restore(snap)
    vlm.truncate(len(toks) - 1)
    assert np.array_equal(vlm.forward(toks[-1:]), whole)


def test_two_images_are_read_in_their_order_and_each_by_its_hash(vlm):
    a, b = decode(png(2)), decode(png(3))
    ab = vlm.tokenize_images(["<|im_start|>user\n", a, b, "Compare.<|im_end|>\n"], add_bos=False)
    ba = vlm.tokenize_images(["<|im_start|>user\n", b, a, "Compare.<|im_end|>\n"], add_bos=False)
    assert ab != ba and sorted(ab) == sorted(ba)
    again = vlm.tokenize_images(["<|im_start|>user\n", a, b, "Compare.<|im_end|>\n"], add_bos=False)
    assert again == ab  # the same image at the same place is the same tokens: the cache's key
    vlm.truncate(0)
    first = vlm.forward(ab).copy()
    vlm.truncate(0)
    other = vlm.forward(ba).copy()
    assert not np.array_equal(first, other)
    vlm._projector.forget()  # uncached: encoded again from the pixels
    vlm.tokenize_images(["<|im_start|>user\n", a, b, "Compare.<|im_end|>\n"], add_bos=False)
    vlm.truncate(0)
    assert np.array_equal(vlm.forward(ab), first)


# -- the engine: a reply about an image, the second question reads it from the cache -----------------

def test_a_second_question_about_the_same_image_does_not_encode_it_again(vengine):
    img = image_part(png(4))
    first = ask(img, TextPart("Describe the picture."))
    text, stats = reply(vengine, first)
    proj = vengine.backend._projector
    assert text and proj.encodes > 0
    encodes = proj.encodes
    follow = first + [Message("assistant", text), Message("user", "And its colours?")]
    text2, stats2 = reply(vengine, follow)
    assert proj.encodes == encodes, "the image was encoded again"
    assert stats2.cached_tokens >= stats.prompt_tokens  # the whole first turn, image included
    # The same answer as a fresh engine that never saw the image (cached = uncached).
    vengine.reset()
    vengine.cache.clear()
    proj.forget()
    assert reply(vengine, follow)[0] == text2
    assert proj.encodes > encodes


def test_a_draft_model_cannot_see_images_so_the_reply_drafts_by_ngram_and_says_so(vengine, bundled_path):
    plain = reply(vengine, ask(image_part(png(5)), TextPart("Say hello.")))[0]
    vengine.set_speculation(str(bundled_path), force=True)  # SmolLM2 drafts for SmolLM2 with eyes
    try:
        text, stats = reply(vengine, ask(image_part(png(5)), TextPart("Say hello.")))
        assert text == plain
        assert "the draft model cannot see images: n-gram drafts only" in stats.spec["notes"]
        assert "model" not in stats.spec["tokens_by_mode"]
        text, stats = reply(vengine, [Message("user", "Say hello.")])  # no image: the draft model drafts
        assert stats.spec["tokens_by_mode"].get("model")
    finally:
        vengine.set_speculation("none")


def test_stop_during_an_image_encode_stops_it_and_keeps_the_kv_whole(vengine):
    proj = vengine.backend._projector
    big = image_part(png(6, size=(640, 480)))
    cancel = threading.Event()
    calls = []
    real = proj.embeddings

    def stop_then_encode(slot):
        calls.append(slot)
        cancel.set()  # Stop is pressed as the encode starts: the graph stops at its next node
        return real(slot)

    proj.embeddings = stop_then_encode
    try:
        events = list(vengine.stream(ask(big, TextPart("What is it?")), GREEDY, cancel=cancel))
    finally:
        del proj.embeddings
    assert calls and events[-1].stats.finish_reason in ("cancelled", "stop")
    assert vengine.backend.kv_len <= len(vengine.kv.kv_tokens()) + 1
    text, _ = reply(vengine, ask(big, TextPart("What is it?")))  # the next try works from a whole KV
    assert text


# -- bad input: one clear line each, nothing lost ----------------------------------------------

def test_a_text_only_model_says_it_cannot_see_images_before_anything_is_sent(engine):
    with pytest.raises(NoVisionError, match="cannot see images"):
        list(engine.stream(ask(image_part(png(7)), TextPart("hi")), GREEDY))


@pytest.mark.parametrize("data, match", [
    (png(8)[:200], "corrupt|truncated"),
    (b"GIF89a" + b"\0" * 40, "corrupt|not an image"),
    (b"%PDF-1.4 not an image", "not an image Hearth reads"),
    (b"", "empty"),
])
def test_bad_image_bytes_get_one_clear_line(data, match):
    with pytest.raises(ImageError, match=match):
        decode(data)


def test_a_huge_image_and_a_bomb_are_refused_from_the_header():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(buf, "PNG")  # a few KB on disk, 400 megapixels decoded
    assert len(buf.getvalue()) < 200_000
    with pytest.raises(ImageError, match="too large to decode safely.*400000000 pixels"):
        decode(buf.getvalue())
    buf = io.BytesIO()
    Image.new("L", (8000, 6000)).save(buf, "PNG")  # 48 MP of zeros: a decompression bomb's shape
    with pytest.raises(ImageError, match="megapixels"):
        probe_image(buf.getvalue())


def test_other_formats_are_refused_and_a_gif_reads_its_first_frame():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "BMP")
    with pytest.raises(ImageError, match="PNG, JPEG, WebP or GIF"):
        decode(buf.getvalue())
    frames = [Image.new("P", (8, 8), c) for c in (1, 2)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    assert decode(buf.getvalue()).mime == "image/gif"
    for fmt, mime in (("JPEG", "image/jpeg"), ("WEBP", "image/webp")):
        d = decode(png(9, fmt=fmt))
        assert d.mime == mime and len(d.rgb) == d.width * d.height * 3


def test_a_projector_for_another_model_is_refused_by_its_width(tiny_vlm, kquant_path, tmp_path):
    from engine.backends.llama.backend import LlamaCppBackend
    from engine.backends.llama.mtmd import projector_header

    model, mmproj = tiny_vlm
    header = projector_header(mmproj, 576)
    assert header["projector_type"] == "idefics3"
    with pytest.raises(ModelFileError, match="does not match this model"):
        projector_header(mmproj, 896)
    with pytest.raises(ModelFileError, match="not a vision projector"):
        LlamaCppBackend(kquant_path, n_ctx=256, mmproj=kquant_path)
    broken = tmp_path / "mmproj-broken.gguf"
    broken.write_bytes(mmproj.read_bytes()[:5000])
    with pytest.raises(ModelFileError):
        LlamaCppBackend(model, n_ctx=256, mmproj=broken)


def test_a_projector_given_as_the_model_says_what_it_is(tiny_vlm):
    from engine.engine import Engine

    with pytest.raises(ModelFileError, match="is a vision projector"):
        Engine.open(EngineConfig(tiny_vlm[1], n_ctx=256))


def test_auto_pairs_the_projector_beside_the_model_by_its_header(tiny_vlm, tmp_path):
    from engine.models.projector import find_projector, is_projector

    model, mmproj = tiny_vlm
    assert is_projector(mmproj) and not is_projector(model)
    (tmp_path / "model.gguf").symlink_to(model)
    (tmp_path / "vision.gguf").symlink_to(mmproj)  # no "mmproj" in its name
    assert find_projector(tmp_path / "model.gguf", 576) == tmp_path / "vision.gguf"
    assert find_projector(tmp_path / "model.gguf", 896) is None


def test_an_image_whose_bytes_changed_is_refused(vengine):
    a = png(10)
    part = ImagePart(probe_image(a).sha256, "image/png", png(11))
    with pytest.raises(HearthError, match="does not match"):
        list(vengine.stream(ask(part, TextPart("hi")), GREEDY))



def test_the_memory_plan_counts_the_projector_as_llama_cpp_allocates_it(vlm, tiny_vlm):
    from engine.models.projector import projector_memory
    from engine.sizing.plan import plan_for

    plan = plan_for(str(tiny_vlm[0]))
    weights, compute = projector_memory(tiny_vlm[1])
    assert plan.breakdown.ram.vision == weights + compute == plan.spec.vision_bytes
    real = vlm.memory_report()["vision"]
    assert abs(plan.breakdown.ram.vision - real) / real < 0.2  # within the plan's margin
    text_only = plan_for(None)  # the bundled model has no projector beside it
    assert text_only.breakdown.ram.vision == 0


def test_a_projector_for_another_width_or_for_sound_is_refused_before_libmtmd_reads_it(bundled_path, tmp_path):
    from engine.backends.llama.backend import LlamaCppBackend
    from engine.errors import UnsupportedModelError
    from gguf_writer import write_gguf

    meta = {"general.architecture": "clip", "clip.has_vision_encoder": True, "clip.vision.projection_dim": 896,
            "clip.projector_type": "gemma3"}
    other = write_gguf(tmp_path / "mmproj-qwen-f16.gguf", meta, [("mm.weight", (896, 4), 0)])
    with pytest.raises(ModelFileError, match="writes 896-wide embeddings and the model reads 576"):
        LlamaCppBackend(bundled_path, n_ctx=256, mmproj=other)
    sound = write_gguf(tmp_path / "mmproj-audio.gguf", {"general.architecture": "clip",
                                                         "clip.has_audio_encoder": True}, [("a.weight", (8,), 0)])
    with pytest.raises(UnsupportedModelError, match="no vision encoder"):
        LlamaCppBackend(bundled_path, n_ctx=256, mmproj=sound)


# -- M-RoPE (Qwen2-VL and later): an image takes fewer positions than tokens --------------------------

@pytest.fixture(scope="module")
def qvl(tiny_qwen2vl):
    from engine.backends.llama.backend import LlamaCppBackend

    b = LlamaCppBackend(tiny_qwen2vl[0], n_ctx=1024, n_threads=2, mmproj=tiny_qwen2vl[1])
    yield b
    b.close()


def _helper_logits(b, pieces) -> tuple[np.ndarray, int]:
    """llama.cpp's own mtmd_helper_eval_chunks on the same pieces: the reference for positions."""
    import ctypes

    import llama_cpp as lc
    import llama_cpp.mtmd_cpp as mt

    keep, parts = [], []
    for p in pieces:
        part = mt.mtmd_input_part()
        if isinstance(p, str):
            raw = p.encode()
            t = mt.mtmd_input_text()
            t.text, t.text_len, t.add_special, t.parse_special = raw, len(raw), False, True
            keep += [raw, t]
            part.text, part.bitmap = ctypes.pointer(t), None
        else:
            bm = mt.mtmd_bitmap_init(p.width, p.height, (ctypes.c_ubyte * len(p.rgb)).from_buffer_copy(p.rgb))
            keep.append(bm)
            part.text, part.bitmap = None, bm
        parts.append(part)
    arr = (ctypes.POINTER(mt.mtmd_input_part) * len(parts))(*[ctypes.pointer(x) for x in parts])
    chunks = mt.mtmd_input_chunks_init()
    assert mt.mtmd_tokenize_from_parts(b._projector._ctx, chunks, arr, len(parts), False) == 0
    b.truncate(0)
    new_pos = lc.llama_pos(0)
    assert mt.mtmd_helper_eval_chunks(b._projector._ctx, b._ctx, chunks, 0, 0, 512, True, ctypes.byref(new_pos)) == 0
    logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(b._ctx, -1), shape=(b.n_vocab,)).copy()
    mt.mtmd_input_chunks_free(chunks)
    for x in keep:
        if isinstance(x, int):
            mt.mtmd_bitmap_free(x)
    lc.llama_memory_seq_rm(b._mem, 0, -1, -1)
    b._n_past, b._shifts = 0, []
    return logits, new_pos.value


def test_m_rope_positions_equal_llama_cpps_own_helper_and_the_cache_counts_tokens(qvl):
    a, c = decode(png(60)), decode(png(61, size=(200, 90)))
    pieces = ["<|im_start|>user\n", a, "What is in it and", c, "in this?<|im_end|>\n"]
    toks = qvl.tokenize_images(pieces, add_bos=False)
    images = [i for i, t in enumerate(toks) if t < 0]
    qvl.truncate(0)
    ours = qvl.forward(toks).copy()
    assert qvl.kv_len == len(toks)  # the KV record counts tokens ...
    ref, n_pos = _helper_logits(qvl, pieces)
    assert n_pos < len(toks) - 20  # ... while the images took far fewer positions
    assert np.array_equal(ours, ref)
    for cut in (3, images[0], images[-1] + 1, len(toks) - 3):  # cut where the cache may: never inside an image
        qvl.truncate(0)
        qvl.forward(toks[:cut])
        assert np.array_equal(qvl.forward(toks[cut:]), ours), cut
    qvl.truncate(images[-1] + 1)  # back to just after the second image, then on again
    assert np.array_equal(qvl.forward(toks[images[-1] + 1:]), ours)
    snap = qvl.snapshot()
    qvl.truncate(0)
    qvl.restore(snap)
    qvl.truncate(len(toks) - 1)
    assert np.array_equal(qvl.forward(toks[-1:]), ours)
    with pytest.raises(HearthError, match="split across two batches"):
        qvl.truncate(0)
        qvl.forward(toks[:images[0] + 3])


def test_an_m_rope_models_second_question_reads_the_image_from_the_cache(tiny_qwen2vl):
    from engine.engine import Engine

    e = Engine.open(EngineConfig(tiny_qwen2vl[0], n_ctx=1024, n_threads=2, mmproj=tiny_qwen2vl[1]))
    try:
        first = ask(image_part(png(62)), TextPart("Describe it."))
        text, stats = reply(e, first)
        follow = first + [Message("assistant", text or "Noise."), Message("user", "And the colour?")]
        encodes = e.backend._projector.encodes
        text2, stats2 = reply(e, follow)
        assert stats2.cached_tokens >= stats.prompt_tokens - 1 and e.backend._projector.encodes == encodes
        e.reset()
        e.cache.clear()
        e.backend._projector.forget()
        assert reply(e, follow)[0] == text2  # cached = uncached
    finally:
        e.close()


def test_an_image_gone_from_the_data_folder_is_named_not_replaced(vengine):
    gone = probe_image(png(70))
    with pytest.raises(HearthError, match=f"the image {gone.sha256[:12]} is not in the data folder any more"):
        list(vengine.stream(ask(ImagePart(gone.sha256, gone.mime), TextPart("hi")), GREEDY))
