"""The serving scheduler on the real bundled model: queue limit, priorities,
cancel, grammars, raw completions and the per-request times."""
from __future__ import annotations

import json

import pytest

from engine.errors import HearthError, PromptTooLongError
from engine.serve import Priority, QueueFull, Scheduler, ServeRequest
from engine.prompt.messages import Message
from engine.types import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
ENDLESS = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)


def chat(text: str, params: SamplingParams = GREEDY, **kw) -> ServeRequest:
    return ServeRequest(messages=[Message("user", text)], params=params, **kw)


def drain(ticket):
    events = list(ticket.events())
    assert events[-1].kind == "final"
    return events


@pytest.fixture
def sched(engine):
    s = Scheduler(engine, parallel=1, queue_limit=2)
    yield s
    s.close()


def start_blocker(sched):
    """A request that runs until cancelled, started for sure (its first delta arrived)."""
    t = sched.submit(chat("Count from one to a million.", ENDLESS))
    it = t.events()
    assert next(it).kind == "delta"
    return t, it


def test_one_request_streams_like_the_engine(engine, sched):
    msgs = [Message("user", "What is the capital of France?")]
    solo = list(engine.stream(msgs, GREEDY))[-1]
    events = drain(sched.submit(ServeRequest(messages=msgs, params=GREEDY)))
    final = events[-1]
    assert final.text == solo.text and final.token_ids == solo.token_ids
    assert "".join(e.text for e in events[:-1]) == final.text


def test_times_are_recorded(sched):
    t = sched.submit(chat("Say hello.", SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)))
    final = drain(t)[-1]
    assert t.done and t.times.finish_reason == "length"
    assert t.times.completion_tokens == 8 == final.stats.generated_tokens
    assert t.times.prompt_tokens == final.stats.prompt_tokens > 0
    assert t.times.queue_wait_s >= 0 and t.times.prefill_s > 0 and t.times.decode_s > 0
    assert sched.stats()["served"] >= 1


def test_a_reader_that_stops_at_the_final_event_still_ends_its_request(sched):
    # The API's reader thread stops as soon as the reply is counted, without asking for more after the
    # final event: the request must end there (served, its slot free), not hang as if still running.
    served = sched.stats()["served"]
    t = sched.submit(chat("Say hello.", SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)))
    events = t.events()
    final = next(ev for ev in events if ev.kind == "final")
    assert not t.done  # the reader may still ask for the end...
    events.close()     # ...but it leaves here
    assert t.done and t.times.finish_reason == "length" and final.stats.generated_tokens == 4
    assert t.wait(5) and sched.stats()["served"] == served + 1


def test_queue_limit_raises_queue_full_with_retry_after(sched):
    blocker, rest = start_blocker(sched)
    waiting = [sched.submit(chat(f"Question {i}")) for i in range(2)]
    with pytest.raises(QueueFull) as err:
        sched.submit(chat("One too many"))
    assert err.value.retry_after_s >= 1.0
    # The window is never refused: its reply is not an API request, and it has a sequence of its own.
    window = sched.submit(chat("Window", priority=Priority.WINDOW, params=ENDLESS))
    wit = window.events()
    assert next(wit).kind == "delta"  # it started at once
    assert sched.stats()["queued"] == 2 and sched.stats()["running"] == 2
    window.cancel()
    blocker.cancel()
    for t in waiting:
        drain(t)
    assert list(wit)[-1].finish_reason == "cancelled"
    assert list(rest)[-1].finish_reason == "cancelled"
    assert blocker.times.finish_reason == "cancelled"


def test_window_goes_before_queued_api_requests_which_run_in_order(sched):
    blocker, rest = start_blocker(sched)
    api = [sched.submit(chat(f"API question {i}")) for i in range(2)]
    window = sched.submit(chat("The window's question", priority=Priority.WINDOW))
    blocker.cancel()
    list(rest)
    for t in [window, *api]:
        drain(t)
    assert window.started < api[0].started < api[1].started
    assert window.times.queue_wait_s < api[1].times.queue_wait_s


def test_cancel_a_queued_request_never_starts_it(sched):
    blocker, rest = start_blocker(sched)
    queued = sched.submit(chat("Never mind"))
    queued.cancel()
    blocker.cancel()
    final = drain(queued)[-1]
    assert final.finish_reason == "cancelled" and final.text == "" and final.token_ids == []
    assert queued.times.finish_reason == "cancelled" and queued.times.prompt_tokens == 0
    list(rest)


