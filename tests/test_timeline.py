"""The per-reply timeline: pure checks of the dataclass and the recorder, then
real replies on the bundled model through the engine (and the window's store)."""
from __future__ import annotations

import json
from time import perf_counter

import numpy as np
import pytest

from engine.metrics import GenerationStats, percentile
from engine.timeline import NO_TIMELINE, PARTS, Recorder, Timeline, TimedSampler
from engine.types import SamplingParams


def _sample_timeline() -> Timeline:
    return Timeline(template_ms=0.41, tokenize_ms=1.2, prefill_ms=80.5, prefill_tokens=120, prefill_tok_s=1490.7,
                    cached_tokens=16, prompt_tokens=136, ttft_ms=83.0, generated_tokens=4,
                    step_ms=[6.1234567, 7.5, 12.25], tpot_p50_ms=7.5, tpot_p90_ms=11.3, tpot_p99_ms=12.155,
                    slowest_step=2, slowest_step_ms=12.25, decode_ms=25.0, sampling_ms=0.2,
                    sampling_ms_per_token=0.05, detokenize_ms=0.1, spec_acceptance=[0.75, 0.5],
                    kv_used=140, n_ctx=2048, cache_hits=1, cache_inserts=2, cache_evictions=0, e2e_ms=108.0)


def test_round_trip_through_json_keeps_every_field():
    tl = _sample_timeline()
    back = Timeline.from_dict(json.loads(json.dumps(tl.to_dict())))
    assert back.step_ms == [6.123, 7.5, 12.25]  # rounded to the microsecond
    back.step_ms = tl.step_ms
    assert back == tl


def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones():
    back = Timeline.from_dict({"prefill_ms": 5.0, "from_a_newer_version": 1})
    assert back.prefill_ms == 5.0 and back.step_ms == [] and back.e2e_ms == 0.0


def test_parts_are_in_request_order_and_other_is_the_rest():
    tl = _sample_timeline()
    assert list(tl.parts()) == ["template", "tokenize", "queue_wait", "prefill", "decode", "sampling", "detokenize"]
    assert tl.other_ms == pytest.approx(108.0 - (0.41 + 1.2 + 80.5 + 25.0 + 0.2 + 0.1))
    assert len(PARTS) == len(tl.parts())


def test_queue_wait_adds_to_ttft_and_end_to_end():
    tl = _sample_timeline()
    tl.record_queue_wait(40.0)
    assert (tl.queue_wait_ms, tl.ttft_ms, tl.e2e_ms) == (40.0, 123.0, 148.0)
    assert tl.other_ms == pytest.approx(_sample_timeline().other_ms)
    with pytest.raises(ValueError):
        tl.record_queue_wait(-1.0)


def test_timed_sampler_picks_what_the_plain_one_picks():
    from engine.sampling import make_sampler

    params = SamplingParams(temperature=0.8, top_k=40, seed=3)
    plain, timed = make_sampler(params), TimedSampler(params)
    logits = np.random.default_rng(0).normal(size=500).astype(np.float32)
    assert [plain([1], logits) for _ in range(20)] == [timed([1], logits) for _ in range(20)]
    assert timed.spent > 0.0


def test_recorder_derives_steps_percentiles_and_cache_diffs():
    counters = {"hits": 3, "inserts": 5, "evictions": 1}
    t0 = perf_counter()
    rec = Recorder(t0, lambda: dict(counters))
    rec.prompt_built(0.001, 0.002)
    sampler = rec.make_sampler(SamplingParams(temperature=0.0))
    push = rec.timed(lambda tok: str(tok))
    logits = np.arange(10, dtype=np.float32)
    for i in range(6):
        sampler([], logits)
        rec.mark(perf_counter())
        if i == 0:
            rec.first_token()
        push(i)
    counters.update(hits=4, inserts=7, evictions=2)
    stats = GenerationStats(prompt_tokens=10, cached_tokens=4, prefill_tokens=6, generated_tokens=6, n_ctx=64,
                            ttft_ms=1.0)
    tl = rec.finish(stats, kv_used=15, t_end=perf_counter())
    assert tl is not None
    assert len(tl.step_ms) == 5 and all(s >= 0 for s in tl.step_ms)
    assert tl.tpot_p50_ms == percentile(tl.step_ms, 50) and tl.tpot_p99_ms == percentile(tl.step_ms, 99)
    assert tl.slowest_step_ms == max(tl.step_ms) == tl.step_ms[tl.slowest_step]
    assert (tl.cache_hits, tl.cache_inserts, tl.cache_evictions) == (1, 2, 1)
    assert (tl.cached_tokens, tl.prompt_tokens, tl.kv_used, tl.n_ctx) == (4, 10, 15, 64)
    assert tl.template_ms == pytest.approx(1.0) and tl.tokenize_ms == pytest.approx(2.0)
    assert tl.sampling_ms > 0 and tl.detokenize_ms > 0
    assert tl.sampling_ms_per_token == pytest.approx(tl.sampling_ms / 6)


