"""The engine core on the real bundled model: one step loop for every request.

Exactness (a sequence's tokens are the same alone and beside 1 or 3 others, with and without
speculation, on the bundled Q4_1 and a K-quant), priorities (the window within one prompt
chunk of an API prompt in progress, an interactive request before a background one, aging,
a maximum wait that ends in QueueTimeout), and the features every request gets (the thinking
budget, speculation and the disk prefix cache reach API-priority requests too).
"""
from __future__ import annotations

import threading
import time

import pytest

from engine.config import EngineConfig
from engine.core.job import Priority, QueueTimeout
from engine.core.schedule import Share, Want, effective, plan_step
from engine.engine import Engine
from engine.prompt.messages import Message
from engine.types import SamplingParams

QUESTIONS = ["Name three fruits.", "What is 7 times 8?", "Write a haiku about rain.", "Say hi to Bob."]
ENDLESS = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)


def final_of(events) -> object:
    evs = list(events)
    assert evs[-1].kind == "final"
    return evs[-1]


def params_for(i: int) -> SamplingParams:
    # Greedy and sampled replies both: a seeded sampler draws the same tokens alone and batched.
    return SamplingParams(temperature=0.0 if i % 2 == 0 else 0.8, seed=11 + i, max_tokens=28, ignore_eos=True)


def together(engine: Engine, n: int, priority: int = Priority.INTERACTIVE) -> list[list[int]]:
    """The first ``n`` questions at once, each read on its own thread; their token ids in order."""
    out: list[list[int] | None] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            ev = final_of(engine.stream([Message("user", QUESTIONS[i])], params_for(i), priority=priority))
            out[i] = list(ev.token_ids)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return [o for o in out if o is not None]


@pytest.fixture(scope="module", params=["bundled", "kquant"])
def pooled(request, bundled_path, kquant_path):
    path = bundled_path if request.param == "bundled" else kquant_path
    e = Engine.open(EngineConfig(path, n_ctx=512, n_threads=2, cache_budget=0))
    e.set_parallel(4, window=False)
    assert e.n_seq == 4
    yield e
    e.close()


@pytest.mark.parametrize("spec", ["none", "ngram", "model"])
def test_a_sequence_is_the_same_alone_and_beside_one_or_three_others(pooled, spec):
    draft = pooled.backend.describe().path if spec == "model" else spec
    pooled.set_speculation(draft, k=4, force=True)
    try:
        alone = [final_of(pooled.stream([Message("user", q)], params_for(i))).token_ids
                 for i, q in enumerate(QUESTIONS)]
        assert together(pooled, 1) == alone[:1]
        assert together(pooled, 2) == alone[:2]
        assert together(pooled, 4) == alone[:4]
    finally:
        pooled.set_speculation("none")


def test_every_request_gets_speculation_and_the_stats_say_so(pooled):
    pooled.set_speculation("ngram", k=4, force=True)
    try:
        text = "Repeat after me exactly: the quick brown fox jumps over the lazy dog, the quick brown fox."
        ev = final_of(pooled.stream([Message("user", text)], SamplingParams(temperature=0, max_tokens=40),
                                    priority=Priority.BACKGROUND))
        assert ev.stats.spec is not None and ev.stats.spec["drafted"] > 0
    finally:
        pooled.set_speculation("none")


# -- priorities -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, cache_budget=0))
    e.set_parallel(1, window=True)  # the window's sequence and one for everybody else
    yield e
    e.close()


def state_of(engine: Engine, priority: int) -> dict:
    (r,) = [r for r in engine.core.requests() if r["priority"] == priority]
    return r


