"""Prefix cache: unit rules on fake states, then exactness on the real model."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from engine.engine import Engine
from engine.config import EngineConfig
from engine.kv.prefix_cache import PrefixCache, block_hashes
from engine.prompt.messages import Message
from engine.types import SamplingParams

# -- unit rules ------------------------------------------------------------------


def _insert(cache, toks, size=100, pinned=False):
    return cache.insert(toks, lambda: ("state", tuple(toks)), lambda s: size, pinned=pinned)


def test_chained_hashes_depend_on_the_whole_prefix():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = block_hashes([9, 9, 9, 9, 5, 6, 7, 8], 4)
    assert len(a) == 2 and a[0] != b[0]
    assert a[1] != b[1]  # same second block, different parent -> different key
    assert block_hashes([1, 2, 3], 4) == []


def test_longest_prefix_wins_and_last_token_is_never_served():
    c = PrefixCache(10_000, block=4)
    _insert(c, list(range(8)))
    _insert(c, list(range(12)))
    n, st = c.lookup(list(range(20)))
    assert n == 12 and st == ("state", tuple(range(12)))
    # A prompt equal to a cached entry: that entry would leave no token to compute.
    n, st = c.lookup(list(range(12)))
    assert n == 8
    n, st = c.lookup(list(range(8)))
    assert (n, st) == (0, None)


def test_entries_shorter_than_a_block_and_diverging_prompts():
    c = PrefixCache(10_000, block=4)
    _insert(c, [5, 6])
    assert c.lookup([5, 6, 7])[0] == 2
    assert c.lookup([5, 7, 7])[0] == 0
    _insert(c, [1, 2, 3, 4, 5, 6])
    assert c.lookup([1, 2, 3, 4, 5, 9, 9])[0] == 0  # same block key, tokens differ after it


def test_hash_match_alone_is_not_trusted():
    c = PrefixCache(10_000, block=4)
    _insert(c, [1, 2, 3, 4, 5])
    (entry,) = c._entries.values()
    entry.tokens[4] = 99  # as if another prefix collided on the same key
    assert c.lookup([1, 2, 3, 4, 5, 6])[0] == 0


def test_lru_eviction_by_bytes_and_pinned_last():
    c = PrefixCache(320, block=2)  # three entries of 90 + 12 bytes of tokens fit
    _insert(c, [1, 1, 1], size=90, pinned=True)
    _insert(c, [2, 2, 2], size=90)
    _insert(c, [3, 3, 3], size=90)
    c.lookup([2, 2, 2, 0])                  # touch 2: now 3 is least recently used
    _insert(c, [4, 4, 4], size=90)          # needs room: evicts 3, not pinned 1
    assert c.contains([1, 1, 1]) and c.contains([2, 2, 2]) and c.contains([4, 4, 4])
    assert not c.contains([3, 3, 3])
    assert c.bytes_used <= 320 and c.evictions == 1
    assert not _insert(c, [5, 5, 5], size=10_000)  # bigger than the whole budget
    c.set_budget(110)
    assert [e[0] for e in c.entries()] == [3] and c.entries()[0][2]  # only the pinned one left


def test_snapshot_taken_only_for_new_entries():
    c = PrefixCache(10_000, block=4)
    calls = []
    snap = lambda: calls.append(1) or "s"  # noqa: E731
    c.insert([1, 2, 3, 4, 5], snap, lambda s: 10)
    c.insert([1, 2, 3, 4, 5], snap, lambda s: 10)
    assert len(calls) == 1


def test_disabled_cache_never_serves():
    c = PrefixCache(0)
    assert not _insert(c, [1, 2, 3])
    assert c.lookup([1, 2, 3, 4]) == (0, None)


# -- the real model: cached output equals uncached output --------------------------

LONG_SYSTEM = (Path(__file__).parent.parent / "engine" / "data" / "system_prompt_long.txt").read_text()
SHORT_SYSTEM = "You are a concise assistant. Answer in one sentence. " * 4
G = SamplingParams(temperature=0.0, max_tokens=24)


def run(engine, messages, params=G):
    for ev in engine.stream(messages, params):
        if ev.kind == "final":
            return ev


@pytest.fixture(scope="module")
def cold(bundled_path):
    """Reference engine with the snapshot cache off; reset before each use = no reuse at all."""
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, cache_budget=0))
    yield e
    e.close()


def fresh(cold, messages):
    cold.reset()
    return run(cold, messages)


@pytest.fixture()
def warm(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    yield e
    e.close()


def test_system_prompt_is_cached_once_and_shared(warm, cold):
    a = [Message("system", SHORT_SYSTEM), Message("user", "What is rain?")]
    b = [Message("system", SHORT_SYSTEM), Message("user", "Why is the sky blue?")]
    ra = run(warm, a)
    assert ra.stats.cached_tokens == 0
    warm.reset()  # drop the live KV: only the snapshot can serve now
    rb = run(warm, b)
    sys_len = len(warm.backend.tokenize(warm.template.render(a[:1], add_generation_prompt=False)))
    # The system prompt and the template's user header ("<|im_start|>user"), no more.
    shared = warm.prompt_tokens(a)[:rb.stats.cached_tokens]
    assert sys_len < rb.stats.cached_tokens < sys_len + 4 and warm.prompt_tokens(b)[:len(shared)] == shared
    assert warm.cache_stats()["hits"] == 1
    assert rb.token_ids == fresh(cold, b).token_ids
    assert ra.token_ids == fresh(cold, a).token_ids


def test_third_turn_prefills_only_the_new_message(warm, cold):
    conv = [Message("system", SHORT_SYSTEM), Message("user", "Name a fruit.")]
    r1 = run(warm, conv)
    conv += [Message("assistant", r1.text), Message("user", "Name a vegetable.")]
    r2 = run(warm, conv)
    conv += [Message("assistant", r2.text), Message("user", "Name a colour.")]
    before = len(warm.kv.kv_tokens())
    r3 = run(warm, conv)
    assert r3.stats.cached_tokens == before
    assert r3.stats.prefill_tokens == r3.stats.prompt_tokens - before
    assert r3.token_ids == fresh(cold, conv).token_ids
    assert r2.token_ids == fresh(cold, conv[:4]).token_ids


def test_switching_conversations_restores_and_does_not_leak(warm, cold):
    a = [Message("system", SHORT_SYSTEM), Message("user", "Tell me about cats.")]
    b = [Message("user", "Count to five.")]
    ra1 = run(warm, a)
    rb1 = run(warm, b)                       # overwrites the live KV with B
    a2 = a + [Message("assistant", ra1.text), Message("user", "And dogs?")]
    ra2 = run(warm, a2)                      # A's state comes back from the cache
    assert ra2.stats.cached_tokens >= ra1.stats.prompt_tokens
    b2 = b + [Message("assistant", rb1.text), Message("user", "Now to ten.")]
    rb2 = run(warm, b2)
    assert rb1.token_ids == fresh(cold, b).token_ids
    assert ra2.token_ids == fresh(cold, a2).token_ids
    assert rb2.token_ids == fresh(cold, b2).token_ids


def test_after_eviction_output_is_unchanged(bundled_path, cold):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    try:
        convs = [[Message("system", f"{SHORT_SYSTEM} Topic {i}."), Message("user", "Say something.")]
                 for i in range(3)]
        run(e, convs[0])
        one = e.cache.bytes_used
        e.cache.set_budget(int(one * 1.5))   # room for one system prompt snapshot only
        outs = [run(e, c) for c in convs[1:]] + [run(e, convs[0])]
        assert e.cache.evictions >= 1
        for c, r in zip(convs[1:] + convs[:1], outs):
            assert r.token_ids == fresh(cold, c).token_ids
    finally:
        e.close()


def test_stop_mid_reply_then_continue(warm, cold):
    import threading

    conv = [Message("system", SHORT_SYSTEM), Message("user", "Describe the ocean.")]
    cancel = threading.Event()
    text = []
    for ev in warm.stream(conv, SamplingParams(temperature=0, max_tokens=64), cancel=cancel):
        if ev.kind == "delta":
            text.append(ev.text)
            if len(text) == 4:
                cancel.set()
        else:
            assert ev.finish_reason == "cancelled"
    conv += [Message("assistant", "".join(text)), Message("user", "Shorter please.")]
    kv_before = len(warm.kv.kv_tokens())
    r = run(warm, conv)
    assert r.stats.cached_tokens >= kv_before - 1  # at most a re-tokenised boundary token
    assert r.token_ids == fresh(cold, conv).token_ids


def test_long_system_prompt_snapshot_is_bounded(warm):
    r = run(warm, [Message("system", LONG_SYSTEM), Message("user", "Hi")], SamplingParams(temperature=0, max_tokens=2))
    st = warm.cache_stats()
    assert st["entries"] == 1
    # The snapshot holds ~1.5k tokens of KV: 2 x 30 layers x 3 heads x 64 x 2 bytes each.
    per_tok = warm.backend.info.kv_bytes_per_token(2.0)
    assert st["bytes_used"] >= r.stats.prompt_tokens * per_tok * 0.9
    assert np.isfinite(st["hit_rate"])


# -- on disk, across restarts ------------------------------------------------------

def test_disk_store_survives_restart_and_rejects_corruption(bundled_path, tmp_path, cold):
    conv = [Message("system", SHORT_SYSTEM), Message("user", "What is snow?")]
    e1 = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    r1 = run(e1, conv)
    e1.close()
    files = list(tmp_path.glob("*.kv"))
    assert len(files) == 1 and r1.stats.cached_tokens == 0

    # A "restart": a new engine serves the system prompt from disk.
    e2 = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    r2 = run(e2, conv)
    sys_len = len(e2.backend.tokenize(e2.template.render(conv[:1], add_generation_prompt=False)))
    assert sys_len < r2.stats.cached_tokens < sys_len + 4
    assert r2.token_ids == r1.token_ids == fresh(cold, conv).token_ids
    e2.close()

    # Flip one byte in the stored state: the checksum catches it, the file is dropped.
    data = bytearray(files[0].read_bytes())
    data[-100] ^= 0xFF
    files[0].write_bytes(bytes(data))
    e3 = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    r3 = run(e3, conv)
    assert r3.stats.cached_tokens == 0 and e3.store.rejected == 1
    assert r3.token_ids == r1.token_ids
    assert len(list(tmp_path.glob("*.kv"))) == 1  # rewritten, good again
    e3.close()


def test_turning_the_server_on_and_off_keeps_serving_the_disk_snapshots(bundled_path, tmp_path, cold):
    """Turning the local server on gives the context more sequences, one KV stream each, and llama.cpp
    restores a sequence's state only into a context with as many streams as the one it came from. The
    state is laid out again for the context's count as it is restored (state.restream), so what was saved
    with the server off is read from disk with it on, and back, exactly as a cold read. (Before, the store
    kept the count it was opened with: every toggle restored states llama.cpp refused, and each refusal
    deleted the entry.)"""
    conv = [Message("system", SHORT_SYSTEM), Message("user", "What is hail?")]
    want = fresh(cold, conv).token_ids
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    try:
        cached = []
        for parallel in (1, 3, 1, 3):
            e.set_parallel(parallel, window=False)
            e.cache.clear()  # the memory cache would serve it (next test): here every turn goes to disk
            e.reset()
            got = run(e, conv)
            assert got.token_ids == want, (e.n_seq, cached)
            cached.append((e.n_seq, got.stats.cached_tokens > 0))
        assert cached == [(1, False), (3, True), (1, True), (3, True)]
        assert e.store.rejected == 0
        assert len(list(tmp_path.glob("*.kv"))) == 1  # one entry serves both contexts
    finally:
        e.close()


def test_turning_the_server_on_and_off_keeps_the_memory_snapshots(bundled_path, cold, monkeypatch):
    """The in-memory snapshots survive a resize too, for the same reason: the window's system prompt is
    restored from memory right after the local server is turned on or off, not read again (before, a
    resize dropped them: with no disk store the next turn read the whole prompt). A memory whose states
    restore only into a context alike still drops them."""
    conv = [Message("system", SHORT_SYSTEM), Message("user", "What is sleet?")]
    want = fresh(cold, conv).token_ids
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    try:
        assert e.store is None
        cached = []
        for parallel in (1, 3, 1):
            e.set_parallel(parallel, window=False)
            e.reset()  # the sequences hold nothing: only a snapshot can serve the prompt
            got = run(e, conv)
            assert got.token_ids == want, (e.n_seq, cached)
            cached.append((e.n_seq, got.stats.cached_tokens > 0))
        assert cached == [(1, False), (3, True), (1, True)]
        identity = e.backend.state_identity()
        monkeypatch.setattr(e.backend, "state_identity", lambda: {**identity, "n_seq": str(e.n_seq)})
        e.set_parallel(3, window=False)
        assert e.cache.stats()["entries"] == 0
    finally:
        e.close()


def test_turning_the_server_on_keeps_the_conversation_the_window_was_having(bundled_path, cold):
    """What a sequence held when the context is made again (the window's conversation, with no system prompt
    to checkpoint) is kept in memory first: the next turn after the server is turned on restores it and reads
    only the new message, and says what a cold engine says. Before, the resize dropped it and the whole
    conversation was read again."""
    first = [Message("user", "What is rain?")]
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    try:
        r1 = run(e, first)
        conv = [*first, Message("assistant", r1.text), Message("user", "And snow?")]
        e.set_parallel(2, window=True)
        got = run(e, conv)
        assert got.token_ids == fresh(cold, conv).token_ids
        assert got.stats.cached_tokens >= r1.stats.prompt_tokens  # the first turn, at least, from memory
    finally:
        e.close()


def test_a_state_not_laid_out_as_a_plain_kv_caches_is_restored_as_taken():
    from engine.backends.llama.state import IO_MAGIC, restream

    one = bytearray(struct.pack("<IiII", IO_MAGIC, 0, 1, 2) + b"cells")  # one stream: the sequence's cells
    three = restream(one, 3)
    assert three == struct.pack("<IiII", IO_MAGIC, 0, 3, 2) + b"cells" + bytes(8)
    assert restream(three, 1) == one and restream(one, 1) is one
    for odd in (bytearray(b"short"), bytearray(struct.pack("<IiII", 1234, 0, 1, 2) + b"cells"),  # another magic
                bytearray(struct.pack("<IiIII", IO_MAGIC, 0, 2, 2, 7) + b"x"),  # something after the cells
                bytearray(struct.pack("<IiIII", IO_MAGIC, 0, 2, 0, 0))):  # no stream holds cells
        assert restream(odd, 3) is odd


def test_a_restart_keeps_the_disk_snapshot_in_memory_as_read(bundled_path, tmp_path, cold):
    # The state read from disk is what the KV now holds: the memory cache keeps that buffer
    # rather than copying the KV out of llama.cpp again (tens of MB on a long system prompt,
    # inside a restart's first reply).
    conv = [Message("system", SHORT_SYSTEM), Message("user", "What is snow?")]
    e1 = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    r1 = run(e1, conv)
    e1.close()
    e2 = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, disk_cache=tmp_path))
    read = []
    real_load = e2.store.load
    e2.store.load = lambda *args: read.append(real_load(*args)) or read[-1]
    r2 = run(e2, conv)
    assert r2.stats.cached_tokens > 0 and len(read) == 1 and read[0] is not None
    assert any(e.state[1] is read[0] for e in e2.cache._entries.values())
    e2.reset()  # only the memory cache can serve it now
    r3 = run(e2, conv)
    assert r3.stats.cached_tokens == r2.stats.cached_tokens and len(read) == 1  # not read from disk again
    assert r3.token_ids == r2.token_ids == r1.token_ids == fresh(cold, conv).token_ids
    e2.close()


def test_disk_store_rejects_stale_identity_and_truncation(tmp_path):
    from engine.kv.disk_store import PrefixStore

    s1 = PrefixStore(tmp_path, {"model_sha256": "aa", "kv_type": "f16"})
    s1.save([1, 2, 3], bytearray(b"state-bytes"))
    assert s1.load([1, 2, 3]) == bytearray(b"state-bytes")
    assert s1.load([1, 2, 4]) is None
    # Same tokens, different model: a different file name, so simply not found...
    assert PrefixStore(tmp_path, {"model_sha256": "bb", "kv_type": "f16"}).load([1, 2, 3]) is None
    # ...and a file whose header names another identity is rejected, not used.
    (path,) = tmp_path.glob("*.kv")
    other = PrefixStore(tmp_path, {"model_sha256": "bb", "kv_type": "f16"})
    path.rename(other._path(np.asarray([1, 2, 3], dtype=np.int32)))
    assert other.load([1, 2, 3]) is None and other.rejected == 1
    s1.save([1, 2, 3], bytearray(b"state-bytes"))
    (path,) = tmp_path.glob("*.kv")
    path.write_bytes(path.read_bytes()[:-3])
    assert s1.load([1, 2, 3]) is None and not path.exists()
    # A header that is JSON but not the store's (an array; a length that is not a number) is refused too.
    import struct

    from engine.kv.disk_store import MAGIC

    for header in (b"[1, 2]", b'{"identity": {"model_sha256": "aa", "kv_type": "f16"}, "state_len": "11"}'):
        s1.save([1, 2, 3], bytearray(b"state-bytes"))
        (path,) = tmp_path.glob("*.kv")
        path.write_bytes(MAGIC + struct.pack("<I", len(header)) + header + b"\0" * 23)
        rejected = s1.rejected
        assert s1.load([1, 2, 3]) is None and s1.rejected == rejected + 1 and not path.exists()


def test_disk_store_checks_an_xxh3_and_still_reads_entries_written_with_a_crc32_or_a_sha256(tmp_path):
    import hashlib
    import json
    import struct
    import zlib

    from engine.kv.disk_store import MAGIC, PrefixStore

    store = PrefixStore(tmp_path, {"model_sha256": "aa"})
    state = bytearray(range(256)) * 40
    path = store.save([5, 6, 7], state)
    raw = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", raw, len(MAGIC))
    header = json.loads(raw[len(MAGIC) + 4:len(MAGIC) + 4 + hlen])
    assert isinstance(header["xxh3_64"], int) and "crc32" not in header and "sha256" not in header
    # One flipped byte in the state: refused, dropped.
    data = bytearray(path.read_bytes())
    data[-7] ^= 0x01
    path.write_bytes(bytes(data))
    assert store.load([5, 6, 7]) is None and store.rejected == 1 and not path.exists()
    # Entries of earlier releases (a CRC-32 or a SHA-256 in the header) are read as written, and checked.
    tokens = np.asarray([5, 6, 7], dtype=np.int32)
    payload = tokens.tobytes() + bytes(state)
    for key, digest, ok in (("sha256", hashlib.sha256(payload).hexdigest(), True), ("sha256", "0" * 64, False),
                            ("crc32", zlib.crc32(payload), True), ("crc32", zlib.crc32(payload) ^ 1, False)):
        old = json.dumps({"identity": store.identity, "n_tokens": 3, "state_len": len(state), "images": [],
                          key: digest}).encode()
        path.write_bytes(MAGIC + struct.pack("<I", len(old)) + old + payload)
        assert (store.load([5, 6, 7]) == state) is ok


def test_insert_that_could_never_fit_copies_nothing():
    # A live KV bigger than the whole budget used to be copied (hundreds of MB)
    # and then thrown away on every conversation switch.
    cache = PrefixCache(budget_bytes=10_000, block=4)
    calls = []

    def snap(n):
        def take():
            calls.append(n)
            return bytearray(100 * n)  # 100 bytes per token
        return take

    assert cache.insert(list(range(8)), snap(8), len)          # 800 B + tokens: fits
    assert not cache.insert(list(range(1000)), snap(1000), len)  # predicted ~100 kB: refused unseen
    assert calls == [8]
    assert cache.stats()["skipped"] == 1
    assert cache.insert(list(range(50)), snap(50), len)         # still fits, still taken
    assert calls == [8, 50]


def test_disk_store_keeps_to_its_byte_cap_least_recently_used_first(tmp_path):
    import os
    import time

    from engine.kv.disk_store import PrefixStore, clear_store, store_usage

    store = PrefixStore(tmp_path, {"model_sha256": "aa"}, max_bytes=3_600)  # room for three ~1.2 kB entries
    for i in range(3):
        store.save([i, 1, 2], bytearray(1000))
        past = time.time() - 100 + i  # distinct mtimes even on coarse file systems
        os.utime(store._path(np.asarray([i, 1, 2], dtype=np.int32)), (past, past))
    assert store_usage(tmp_path)[0] == 3
    assert store.load([0, 1, 2]) is not None  # 0 is now the most recently used
    store.save([3, 1, 2], bytearray(1000))    # over the cap: 1, the least recently used, goes
    assert store.load([1, 1, 2]) is None
    assert all(store.load([i, 1, 2]) is not None for i in (0, 2, 3))
    n, used = store_usage(tmp_path)
    assert n == 3 and used <= 3_600 and store.evictions == 1
    store.save([9, 9, 9], bytearray(10_000))  # alone bigger than the cap: not written, nothing evicted
    assert store.load([9, 9, 9]) is None and store_usage(tmp_path)[0] == 3
    assert clear_store(tmp_path) == used and store_usage(tmp_path) == (0, 0)
