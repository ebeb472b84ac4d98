"""A conversation that opens with an image is a prefix like a system prompt: a new conversation
with the same image reads it from memory, and after a restart from the disk store, without an
encode, and the answers equal an engine's with no cache at all (the same for an M-RoPE model)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import HearthError
from engine.inputs.media import media_token, portable
from engine.prompt.messages import Message, TextPart
from test_images import image_part, png, reply

SYSTEM = Message("system", "You describe pictures for a blind reader, plainly and briefly.")


def chat(img, question: str) -> list[Message]:
    return [SYSTEM, Message.of("user", img, TextPart(question))]


def load(model, mmproj, store=None, *, cache: bool = True, n_ctx: int = 2048):
    from engine.engine import Engine
    from engine.config import EngineConfig
    from engine.kv.prefix_cache import DEFAULT_BUDGET

    return Engine.open(EngineConfig(model, n_ctx=n_ctx, n_threads=2, mmproj=mmproj, disk_cache=store,
                       cache_budget=DEFAULT_BUDGET if cache else 0))


def uncached(model, mmproj, messages) -> str:
    e = load(model, mmproj, cache=False)
    try:
        return reply(e, messages)[0]
    finally:
        e.close()


@pytest.mark.parametrize("which", ["tiny_vlm", "tiny_qwen2vl"])
def test_a_restart_reads_an_opening_image_from_the_disk_store_without_an_encode(which, request, tmp_path):
    model, mmproj = request.getfixturevalue(which)
    img = image_part(png(80))
    store = tmp_path / "kv"
    e = load(model, mmproj, store)
    try:
        reply(e, chat(img, "Describe it."))
        assert e.store is not None and len(list(store.glob("*.kv"))) == 2  # the system prompt; it with the image
        # A new conversation about the same picture: the pinned prefix, in memory, no encode.
        encodes = e.backend._projector.encodes
        text, stats = reply(e, chat(img, "What colour is it?"))
        assert e.backend._projector.encodes == encodes
        prefix = e.prompts.shared_image_tokens(chat(img, "x"))
        assert prefix is not None and any(t < 0 for t in prefix) and stats.cached_tokens >= len(prefix)
    finally:
        e.close()
    e = load(model, mmproj, store)  # a restart
    try:
        again, stats = reply(e, chat(img, "What colour is it?"))
        assert e.backend._projector.encodes == 0, "the image was encoded again after a restart"
        assert stats.cached_tokens >= len(prefix) and e.store.rejected == 0
        assert again == text
        # Another picture in the same place is not read from that entry: it is encoded.
        reply(e, chat(image_part(png(81)), "What colour is it?"))
        assert e.backend._projector.encodes > 0 and e.store.rejected == 0
    finally:
        e.close()
    assert again == uncached(model, mmproj, chat(img, "What colour is it?"))  # cached = uncached


def test_logits_after_an_image_restored_from_disk_equal_a_fresh_forward(tiny_qwen2vl, tmp_path):
    """M-RoPE: the image takes fewer positions than tokens; the shifts travel with the bytes."""
    from engine.backends.llama.backend import LlamaCppBackend
    from engine.inputs.images import decode

    model, mmproj = tiny_qwen2vl
    b = LlamaCppBackend(model, n_ctx=1024, n_threads=2, mmproj=mmproj)
    try:
        toks = b.tokenize_images(["<|im_start|>user\n", decode(png(82)), "Describe it.<|im_end|>\n"], add_bos=False)
        end = max(i for i, t in enumerate(toks) if t < 0) + 1
        ref = b.forward(toks).copy()
        b.truncate(end)
        snap = b.snapshot()
        assert snap[2], "an M-RoPE image leaves a shift"
        data = bytearray(b.state_bytes(snap))
        b.truncate(0)
        b.restore(b.state_from_bytes(end, data))
        assert b.kv_len == end
        assert np.array_equal(b.forward(toks[end:]), ref)
        bad = bytearray(b.state_bytes(snap))
        bad[0:4] = (10 ** 6).to_bytes(4, "little")
        with pytest.raises(HearthError, match="image positions are damaged"):
            b.state_from_bytes(end, bad)
    finally:
        b.close()


def test_portable_ids_renumber_slots_by_appearance_and_name_them():
    names = {7: "aa:0", 3: "bb:0"}
    toks = [1, media_token(7, 0), media_token(7, 1), 2, media_token(3, 0), 5]
    ids, named = portable(toks, names.__getitem__)
    assert ids == [1, media_token(0, 0), media_token(0, 1), 2, media_token(1, 0), 5]
    assert named == ["aa:0", "bb:0"]
    assert portable([1, 2], names.__getitem__) == ([1, 2], [])


def test_a_stored_prefix_is_refused_when_its_images_differ(tmp_path):
    from engine.kv.disk_store import PrefixStore

    store = PrefixStore(tmp_path, {"model": "m"})
    toks = [1, media_token(0, 0), 2]
    store.save(toks, bytearray(b"state"), ["aa:0"])
    assert store.load(toks, ["aa:0"]) == bytearray(b"state")
    assert store.load(toks, ["bb:0"]) is None and store.rejected == 0  # another key: no entry
    path = store._path(np.asarray(toks, dtype=np.int32), ["aa:0"])
    path.rename(store._path(np.asarray(toks, dtype=np.int32), ["bb:0"]))  # a file under another name
    assert store.load(toks, ["bb:0"]) is None and store.rejected == 1  # its header names other images