def test_the_window_starts_within_one_chunk_of_an_api_prompt_being_read(served):
    long = " ".join(f"Line {i}: the inventory of aisle {i} lists hammers, nails and glue." for i in range(80))
    api = served.stream([Message("user", long)], SamplingParams(temperature=0, max_tokens=4),
                        priority=Priority.INTERACTIVE)
    deadline = time.monotonic() + 120
    while True:  # the API request's prompt is being read
        got = [r for r in served.core.requests() if r["priority"] == Priority.INTERACTIVE]
        if got and got[0]["state"] == "prompt" and got[0]["held"] > got[0]["cached"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    before = state_of(served, Priority.INTERACTIVE)["held"]
    window = served.stream([Message("user", "Hi!")], SamplingParams(temperature=0, max_tokens=4))
    first = next(window)
    at_first = state_of(served, Priority.INTERACTIVE)["held"]
    assert first.kind == "delta"
    # While the window's reply was read and its first token made, the API prompt moved by at most the
    # chunk that was in flight when the window arrived.
    assert at_first - before <= served.core.stepper.step_tokens
    assert state_of(served, Priority.INTERACTIVE)["state"] == "prompt"
    list(window)
    assert final_of(api).finish_reason == "max_tokens"


def test_an_interactive_request_overtakes_a_waiting_background_one_and_aging_lifts_the_background(served):
    served.core.stepper.aging_s = 1e6  # no aging while this runs, however slow the machine
    blocker = served.stream([Message("user", "Count to a million.")], ENDLESS, priority=Priority.BACKGROUND)
    assert next(blocker).kind == "delta"
    started: list[str] = []

    def run(name: str, priority: int) -> None:
        ev = final_of(served.stream([Message("user", f"Say {name}.")], SamplingParams(temperature=0, max_tokens=3),
                                    priority=priority))
        started.append(name)
        assert ev.finish_reason == "max_tokens"

    bg = threading.Thread(target=run, args=("background", Priority.BACKGROUND))
    bg.start()
    while len(served.core.requests()) < 2:
        time.sleep(0.01)
    fg = threading.Thread(target=run, args=("interactive", Priority.INTERACTIVE))
    fg.start()
    while len(served.core.requests()) < 3:
        time.sleep(0.01)
    blocker.close()  # the one API sequence frees: the interactive request goes first
    bg.join(120)
    fg.join(120)
    served.core.stepper.aging_s = 15.0
    assert started == ["interactive", "background"]
    # A background request that waited long enough ranks with interactive ones (never above them).
    assert effective(Priority.BACKGROUND, 0.0) == Priority.BACKGROUND
    assert effective(Priority.BACKGROUND, 100.0) == Priority.INTERACTIVE
    assert effective(Priority.WINDOW, 100.0) == Priority.WINDOW


def test_a_request_waiting_past_its_maximum_ends_with_queue_timeout(served):
    blocker = served.stream([Message("user", "Count to a million.")], ENDLESS, priority=Priority.INTERACTIVE)
    assert next(blocker).kind == "delta"
    late = served.stream([Message("user", "Hello?")], SamplingParams(temperature=0, max_tokens=3),
                         priority=Priority.INTERACTIVE, max_wait_s=0.3)
    with pytest.raises(QueueTimeout) as err:
        list(late)
    assert err.value.retry_after_s >= 1.0
    blocker.close()
    assert served.core.wait_idle(60)


def test_the_window_takes_the_one_sequence_and_the_preempted_request_goes_on_exactly(bundled_path):
    # One sequence (the transformers backend's case; here llama.cpp's context with one): a window request
    # arriving while an API request decodes takes its sequence; the API request waits, gets its tokens
    # back, and ends exactly as it would have alone.
    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2))
    try:
        assert e.n_seq == 1
        api_params = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
        q = [Message("user", "Tell me about the sea.")]
        alone = final_of(e.stream(q, api_params, priority=Priority.INTERACTIVE)).token_ids
        win_q = [Message("user", "Say hi.")]
        win_alone = final_of(e.stream(win_q, SamplingParams(temperature=0.0, max_tokens=8))).token_ids
        e.reset()
        e.cache.clear()
        api = e.stream(q, api_params, priority=Priority.INTERACTIVE)
        for _ in range(5):
            assert next(api).kind == "delta"
        win = e.stream(win_q, SamplingParams(temperature=0.0, max_tokens=8))
        assert next(win).kind == "delta"
        assert [r["state"] for r in e.core.requests() if r["priority"] == Priority.INTERACTIVE] == ["preempted"]
        window = final_of(win)
        assert window.token_ids == win_alone
        rest = final_of(api)
        assert rest.token_ids == alone and rest.finish_reason == "max_tokens"
    finally:
        e.close()


