"""Continuous batching on the real bundled model: a sequence's greedy output
is the same alone and beside others, shared system prompts are computed once,
cancel frees the slot, and the window goes first."""
from __future__ import annotations

import pytest

from engine.errors import PromptTooLongError
from engine.serve import Priority, Scheduler, ServeRequest
from engine.prompt.messages import Message
from engine.types import SamplingParams

SYSTEM = ("You are a careful assistant for a small hardware shop. Answer briefly, name the aisle where the "
          "item is kept, mention the opening hours (nine to six on weekdays, ten to four on Saturdays), and "
          "never promise a delivery date. ") * 3
ENDLESS = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)


def greedy(n: int = 16, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, **kw)


def chat(text: str, params: SamplingParams, system: str | None = None, **kw) -> ServeRequest:
    msgs = ([Message("system", system)] if system else []) + [Message("user", text)]
    return ServeRequest(messages=msgs, params=params, **kw)


def solo(engine, req: ServeRequest):
    final = list(engine.stream(req.messages, req.params, context_policy="stop"))[-1]
    return final.token_ids, final.text


def finals(ticket):
    events = list(ticket.events())
    assert events[-1].kind == "final"
    return events[-1]


@pytest.fixture
def sched(engine):
    s = Scheduler(engine, parallel=4, queue_limit=8)
    assert s.batching
    yield s
    s.close()


def test_concurrent_requests_equal_their_solo_runs(engine, sched):
    reqs = [chat("Name three fruits.", greedy(24)),
            chat("What is 7 times 8?", greedy(12)),
            chat("Write a haiku about rain.", SamplingParams(temperature=0.8, seed=7, max_tokens=20)),
            chat("Say hi.", greedy(20, stop=("!",)))]
    expected = [solo(engine, r) for r in reqs]
    # A long request runs beside all of them, so every token is computed in a shared batch.
    long = sched.submit(chat("Tell me a long story.", ENDLESS))
    it = long.events()
    assert next(it).kind == "delta"
    tickets = [sched.submit(r) for r in reqs]
    got = [finals(t) for t in tickets]
    for (ids, text), final in zip(expected, got):
        assert final.token_ids == ids and final.text == text
    for _ in range(24):
        assert next(it).kind == "delta"
    long.cancel()
    final = list(it)[-1]
    assert final.finish_reason == "cancelled" and long.times.finish_reason == "cancelled"
    n = len(final.token_ids)
    assert n > 20
    ids, _ = solo(engine, chat("Tell me a long story.", SamplingParams(temperature=0.0, max_tokens=n,
                                                                       ignore_eos=True)))
    assert final.token_ids == ids


def test_a_shared_system_prompt_is_computed_once(engine, sched):
    shared = len(engine.prompts.shared_system_tokens([Message("system", SYSTEM)]))
    assert shared > 100
    first = sched.submit(chat("Where are the hammers?", greedy(8), SYSTEM))
    f1 = finals(first)
    # Not cached before (what another sequence holds of the template's own opening may be shared).
    assert first.times.cached_tokens < 16 and f1.stats.prefill_tokens == f1.stats.prompt_tokens - f1.stats.cached_tokens
    # Two more arrive together: each reads only its own question.
    reqs = [chat("Do you sell paint?", greedy(8), SYSTEM), chat("Are you open on Sunday?", greedy(8), SYSTEM)]
    tickets = [sched.submit(r) for r in reqs]
    for r, t in zip(reqs, tickets):
        final = finals(t)
        assert t.times.cached_tokens >= shared
        assert final.stats.cached_tokens == t.times.cached_tokens
        assert final.stats.prefill_tokens == final.stats.prompt_tokens - t.times.cached_tokens
        assert final.token_ids == solo(engine, r)[0]


def test_requests_arriving_together_compute_a_new_system_prompt_once(engine, sched):
    system = SYSTEM.replace("hardware", "garden")
    shared = len(engine.prompts.shared_system_tokens([Message("system", system)]))
    reqs = [chat(f"Question number {i}: do you have rakes?", greedy(6), system) for i in range(3)]
    tickets = [sched.submit(r) for r in reqs]
    got = [finals(t) for t in tickets]
    cached = sorted(t.times.cached_tokens for t in tickets)
    assert cached[0] < 16 and cached[1] >= shared and cached[2] >= shared
    for r, final in zip(reqs, got):
        assert final.token_ids == solo(engine, r)[0]


def test_cancel_a_running_request_frees_its_sequence(engine, sched):
    t = sched.submit(chat("Count to a thousand.", ENDLESS))
    it = t.events()
    assert next(it).kind == "delta"
    t.cancel()
    assert list(it)[-1].finish_reason == "cancelled"
    after = sched.submit(chat("Hello?", greedy(4)))
    finals(after)
    assert sched.wait_idle(60) and engine.core.wait_idle(60)
    assert engine.core.requests() == []  # both sequences are free again
    # Each sequence keeps its own KV stream for the next prompt to share (the cancelled one's
    # too, up to what it computed), and the record of what each holds is the truth.
    pool = engine.kv.pool
    assert [pool.seq_len(s) for s in range(pool.n_seq)] == [engine.kv.table.held(s) for s in range(pool.n_seq)]


def test_a_reader_that_leaves_frees_the_slot(engine, sched):
    t = sched.submit(chat("Count to a thousand.", ENDLESS))
    it = t.events()
    next(it)
    it.close()  # a client disconnect: the stream is abandoned without cancel()
    assert t.cancel_flag.is_set()
    finals(sched.submit(chat("Still serving?", greedy(4))))
    assert sched.wait_idle(60) and engine.core.wait_idle(60)
    assert engine.core.load()["running"] == 0


def test_a_prompt_too_long_for_a_slot_fails_alone(engine, sched):
    long = sched.submit(chat("Count to a thousand.", ENDLESS))
    it = long.events()
    next(it)
    bad = sched.submit(chat("word " * (engine.n_ctx + 10), greedy(4)))
    with pytest.raises(PromptTooLongError, match=str(engine.n_ctx)):
        list(bad.events())
    assert bad.times.finish_reason == "error"
    assert all(next(it).kind == "delta" for _ in range(5))  # the other request goes on
    long.cancel()
    list(it)


def test_the_window_goes_first_and_api_prompts_wait_while_it_streams(engine, sched):
    window = sched.submit(chat("Tell me about the sea.", ENDLESS, priority=Priority.WINDOW))
    wit = window.events()
    assert next(wit).kind == "delta"
    req = chat("What is the capital of Italy?", greedy(10))
    api = sched.submit(req)
    for _ in range(12):
        assert next(wit).kind == "delta"
    # The API request holds a sequence, but its prompt is not read while the window streams.
    (mine,) = [r for r in engine.core.requests() if r["priority"] != Priority.WINDOW]
    assert mine["state"] == "prompt" and mine["held"] == mine["cached"] < mine["prompt_tokens"]
    assert api.times.prefill_s == 0.0
    window.cancel()
    assert list(wit)[-1].finish_reason == "cancelled"
    assert finals(api).token_ids == solo(engine, req)[0]


def test_a_grammar_on_the_window_path(sched):
    import json

    from llama_cpp.llama_grammar import JSON_GBNF

    t = sched.submit(chat("Describe a cat as a JSON object with a name and an age.", greedy(200), grammar=JSON_GBNF,
                          priority=Priority.WINDOW))
    final = finals(t)
    assert final.finish_reason == "eos" and isinstance(json.loads(final.text), (dict, list))