def test_no_timeline_hands_back_the_plain_pieces():
    from engine.sampling import Sampler

    def push(tok: int) -> str:
        return ""

    assert type(NO_TIMELINE.make_sampler(SamplingParams())) is Sampler
    assert NO_TIMELINE.timed(push) is push
    for _ in range(3):
        NO_TIMELINE.mark(1.0)
    assert NO_TIMELINE.arrivals == []
    assert NO_TIMELINE.finish(GenerationStats(), kv_used=0, t_end=0.0) is None


def test_prefix_cache_counts_new_inserts_only():
    from engine.kv.prefix_cache import PrefixCache

    cache = PrefixCache(budget_bytes=10_000, block=4)
    assert cache.insert(list(range(8)), lambda: "state", lambda s: 100)
    assert cache.insert(list(range(8)), lambda: "state", lambda s: 100)   # already there: refreshed, not new
    assert cache.insert(list(range(12)), lambda: "state", lambda s: 100)
    assert not cache.insert(list(range(4)), lambda: "state", lambda s: 20_000)  # could never fit
    assert cache.inserts == 2 and cache.stats()["inserts"] == 2


def test_stats_as_dict_carries_the_timeline_as_json():
    stats = GenerationStats(prompt_tokens=3, timeline=_sample_timeline())
    d = json.loads(json.dumps(stats.as_dict()))
    assert d["timeline"] == _sample_timeline().to_dict()
    assert Timeline.from_dict(d["timeline"]).slowest_step == 2
    assert GenerationStats().as_dict()["timeline"] is None


# -- real replies on the bundled model -------------------------------------------------------

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


def _reply(engine, messages, **params):
    """Run one reply; returns (final event, the caller's own wall-clock ms around it)."""
    p = SamplingParams(**{"temperature": 0.7, "seed": 1, "max_tokens": 32, "ignore_eos": True, **params})
    t0 = perf_counter()
    events = list(engine.stream(messages, p))
    wall_ms = (perf_counter() - t0) * 1e3
    assert events[-1].kind == "final"
    return events[-1], wall_ms


def test_a_real_reply_accounts_for_its_time(engine):
    engine.reset()
    final, wall_ms = _reply(engine, [{"role": "system", "content": "You are terse."}] + QUESTION)
    st, tl = final.stats, final.stats.timeline
    assert tl is not None and tl.generated_tokens == st.generated_tokens == 32
    assert all(v >= 0 for v in tl.parts().values()) and tl.template_ms > 0 and tl.tokenize_ms > 0
    # The named parts add up to the time the caller measured around the whole reply.
    assert sum(tl.parts().values()) == pytest.approx(wall_ms, rel=0.05)
    assert tl.e2e_ms == pytest.approx(st.e2e_ms) and tl.e2e_ms <= wall_ms
    # One step per token after the first; together they are the decode span.
    assert len(tl.step_ms) == 31 and sum(tl.step_ms) == pytest.approx(st.decode_ms, rel=1e-6)
    assert tl.decode_ms + tl.sampling_ms + tl.detokenize_ms >= sum(tl.step_ms) * 0.999
    for q, got in ((50, tl.tpot_p50_ms), (90, tl.tpot_p90_ms), (99, tl.tpot_p99_ms)):
        assert got == pytest.approx(percentile(tl.step_ms, q))
    assert tl.tpot_p50_ms <= tl.tpot_p90_ms <= tl.tpot_p99_ms <= tl.slowest_step_ms == max(tl.step_ms)
    assert tl.cached_tokens == st.cached_tokens and tl.prompt_tokens == st.prompt_tokens
    assert tl.prefill_tokens == st.prompt_tokens - st.cached_tokens
    assert tl.prefill_tok_s == pytest.approx(tl.prefill_tokens / (tl.prefill_ms / 1e3))
    assert tl.kv_used == st.prompt_tokens + 31 and tl.n_ctx == 2048  # the last token is never fed back
    assert tl.ttft_ms == st.ttft_ms and tl.spec_acceptance == []


def test_a_second_turn_is_served_from_the_cache(engine):
    engine.reset()
    engine.cache.clear()
    # Greedy replies that end on their own re-tokenize as they were generated,
    # so the saved KV is a prefix of the next turn's prompt.
    greedy = {"temperature": 0.0, "ignore_eos": False}
    a1, _ = _reply(engine, QUESTION, **greedy)
    turn2 = QUESTION + [{"role": "assistant", "content": a1.text}, {"role": "user", "content": "And two more?"}]
    a2, _ = _reply(engine, turn2, **greedy)
    # The same conversation: the live KV serves the first turn.
    assert a2.stats.timeline.cached_tokens >= a1.stats.prompt_tokens
    assert a2.stats.timeline.prefill_tokens < a2.stats.prompt_tokens - a1.stats.prompt_tokens + 32
    # Another chat in between: its request snapshots this one's KV into the prefix cache...
    other, _ = _reply(engine, [{"role": "user", "content": "Say something about owls."}], **greedy)
    assert other.stats.timeline.cache_inserts == 1 and other.stats.timeline.cache_hits == 0
    # ... and coming back to the first chat is a prefix-cache hit.
    turn3 = turn2 + [{"role": "assistant", "content": a2.text}, {"role": "user", "content": "Thanks."}]
    back, _ = _reply(engine, turn3, **greedy)
    tl = back.stats.timeline
    assert tl.cache_hits == 1 and tl.cached_tokens >= a2.stats.prompt_tokens
    assert tl.cached_tokens == back.stats.cached_tokens