# -- the rules, on hand-made wants ---------------------------------------------------------------------


def test_the_step_plan_runs_decodes_whole_then_prompts_by_priority_shortest_first():
    wants = [Want("w-decode", 0, 1, False, True), Want("a-decode", 1, 5, False, False),
             Want("long", 1, 900, True, False, order=1), Want("short", 1, 40, True, False, order=2),
             Want("bg", 2, 10, True, False, order=0)]
    fit = lambda key, n: n  # noqa: E731 - no images
    rows = plan_step(wants, 256, others_decode=True, others_prompts=True, fit=fit)
    assert rows == [("w-decode", 1), ("a-decode", 5), ("short", 40), ("long", 210)]
    # The window in flight: others' prompts wait, others' decodes only when the share allows.
    rows = plan_step(wants, 256, others_decode=False, others_prompts=False, fit=fit)
    assert rows == [("w-decode", 1)]


def test_the_share_holds_others_to_a_tenth_of_the_window():
    s = Share(0.1)
    assert s.allows(True) is False  # the window's first step runs alone: it measures a step
    s.record(0.010, window=True, others=False)
    assert s.allows(True)
    s.record(0.030, window=True, others=True)  # others cost 20 ms beyond the window's 10
    assert s.others_s == pytest.approx(0.020) and not s.allows(True)
    for _ in range(20):
        s.record(0.010, window=True, others=False)
    assert s.allows(True)
    assert s.allows(False)  # no window: everyone, and the account starts again
    assert s.window_s == 0.0


def test_a_decode_beside_a_prompt_chunk_is_charged_its_rows_share_of_the_step(bundled_path):
    """Compute.spent_s: a step's seconds split by rows. A one-token decode in the same step as another
    request's 256-token prompt chunk waits for the whole step but is charged 1/257 of it, and the
    chunk the rest: what a speculative round learns its cost from (tests/test_speculative.py)."""
    from engine.core.job import Job
    from engine.types import WANT_LAST, WANT_NONE, Compute

    e = Engine.open(EngineConfig(bundled_path, n_ctx=2048, n_threads=2, cache_budget=0))
    e.set_parallel(2, window=False)
    words = e.backend.tokenize(" ".join(["hearth"] * 1200), add_bos=True)[:1100]
    seen: dict[str, list[tuple[float, float]]] = {"reader": [], "decoder": []}

    def pipeline(name: str, prompt: list[int], decodes: int):
        def make(lease):
            def steps():
                todo = [Compute(prompt[lease.cached:], WANT_NONE if decodes else WANT_LAST, prompt=True)]
                todo += [Compute([prompt[-1]]) for _ in range(decodes)]
                for c in todo:
                    t0 = time.perf_counter()
                    yield c
                    seen[name].append((c.spent_s, time.perf_counter() - t0))
            return steps()
        return Job(prompt, make, priority=Priority.INTERACTIVE)

    try:
        reader = e.core.submit(pipeline("reader", words, 0))
        decoder = e.core.submit(pipeline("decoder", words[:3], 12))
        list(decoder.events())
        list(reader.events())
    finally:
        e.close()
    (chunk_spent, chunk_wall), = seen["reader"]
    assert 0 < chunk_spent <= chunk_wall
    decodes = seen["decoder"][1:]
    assert all(0 < s <= w for s, w in decodes), decodes
    # Beside a chunk, a decode waited the whole step and was charged a sliver of it.
    assert any(w > 20 * s for s, w in decodes), decodes
    assert sum(s for s, _ in decodes) < chunk_spent
