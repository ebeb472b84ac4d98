"""The engine's edges on the real bundled model: Stop during a long prefill,
prefill progress, replies cut inside a character, conversations longer than
the context, and turns that a strict template would refuse."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.prompt.chat_template import ChatTemplate
from engine.engine import Engine
from engine.config import EngineConfig
from engine.errors import Cancelled, PromptTooLongError
from engine.prompt.builder import as_messages
from engine.prompt.messages import Message
from engine.types import SamplingParams
from test_engine import collect

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
LONG_SYSTEM = " ".join(f"Rule {i}: answer politely and keep to the point of question {i}." for i in range(80))


@pytest.fixture(scope="module")
def big(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2))
    yield e
    e.close()


def conv(user: str) -> list[Message]:
    return [Message("system", LONG_SYSTEM), Message("user", user)]


def test_progress_then_stop_during_prefill_and_the_next_reply_equals_fresh(big):
    msgs = conv("What is rule 3?")
    total = len(big.prompt_tokens(msgs))
    assert total > 2 * 512  # three chunks of prefill at least
    # A cold prompt reports its progress in order, chunk by chunk, to its last token.
    big.reset()
    big.cache.clear()
    seen: list[tuple[int, int]] = []
    _, fresh = collect(big.stream(msgs, GREEDY, progress=lambda d, t: seen.append((d, t))))
    assert [t for _, t in seen] == [total] * len(seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == total and len(done) >= 3
    # Stop pressed after the first chunk: no text, finish "cancelled", the chunks
    # read so far stay in the KV, and the next reply equals the fresh one.
    big.reset()
    big.cache.clear()
    cancel = threading.Event()
    stops: list[int] = []

    def progress(d: int, t: int) -> None:
        stops.append(d)
        cancel.set()

    deltas, final = collect(big.stream(msgs, GREEDY, cancel=cancel, progress=progress))
    assert deltas == [] and final.finish_reason == "cancelled"
    assert final.stats.generated_tokens == 0 and final.text == ""
    # The chunk in flight when Stop came is aborted inside its forward, or read whole.
    assert 1 <= len(stops) <= 2 and 0 < big.backend.kv_len < total
    _, again = collect(big.stream(msgs, GREEDY))
    assert again.token_ids == fresh.token_ids and again.text == fresh.text
    assert again.stats.cached_tokens >= stops[0]  # what was read before Stop is not read again


def test_abort_inside_one_forward_leaves_the_kv_as_it_was(big):
    b = big.backend
    big.reset()
    toks = big.prompt_tokens(conv("x"))[:400]
    b.forward(toks[:100])
    stop = threading.Event()
    stop.set()
    b.set_abort(stop)
    try:
        with pytest.raises(Cancelled):
            b.forward(toks[100:])  # one llama_decode, aborted between graph nodes
    finally:
        b.set_abort(None)
    assert b.kv_len == 100
    logits = b.forward(toks[100:]).copy()
    b.truncate(0)
    assert (b.forward(toks) == logits).all()  # the KV was not left half-written
    big.reset()


def test_reply_cut_at_max_tokens_never_ends_in_half_a_character(engine):
    msgs = [Message("user", "Write the Chinese words for: water, fire, mountain, river, tree, sky, moon, sun.")]
    engine.reset()
    _, full = collect(engine.stream(msgs, SamplingParams(temperature=0, max_tokens=80, ignore_eos=True)))
    ids = full.token_ids
    # Find every place where the reply's bytes stop inside a character.
    cuts = []
    data = b""
    for i, t in enumerate(ids[:-4], start=1):
        data += engine.backend.token_bytes(t)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data":
                cuts.append(i)
    assert cuts, "the bundled model's reply should split a CJK character over tokens"
    for n in cuts[:3]:
        engine.reset()
        deltas, f = collect(engine.stream(msgs, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)))
        assert not f.text.endswith("\ufffd") and "".join(deltas) == f.text
        assert n < f.stats.generated_tokens <= n + 3  # finished the character, at most 3 more tokens
        assert f.token_ids == ids[:len(f.token_ids)]
        expected = b"".join(engine.backend.token_bytes(t) for t in f.token_ids).decode("utf-8")
        assert f.text == expected


def test_stop_inside_a_character_drops_the_dangling_bytes(engine):
    msgs = [Message("user", "Write the Chinese word for water, three times.")]
    engine.reset()
    cancel = threading.Event()
    for ev in engine.stream(msgs, SamplingParams(temperature=0, max_tokens=60), cancel=cancel):
        if ev.kind == "final":
            final = ev
        elif "\u6c34" in ev.text or any(ord(c) > 0x2E80 for c in ev.text):
            cancel.set()
    assert not final.text.endswith("\ufffd")


def test_consecutive_user_turns_are_merged_so_strict_templates_render():
    strict = ChatTemplate((TEMPLATES / "mistral_inst.jinja").read_text(), bos_token="<s>", eos_token="</s>")
    msgs = [Message("user", "first"), Message("user", "second"), Message("assistant", "ok"),
            Message("user", "third")]
    merged = as_messages(msgs)
    assert [m.role for m in merged] == ["user", "assistant", "user"]
    assert merged[0].content == "first\n\nsecond"
    assert "first\n\nsecond" in strict.render(merged, add_generation_prompt=True)


def long_chat(n_turns: int) -> list[Message]:
    msgs = [Message("system", "You are a terse assistant.")]
    for i in range(n_turns):
        msgs += [Message("user", f"Question {i}: " + "tell me about the ocean " * 12),
                 Message("assistant", f"Answer {i}: " + "the ocean is large and deep " * 12)]
    return msgs


def test_conversation_longer_than_the_context_goes_on_and_keeps_the_system_prompt(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2))
    try:
        msgs = long_chat(12) + [Message("user", "And the sky?")]
        assert len(e.prompt_tokens(msgs)) > 1024
        with pytest.raises(PromptTooLongError, match="context holds 1024"):
            list(e.stream(msgs, GREEDY, context_policy="stop"))
        _, f = collect(e.stream(msgs, GREEDY))
        assert f.finish_reason in ("eos", "max_tokens") and f.stats.generated_tokens > 0
        dropped = f.stats.dropped_messages
        assert dropped > 0 and dropped % 2 == 0  # whole user/assistant pairs, oldest first
        kept = [msgs[0]] + msgs[1 + dropped:]
        assert f.stats.prompt_tokens == len(e.prompt_tokens(kept))
        assert f.stats.prompt_tokens + GREEDY.max_tokens <= 1024
        assert e.prompt_tokens(kept)[:10] == e.prompt_tokens(msgs)[:10]  # the system prompt stays
        # The next turn keeps the same cut, so everything up to the new message is reused.
        nxt = msgs + [Message("assistant", f.text), Message("user", "And the moon?")]
        _, g = collect(e.stream(nxt, GREEDY))
        assert g.stats.dropped_messages == dropped
        assert g.stats.cached_tokens >= f.stats.prompt_tokens - 1
    finally:
        e.close()


def test_newest_message_alone_too_long_is_a_clear_error(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2))
    try:
        msgs = long_chat(2) + [Message("user", "word " * 400)]
        with pytest.raises(PromptTooLongError, match="newest message alone"):
            list(e.stream(msgs, GREEDY))
        _, f = collect(e.stream([Message("user", "Hi")], SamplingParams(temperature=0, max_tokens=3)))
        assert f.stats.generated_tokens >= 1
    finally:
        e.close()


def test_bench_stop_presses_stop_inside_the_prefill_and_the_next_reply_equals_fresh(bundled_path):
    """`bench stop` presses Stop once half the prompt is read: the reply ends cancelled with part of the
    prompt read, and the engine's next full reply equals a fresh engine's."""
    import argparse

    from engine.bench import stop

    out = stop.bench_stop(argparse.Namespace(model=str(bundled_path), tokens=800, rounds=1, threads=2))
    (row,) = out["stops"]
    assert row["stopped"] and row["finish_reason"] == "cancelled" and "latency_ms" in row
    assert 0 < row["prompt_tokens_read"] < out["prompt_tokens"]
    assert out["identical"] is True


def test_bench_soak_takes_the_prefix_cache_out_of_the_rss_it_compares(bundled_path):
    """The soak's reply bar is on RSS less what the prefix cache holds (the cache fills to its budget by
    design); the figures it reports are the cache's own."""
    import argparse

    from engine.bench import soak

    out = soak.replies(argparse.Namespace(threads=2), bundled_path, n=4, n_prompts=2, warmup=2)
    assert out["replies"] == 4 and out["cache_entries"] >= 2 and out["cache_end_mib"] > 0
    assert out["cache_end_mib"] >= out["cache_after_warmup_mib"] > 0
    rest = (out["rss_end_mib"] - out["cache_end_mib"]) / (out["rss_after_warmup_mib"] - out["cache_after_warmup_mib"])
    assert abs(out["growth_besides_cache"] - (rest - 1)) < 0.01