def test_speculative_replies_report_acceptance_per_position(engine):
    engine.reset()
    engine.set_speculation("ngram", k=3, force=True)
    try:
        # A repetitive request: the n-gram draft finds its continuations in the prompt.
        final, wall_ms = _reply(engine, [{"role": "user", "content": "Repeat after me: one two three four, "
                                          "one two three four, one two three four."}], temperature=0.0, max_tokens=40)
    finally:
        engine.set_speculation("none")
    st, tl = final.stats, final.stats.timeline
    assert st.spec["drafted"] > 0 and len(tl.spec_acceptance) == 3
    assert tl.spec_acceptance == st.spec["acceptance_per_position"]
    assert len(tl.step_ms) == st.generated_tokens - 1
    assert sum(tl.parts().values()) == pytest.approx(wall_ms, rel=0.05)


def test_recording_off_keeps_no_timeline_and_the_same_tokens(engine):
    engine.reset()
    on, _ = _reply(engine, QUESTION, temperature=0.0, max_tokens=12)
    engine.reset()
    engine.record_timeline = False
    try:
        off, _ = _reply(engine, QUESTION, temperature=0.0, max_tokens=12)
    finally:
        engine.record_timeline = True
    assert off.stats.timeline is None and off.stats.as_dict()["timeline"] is None
    assert on.token_ids == off.token_ids


def test_the_timeline_survives_the_store(engine, tmp_path):
    from app.core.store import Store

    engine.reset()
    final, _ = _reply(engine, QUESTION, max_tokens=8)
    store = Store(tmp_path / "h.sqlite3")
    cid = store.create_conversation().id
    mid = store.begin_reply(cid)
    store.finish_reply(mid, final.text, complete=True, finish_reason=final.finish_reason,
                       metrics=final.stats.as_dict())
    store.close()
    again = Store(tmp_path / "h.sqlite3").message(mid)
    back = Timeline.from_dict(again.metrics["timeline"])
    assert back == Timeline.from_dict(final.stats.timeline.to_dict())
    assert len(back.step_ms) == 7 and back.cached_tokens == final.stats.cached_tokens


@pytest.mark.timeout(900)  # a model load and a reply in the real window, on a busy shared machine
def test_the_window_keeps_each_replys_timeline(qtbot, tmp_path, monkeypatch):
    from app.window.main_window import MainWindow
    from app.window.selftest import send_and_wait, write_settings
    from app.core.store import Store

    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    write_settings(max_tokens=12)
    w = MainWindow()
    w.show()
    try:
        w.start()
        qtbot.waitUntil(lambda: w.host.ready or not w.host.loading, timeout=300_000)
        assert w.host.ready, w.info.messages()
        reply = send_and_wait(w, "Name a fruit.", timeout_s=600)
        path = w.store.path
    finally:
        w.close()
    stored = Store(path).message(reply["id"])  # reopened, as after a restart
    tl = Timeline.from_dict(stored.metrics["timeline"])
    assert tl.generated_tokens == stored.metrics["generated_tokens"] > 0
    assert len(tl.step_ms) == tl.generated_tokens - 1 and tl.prompt_tokens == stored.metrics["prompt_tokens"]
    assert tl.e2e_ms == pytest.approx(stored.metrics["e2e_ms"], abs=0.01) and tl.prefill_ms > 0


def test_a_scheduled_reply_counts_its_queue_wait(engine):
    from engine.serve import Priority, Scheduler, ServeRequest
    from engine.types import Message

    sched = Scheduler(engine, parallel=1, queue_limit=2)
    try:
        # The window's requests run through the engine one at a time: the second waits for the first.
        endless = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)
        blocker = sched.submit(ServeRequest(messages=[Message("user", "Count to a million.")], params=endless,
                                            priority=Priority.WINDOW))
        it = blocker.events()
        assert next(it).kind == "delta"  # running: the next request waits
        waiting = sched.submit(ServeRequest(messages=[Message("user", "Say hi.")],
                                            params=SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True),
                                            priority=Priority.WINDOW))
        blocker.cancel()
        list(it)
        final = list(waiting.events())[-1]
    finally:
        sched.close()
    tl = final.stats.timeline
    assert tl.queue_wait_ms == pytest.approx(waiting.times.queue_wait_s * 1e3) and tl.queue_wait_ms > 0
    assert tl.e2e_ms == pytest.approx(final.stats.e2e_ms + tl.queue_wait_ms)
    assert tl.ttft_ms == pytest.approx(final.stats.ttft_ms + tl.queue_wait_ms)