def test_cancel_a_running_request_stops_it_and_the_next_runs(sched):
    blocker, rest = start_blocker(sched)
    after = sched.submit(chat("What is 2 + 2?"))
    blocker.cancel()
    final = list(rest)[-1]
    assert final.finish_reason == "cancelled" and blocker.times.finish_reason == "cancelled"
    assert 1 <= blocker.times.completion_tokens < 100_000
    assert drain(after)[-1].finish_reason in ("eos", "max_tokens")


def test_prompt_too_long_is_a_clear_error_and_the_scheduler_goes_on(sched):
    t = sched.submit(chat("word " * 3000))
    with pytest.raises(PromptTooLongError):
        list(t.events())
    assert t.times.finish_reason == "error"
    assert drain(sched.submit(chat("Still there?")))[-1].kind == "final"


def test_raw_prompt_completion_continues_the_text(engine, sched):
    t = sched.submit(ServeRequest(prompt="The capital of France is", params=GREEDY))
    final = drain(t)[-1]
    assert final.text and t.times.prompt_tokens == len(engine.backend.tokenize(
        "The capital of France is", add_bos=engine.backend.add_bos, special=True))


def test_json_grammar_gives_parseable_json(sched):
    from llama_cpp.llama_grammar import JSON_GBNF

    params = SamplingParams(temperature=0.0, max_tokens=200)
    t = sched.submit(chat("Describe a cat as a JSON object with a name and an age.", params, grammar=JSON_GBNF))
    final = drain(t)[-1]
    assert final.finish_reason == "eos", final.text
    value = json.loads(final.text)
    assert isinstance(value, (dict, list))


def test_a_bad_grammar_is_a_clear_error(sched):
    t = sched.submit(chat("Hi", grammar="root ::= (((("))
    with pytest.raises(HearthError, match="grammar"):
        list(t.events())
    assert drain(sched.submit(chat("Hi")))[-1].kind == "final"


def test_bad_requests_are_refused_at_the_edge():
    with pytest.raises(HearthError):
        ServeRequest()
    with pytest.raises(HearthError):
        ServeRequest(messages=[Message("user", "a")], prompt="b")
    with pytest.raises(HearthError, match="context policy"):
        ServeRequest(prompt="a", context_policy="truncate")


def test_close_cancels_queued_and_running_requests(engine):
    s = Scheduler(engine, parallel=1, queue_limit=4)
    blocker, rest = start_blocker(s)
    queued = s.submit(chat("Later"))
    s.close()
    assert list(rest)[-1].finish_reason == "cancelled"
    assert drain(queued)[-1].finish_reason == "cancelled"
    with pytest.raises(HearthError, match="closed"):
        s.submit(chat("After close"))


def test_a_backend_without_batching_serves_api_requests_one_at_a_time_in_order(tmp_path):
    pytest.importorskip("torch")
    from tiny_hf import make_tiny_model

    from engine.engine import Engine
    from engine.config import EngineConfig

    folder = make_tiny_model(tmp_path / "tiny-llama")
    eng = Engine.open(EngineConfig(folder, backend="hf", device="cpu", n_ctx=256, n_threads=1))
    s = Scheduler(eng, parallel=4, queue_limit=4)
    try:
        assert not s.batching
        params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
        reqs = [chat(f"The sea {i}", params) for i in range(3)]
        expected = [list(eng.stream(r.messages, params, context_policy="stop"))[-1].token_ids for r in reqs]
        blocker = s.submit(chat("The lighthouse", ENDLESS))
        it = blocker.events()
        next(it)
        tickets = [s.submit(r) for r in reqs]
        window = s.submit(chat("The wind", params, priority=Priority.WINDOW))
        assert s.stats()["running"] == 1
        blocker.cancel()
        list(it)
        got = [drain(t)[-1].token_ids for t in tickets]
        drain(window)
        assert got == expected
        assert window.started < tickets[0].started < tickets[1].started < tickets[2].started
        with pytest.raises(HearthError, match="llama.cpp"):
            list(s.submit(chat("json please", params, grammar="root ::= \"a\"")).events())
    finally:
        s.close()
        eng.close()
