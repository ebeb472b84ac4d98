"""The per-reply timeline, part of the reply's one metrics record: pure checks of
the record and the recorder, then real replies on the bundled model through the
engine (and the window's store)."""
from __future__ import annotations

import json
from time import perf_counter

import numpy as np
import pytest

from engine.decode.metrics import PARTS, GenerationStats, has_timeline, percentile
from engine.decode.timeline import NO_TIMELINE, Recorder, TimedSampler
from engine.types import SamplingParams


def _sample_timeline() -> GenerationStats:
    return GenerationStats(timed=True, template_ms=0.41, tokenize_ms=1.2, prefill_ms=80.5, prefill_tokens=120,
                           cached_tokens=16, prompt_tokens=136, ttft_ms=83.0, generated_tokens=4,
                           step_ms=[6.1234567, 7.5, 12.25], forward_ms=25.0, sampling_ms=0.2, detokenize_ms=0.1,
                           spec={"acceptance_per_position": [0.75, 0.5]}, kv_used=140, n_ctx=2048, cache_hits=1,
                           cache_inserts=2, cache_evictions=0, e2e_ms=108.0)


def test_round_trip_through_json_keeps_every_field():
    tl = _sample_timeline()
    back = GenerationStats.from_dict(json.loads(json.dumps(tl.as_dict())))
    assert back.step_ms == [6.123, 7.5, 12.25]  # rounded to the microsecond
    back.step_ms = tl.step_ms
    assert back == tl


def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones():
    back = GenerationStats.from_dict({"prefill_ms": 5.0, "from_a_newer_version": 1})
    assert back.prefill_ms == 5.0 and back.step_ms == [] and back.e2e_ms == 0.0 and not back.timed


def test_figures_derived_from_the_steps_are_not_stored_twice():
    tl = _sample_timeline()
    assert tl.prefill_tok_s == pytest.approx(1490.7, abs=0.1) and tl.sampling_ms_per_token == pytest.approx(0.05)
    assert (tl.tpot_p50_ms, tl.tpot_p90_ms) == (7.5, pytest.approx(11.3)) and tl.tpot_p99_ms == pytest.approx(12.155)
    assert (tl.slowest_step, tl.slowest_step_ms) == (2, 12.25) and tl.spec_acceptance == [0.75, 0.5]
    stored = tl.as_dict()
    for derived in ("prefill_tok_s", "sampling_ms_per_token", "tpot_p50_ms", "slowest_step", "spec_acceptance",
                    "timeline"):
        assert derived not in stored
    assert GenerationStats().slowest_step == -1 and GenerationStats().tpot_p99_ms == 0.0


# What Hearth stored with a reply before the timeline joined the stats: the stats'
# figures, and the timeline nested with its own copies of nine of them.
OLD_METRICS = {
    "prompt_tokens": 136, "cached_tokens": 16, "prefill_tokens": 120, "prefill_ms": 83.9, "ttft_ms": 82.0,
    "generated_tokens": 4, "decode_ms": 25.9, "tpot_ms": 8.633, "decode_tok_s": 115.83, "e2e_ms": 107.0,
    "finish_reason": "max_tokens", "backend": "llama_cpp", "n_ctx": 2048, "dropped_messages": 0, "spec": None,
    "timeline": {"template_ms": 0.41, "tokenize_ms": 1.2, "queue_wait_ms": 1.0, "prefill_ms": 80.5,
                 "prefill_tokens": 120, "prefill_tok_s": 1490.683, "cached_tokens": 16, "prompt_tokens": 136,
                 "ttft_ms": 83.0, "generated_tokens": 4, "step_ms": [6.123, 7.5, 12.25], "tpot_p50_ms": 7.5,
                 "tpot_p90_ms": 11.3, "tpot_p99_ms": 12.155, "slowest_step": 2, "slowest_step_ms": 12.25,
                 "decode_ms": 25.0, "sampling_ms": 0.2, "sampling_ms_per_token": 0.05, "detokenize_ms": 0.1,
                 "spec_acceptance": [], "kv_used": 140, "n_ctx": 2048, "cache_hits": 1, "cache_inserts": 2,
                 "cache_evictions": 0, "e2e_ms": 108.0},
}


def test_metrics_stored_by_older_versions_still_read_back():
    assert has_timeline(OLD_METRICS) and not has_timeline({k: v for k, v in OLD_METRICS.items() if k != "timeline"})
    st = GenerationStats.from_dict(json.loads(json.dumps(OLD_METRICS)))
    assert st.timed and st.step_ms == [6.123, 7.5, 12.25] and st.slowest_step == 2
    # The timeline's decode_ms was the forward passes; the stats' is the decode span.
    assert (st.forward_ms, st.decode_ms, st.decode_tok_s) == (25.0, 25.9, 115.83)
    # The timeline's prefill, TTFT and end-to-end (with its queue wait) are the record's meanings now.
    assert (st.prefill_ms, st.ttft_ms, st.e2e_ms, st.queue_wait_ms) == (80.5, 83.0, 108.0, 1.0)
    assert st.parts() == {"template": 0.41, "tokenize": 1.2, "queue_wait": 1.0, "prefill": 80.5, "decode": 25.0,
                          "sampling": 0.2, "detokenize": 0.1}
    # Without a timeline (recording off, or older still): the stats' own figures.
    plain = GenerationStats.from_dict({k: v for k, v in OLD_METRICS.items() if k != "timeline"})
    assert not plain.timed and (plain.prefill_ms, plain.ttft_ms, plain.e2e_ms) == (83.9, 82.0, 107.0)


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
    from engine.decode.sampling import make_sampler

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
    assert rec.finish(stats, kv_used=15) is None  # it fills in the reply's own stats
    tl = stats
    assert tl.timed
    assert len(tl.step_ms) == 5 and all(s >= 0 for s in tl.step_ms)
    assert tl.tpot_p50_ms == percentile(tl.step_ms, 50) and tl.tpot_p99_ms == percentile(tl.step_ms, 99)
    assert tl.slowest_step_ms == max(tl.step_ms) == tl.step_ms[tl.slowest_step]
    assert (tl.cache_hits, tl.cache_inserts, tl.cache_evictions) == (1, 2, 1)
    assert (tl.cached_tokens, tl.prompt_tokens, tl.kv_used, tl.n_ctx) == (4, 10, 15, 64)
    assert tl.template_ms == pytest.approx(1.0) and tl.tokenize_ms == pytest.approx(2.0)
    assert tl.sampling_ms > 0 and tl.detokenize_ms > 0
    assert tl.sampling_ms_per_token == pytest.approx(tl.sampling_ms / 6)


def test_no_timeline_hands_back_the_plain_pieces():
    from engine.decode.sampling import Sampler

    def push(tok: int) -> str:
        return ""

    assert type(NO_TIMELINE.make_sampler(SamplingParams())) is Sampler
    assert NO_TIMELINE.timed(push) is push
    for _ in range(3):
        NO_TIMELINE.mark(1.0)
    assert NO_TIMELINE.arrivals == []
    stats = GenerationStats()
    NO_TIMELINE.finish(stats, kv_used=0)
    assert stats == GenerationStats() and not stats.timed


def test_prefix_cache_counts_new_inserts_only():
    from engine.kv.prefix_cache import PrefixCache

    cache = PrefixCache(budget_bytes=10_000, block=4)
    assert cache.insert(list(range(8)), lambda: "state", lambda s: 100)
    assert cache.insert(list(range(8)), lambda: "state", lambda s: 100)   # already there: refreshed, not new
    assert cache.insert(list(range(12)), lambda: "state", lambda s: 100)
    assert not cache.insert(list(range(4)), lambda: "state", lambda s: 20_000)  # could never fit
    assert cache.inserts == 2 and cache.stats()["inserts"] == 2


def test_stats_as_dict_carries_the_timeline_as_json():
    d = json.loads(json.dumps(_sample_timeline().as_dict()))
    assert d["timed"] and d["step_ms"] == [6.123, 7.5, 12.25] and d["forward_ms"] == 25.0
    assert GenerationStats.from_dict(d).slowest_step == 2
    assert GenerationStats().as_dict()["timed"] is False and not has_timeline(GenerationStats().as_dict())


def test_live_figures_come_from_the_record_as_the_loop_keeps_it():
    st = GenerationStats(generated_tokens=5, decode_ms=40.0, ttft_ms=12.0)
    assert st.live() == {"tokens": 5, "tok_s": 100.0, "ttft_ms": 12.0}
    assert GenerationStats(generated_tokens=1, ttft_ms=3.0).live() == {"tokens": 1, "tok_s": 0.0, "ttft_ms": 3.0}


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
    st = tl = final.stats
    assert tl.timed and tl.generated_tokens == st.generated_tokens == 32
    assert all(v >= 0 for v in tl.parts().values()) and tl.template_ms > 0 and tl.tokenize_ms > 0
    # The named parts add up to the time the caller measured around the whole reply.
    assert sum(tl.parts().values()) == pytest.approx(wall_ms, rel=0.05)
    assert tl.e2e_ms == pytest.approx(st.e2e_ms) and tl.e2e_ms <= wall_ms
    # One step per token after the first; together they are the decode span.
    assert len(tl.step_ms) == 31 and sum(tl.step_ms) == pytest.approx(st.decode_ms, rel=1e-6)
    assert tl.forward_ms + tl.sampling_ms + tl.detokenize_ms >= sum(tl.step_ms) * 0.999
    for q, got in ((50, tl.tpot_p50_ms), (90, tl.tpot_p90_ms), (99, tl.tpot_p99_ms)):
        assert got == pytest.approx(percentile(tl.step_ms, q))
    assert tl.tpot_p50_ms <= tl.tpot_p90_ms <= tl.tpot_p99_ms <= tl.slowest_step_ms == max(tl.step_ms)
    assert tl.cached_tokens == st.cached_tokens and tl.prompt_tokens == st.prompt_tokens
    assert tl.prefill_tokens == st.prompt_tokens - st.cached_tokens
    assert tl.prefill_tok_s == pytest.approx(tl.prefill_tokens / (tl.prefill_ms / 1e3))
    assert tl.kv_used == st.prompt_tokens + 31 and tl.n_ctx == 2048  # the last token is never fed back
    assert tl.ttft_ms == st.ttft_ms and tl.spec_acceptance == []


def test_every_delta_carries_the_engines_live_figures(engine):
    engine.reset()
    seen = []
    for ev in engine.stream(QUESTION, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)):
        if ev.kind == "delta":
            seen.append(ev.stats.live())  # what the window's status bar shows while the reply streams
        final = ev
    tokens = [s["tokens"] for s in seen]
    assert seen and tokens == sorted(tokens) and 0 < tokens[-1] <= final.stats.generated_tokens == 16
    assert all(s["ttft_ms"] == pytest.approx(final.stats.ttft_ms) for s in seen)
    assert final.stats.decode_tok_s > 0
    assert final.stats.live()["tok_s"] == pytest.approx(final.stats.decode_tok_s, rel=1e-6)


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
    assert a2.stats.cached_tokens >= a1.stats.prompt_tokens
    assert a2.stats.prefill_tokens < a2.stats.prompt_tokens - a1.stats.prompt_tokens + 32
    # Another chat in between: its request snapshots this one's KV into the prefix cache...
    other, _ = _reply(engine, [{"role": "user", "content": "Say something about owls."}], **greedy)
    assert other.stats.cache_inserts == 1 and other.stats.cache_hits == 0
    # ... and coming back to the first chat is a prefix-cache hit.
    turn3 = turn2 + [{"role": "assistant", "content": a2.text}, {"role": "user", "content": "Thanks."}]
    back, _ = _reply(engine, turn3, **greedy)
    tl = back.stats
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
    st = tl = final.stats
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
    assert not off.stats.timed and off.stats.as_dict()["timed"] is False and off.stats.step_ms == []
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
    back = GenerationStats.from_dict(again.metrics)
    assert back == GenerationStats.from_dict(final.stats.as_dict()) and back.timed
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
    tl = GenerationStats.from_dict(stored.metrics)
    assert tl.timed and tl.generated_tokens == stored.metrics["generated_tokens"] > 0
    assert len(tl.step_ms) == tl.generated_tokens - 1 and tl.prompt_tokens == stored.metrics["prompt_tokens"]
    assert tl.e2e_ms == pytest.approx(stored.metrics["e2e_ms"], abs=0.01) and tl.prefill_ms > 0


def test_a_scheduled_reply_counts_its_queue_wait(engine):
    from engine.serve import Priority, Scheduler, ServeRequest
    from engine.prompt.messages import Message

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
        live = []
        for ev in waiting.events():
            if ev.kind == "delta" and ev.stats is not None:
                live.append(ev.stats.live()["ttft_ms"])
            final = ev
        t_end = perf_counter()
    finally:
        sched.close()
    tl = final.stats
    assert tl.queue_wait_ms == pytest.approx(waiting.times.queue_wait_s * 1e3) and tl.queue_wait_ms > 0
    # One TTFT and one end-to-end, the wait in both (the status bar's figure too), counted once.
    assert tl.ttft_ms > tl.queue_wait_ms and tl.e2e_ms > tl.queue_wait_ms
    assert tl.e2e_ms <= (t_end - waiting.submitted) * 1e3
    assert tl.e2e_ms == pytest.approx(sum(tl.parts().values()) + tl.other_ms)
    # The live TTFT the window shows while the reply streams includes it as well.
    assert live and all(t == pytest.approx(tl.ttft_ms) for t in live)
