"""Speculative decoding through the engine on the real bundled model:
greedy output equals plain decoding until the context is full, stops and
cancel inside an accepted run, and the automatic choice of draft."""
from __future__ import annotations

import threading
import time

import pytest

from engine.engine import Engine
from engine.config import EngineConfig
from engine.prompt.messages import Message
from engine.types import SamplingParams

# -- the real bundled model ----------------------------------------------------------

Q = [Message("user", "List the days of the week, then list them again in reverse order.")]


def collect(engine, params, messages=Q, cancel=None, on_delta=None):
    deltas = []
    # "stop": a reply that fills the context ends there, which these tests compare up to (under the
    # other policies it goes on past it: tests/test_context_shift.py)
    for ev in engine.stream(messages, params, cancel=cancel, context_policy="stop"):
        if ev.kind == "delta":
            deltas.append(ev.text)
            if on_delta:
                on_delta(len(deltas))
        else:
            return deltas, ev


@pytest.fixture(scope="module")
def pair(bundled_path):
    """The bundled model drafting for itself (every draft accepted) in a small
    context that fills up, plus a plain reference engine."""
    plain = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2, cache_budget=0))
    spec = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2, cache_budget=0))
    spec.set_speculation(str(bundled_path), force=True)
    yield plain, spec
    spec.close()
    plain.close()


FILL = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)


@pytest.fixture(scope="module")
def plain_fill(pair):
    plain, _ = pair
    plain.reset()
    return collect(plain, FILL)[1]


@pytest.mark.parametrize("kind,k", [("model", 1), ("model", 4), ("model", 8), ("ngram", 1), ("ngram", 2),
                                    ("ngram", 3), ("ngram", 5), ("ngram", 6), ("ngram", 7), ("ngram", 8)])
def test_greedy_identical_on_bundled_model_until_context_full(pair, plain_fill, kind, k):
    _, spec = pair
    spec.set_speculation(kind, k=k, force=True)
    spec.reset()
    _, ev = collect(spec, FILL)
    assert plain_fill.finish_reason == ev.finish_reason == "context_full"
    assert ev.token_ids == plain_fill.token_ids
    assert ev.stats.spec["drafted"] > 0
    if kind == "model":  # a model drafting for itself is always right
        assert ev.stats.spec["acceptance_rate"] == 1.0
        assert ev.stats.spec["target_passes_per_token"] < 1 / k + 0.1


def test_one_reply_drafting_from_both_the_ngram_lookup_and_the_model_is_exact_until_context_full(pair, plain_fill):
    # Every n-gram hit verified, the model drafting on the misses (bench's hybrid
    # row), then auto's gated form of it: both give exactly plain decoding's tokens.
    _, spec = pair
    from engine.speculative.controller import SpecController

    for ctl in (SpecController(["model"], free="ngram", gated=False), SpecController(["model"], free="ngram")):
        spec.spec_kind, spec.spec_ctl = "auto", ctl
        spec.reset()
        spec.draft.reset()
        _, ev = collect(spec, FILL)
        assert plain_fill.finish_reason == ev.finish_reason == "context_full"
        assert ev.token_ids == plain_fill.token_ids
        modes = ev.stats.spec["tokens_by_mode"]
        assert sum(modes.values()) == ev.stats.generated_tokens
        assert sum(ev.stats.spec["rounds_by_mode"].values()) <= ev.stats.generated_tokens
        if not ctl.gated:
            assert modes.get("ngram", 0) > 0 and modes.get("model", 0) > 0


@pytest.mark.parametrize("kind,k", [("model", 3), ("ngram", 4)])
def test_greedy_identical_on_a_kquant_model(kquant_path, kind, k):
    """Q4_K_M weights (the kind most downloaded GGUFs use): verification batches
    give the same tokens as plain decoding, as on the bundled Q4_1 model."""
    plain = Engine.open(EngineConfig(kquant_path, n_ctx=256, n_threads=2, cache_budget=0))
    spec = Engine.open(EngineConfig(kquant_path, n_ctx=256, n_threads=2, cache_budget=0))
    try:
        spec.set_speculation(str(kquant_path) if kind == "model" else kind, k=k, force=True)
        _, ref = collect(plain, FILL)
        _, ev = collect(spec, FILL)
        assert ev.token_ids == ref.token_ids and ev.finish_reason == "context_full"
        assert ev.stats.spec["accepted"] > 0
    finally:
        spec.close()
        plain.close()


def test_stops_inside_an_accepted_run_truncate_exactly(pair):
    plain, spec = pair
    spec.set_speculation("model", k=8, force=True)
    g = SamplingParams(temperature=0.0, max_tokens=60)
    plain.reset()
    _, ref = collect(plain, g)
    # max_tokens lands in the middle of the first 9-token run.
    spec.reset()
    _, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=5))
    assert ev.token_ids == ref.token_ids[:5] and ev.finish_reason == "max_tokens"
    assert ev.stats.spec["drafted"] == 4  # not 8: no pass verifies drafts past max_tokens
    # A stop string inside a run: nothing past it is shown.
    words = ref.text.split()
    stop = words[len(words) // 2]
    spec.reset()
    d, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=60, stop=(stop,)))
    assert ev.finish_reason == "stop_string" and "".join(d) == ref.text[:ref.text.index(stop)]
    # EOS inside a run ends the reply where plain decoding ends it.
    spec.reset()
    _, ev = collect(spec, g)
    assert ev.token_ids == ref.token_ids and ev.finish_reason == ref.finish_reason
    # The KV never keeps tokens past what was emitted: the next reply equals a fresh one.
    _, again = collect(spec, g)
    assert again.token_ids == ref.token_ids


def test_cancel_in_the_middle_of_a_run(pair):
    plain, spec = pair
    spec.set_speculation("model", k=8, force=True)
    spec.reset()
    cancel = threading.Event()
    d, ev = collect(spec, SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True), cancel=cancel,
                    on_delta=lambda n: cancel.set() if n == 3 else None)
    # The engine core runs a step ahead of the reader: the round in flight when Stop came (at most its
    # k=8 drafts and one token more) still arrives, whole, and nothing after it.
    assert ev.finish_reason == "cancelled" and 3 <= len(d) <= 3 + 9
    assert ev.text == "".join(d)
    assert spec.backend.kv_len <= ev.stats.prompt_tokens + ev.stats.generated_tokens


def test_auto_holds_back_ngram_drafts_that_do_not_pay_and_says_so(bundled_path):
    # Free prose rarely continues an earlier n-gram, and verification costs
    # extra: auto must verify hits only rarely (probes), decode the rest plain,
    # say so, and give exactly the plain output.
    g = SamplingParams(temperature=0.0, max_tokens=160, ignore_eos=True)
    plain = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2, cache_budget=0))
    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2, cache_budget=0))
    try:
        prose = [Message("user", "Describe a quiet morning in a small fishing village.")]
        ref = collect(plain, g, prose)[1]
        e.set_speculation("auto")
        ctl = e.spec_ctl
        assert ctl.free == "ngram" and ctl.modes == ["plain"]
        # What earlier replies taught it: hits here are accepted 1 time in 50, whatever their match length.
        ctl._len_tries, ctl._len_acc = [50] * len(ctl._len_tries), [1] * len(ctl._len_acc)
        ctl._cost["ngram"] = [(2, 0.03)] * 8
        ctl._plain_s = [0.01] * 8
        # The rounds' cost is this test's, not the machine's: a plain step 10 ms, a verified draft 10 ms
        # more. With the wall clock, a loaded machine's slow plain steps made the 30 ms verify seeded
        # above look cheap, the gate opened, and the test failed in a busy full run.
        record = ctl.record

        def modeled(mode, drafted, accepted, produced, seconds, stats, fit_seconds=None, bucket=None, run=None):
            cost = 0.01 * (1 + drafted)
            return record(mode, drafted, accepted, produced, cost, stats, fit_seconds=cost, bucket=bucket, run=run)
        ctl.record = modeled
        _, ev = collect(e, g, prose)
        st = ev.stats.spec
        assert ev.token_ids == ref.token_ids
        assert st["tokens_by_mode"]["plain"] > 100
        assert st["drafted"] <= 2 * 8  # a few short probes at most
        assert any("ngram drafts held back" in n for n in st["notes"])
    finally:
        e.close()
        plain.close()


def test_auto_verifies_ngram_drafts_on_text_that_repeats(bundled_path):
    # A reply that copies its prompt: the lookup finds it and auto verifies
    # long drafts from the first round on; output exactly plain decoding's.
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau"
    msgs = [Message("user", f"Repeat exactly, three times: {text}")]
    g = SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)
    plain = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2, cache_budget=0))
    e = Engine.open(EngineConfig(bundled_path, n_ctx=1024, n_threads=2, cache_budget=0))
    try:
        ref = collect(plain, g, msgs)[1]
        e.set_speculation("auto")
        ev = collect(e, g, msgs)[1]
        assert ev.token_ids == ref.token_ids
        st = ev.stats.spec
        assert st["tokens_by_mode"].get("ngram", 0) > 0 and st["accepted"] > 0
        assert sum(st["tokens_by_mode"].values()) == ev.stats.generated_tokens
    finally:
        e.close()
        plain.close()


def test_auto_leaves_out_a_model_draft_that_cannot_pay_without_touching_the_conversation(bundled_path):
    # The bundled model drafting for itself: a draft step costs a whole target
    # step, so auto must not run it; measuring that must not disturb the KV.
    Q2 = Q + [Message("assistant", "Paris."), Message("user", "And of Spain?")]
    g = SamplingParams(temperature=0.0, max_tokens=24)
    plain = Engine.open(EngineConfig(bundled_path, n_ctx=512, n_threads=2))
    e = Engine.open(EngineConfig(bundled_path, n_ctx=512, n_threads=2, draft=str(bundled_path)))
    try:
        refs = [collect(plain, g, m)[1] for m in (Q, Q2)]
        e.set_speculation("none")
        first = collect(e, g, Q)[1]
        kv = e.backend.kv_len
        e.set_speculation("auto")  # measures here, mid-conversation
        assert e.backend.kv_len == kv and e.speculation.draft_costs is not None
        # ... and what a step and verifying 4 and 16 n-gram drafts cost, the line auto starts from
        step, verify = e.speculation.verify_costs
        assert step > 0 and sorted(verify) == [1, 4, 16] and min(verify.values()) > 0
        assert sorted(e.spec_ctl._cost["ngram"]) == sorted(verify.items()) and e.spec_ctl._plain_s == [step]
        assert "model" not in e.spec_ctl.modes and e.spec_ctl.free == "ngram"
        second = collect(e, g, Q2)[1]
        assert [first.token_ids, second.token_ids] == [r.token_ids for r in refs]
        assert any("model draft not used here" in n for n in second.stats.spec["notes"])
        assert second.stats.spec["tokens_by_mode"].get("model", 0) == 0
    finally:
        e.close()
        plain.close()


WAIT_S = 0.3  # what a round waits for other sequences' rows in its step (another request's prompt chunk)


def test_a_round_is_charged_for_its_own_rows_not_for_the_batch_it_waited_in(bundled_path):
    """In the engine core a round waits for every row of its step: beside another request's prompt
    chunk, a one-token step takes a second. The controller learns from the round's own share of the
    steps (Compute.spent_s) plus its own work, so a draft that pays is not retired for the session
    because of what another request was reading. A driver stands in for the core here: it computes
    each Compute on the real model, charges it that forward, then waits as if for other rows."""
    from engine.backends.base import SeqView
    from engine.decode.sampling import make_sampler
    from engine.speculative.controller import SpecController, SpecStats
    from engine.speculative.drafts import NgramDraft
    from engine.speculative.step import speculative_step
    from engine.types import Compute, WANT_ALL

    eng = Engine.open(EngineConfig(bundled_path, n_ctx=256, n_threads=2, cache_budget=0))

    def run() -> tuple[SpecController, list[float], int]:
        b = eng.backend
        view = SeqView(b, b.pool(), 0)
        ctl = SpecController(["ngram", "plain"], k_fixed=4, explore_rounds=2)
        prompt = b.tokenize("one two three four five one two three four five one two three four", add_bos=True)
        history = list(prompt)
        steps = speculative_step(view, {"ngram": NgramDraft()}, ctl, prompt, make_sampler(
            SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)), history, SpecStats())
        forwards, made = [], 0
        item = next(steps)
        while made < 16:
            if isinstance(item, Compute):
                t0 = time.perf_counter()
                logits = view.forward(item.tokens, all_logits=item.want == WANT_ALL)
                item.spent_s = time.perf_counter() - t0
                forwards.append(item.spent_s)
                time.sleep(WAIT_S)  # the other rows of the step
                item = steps.send(logits)
            else:
                made += 1
                item = next(steps)
        steps.close()
        return ctl, forwards, made

    try:
        ctl, forwards, _made = eng.core.call(run)
    finally:
        eng.close()
    rounds = ctl._cost["ngram"]
    assert rounds, "the n-gram draft was verified"
    assert ctl.rounds["plain"] >= 1  # both modes were measured
    slowest = max(forwards)
    # Each round cost its forward and a little own work, never the wait beside it.
    assert all(s < WAIT_S for _k, s in rounds), rounds
    assert all(s < slowest + WAIT_S / 2 for _k, s in rounds), (rounds, forwards)
    plain_rate = ctl.rate["plain"]
    assert plain_rate is not None and plain_rate > 1 / WAIT_S
    assert "ngram" not in ctl.retired


def test_a_model_draft_follows_a_preempted_reply_to_the_sequence_it_resumes_on(bundled_path):
    """A background reply preempted on one sequence resumes on another: its drafts must come from the draft
    model's sequence for the new one. Bound once, it went on drafting on its old draft sequence, which the
    request that took its sequence over drafts on too, and each re-read its whole history at every round."""
    from engine.core.job import Priority

    e = Engine.open(EngineConfig(bundled_path, n_ctx=512, n_threads=2, cache_budget=0))
    try:
        e.set_parallel(2, window=False)  # two sequences, neither kept for the window
        e.set_speculation(str(bundled_path), k=4, force=True)
        short = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
        long = SamplingParams(temperature=0.0, max_tokens=90, ignore_eos=True)
        asks = {name: [Message("user", f"{name}: tell me about the sea and the ships on it.")]
                for name in ("first", "background", "urgent")}
        first = e.stream(asks["first"], short, priority=Priority.INTERACTIVE)
        assert next(first).kind == "delta"
        background = e.stream(asks["background"], long, priority=Priority.BACKGROUND)
        for _ in range(3):
            assert next(background).kind == "delta"
        seqs = e.core.requests()
        was_on = {r["seq"] for r in e.core.requests() if r["priority"] == Priority.BACKGROUND}
        urgent = e.stream(asks["urgent"], long, priority=Priority.INTERACTIVE)  # no free sequence: preempts
        assert next(urgent).kind == "delta"
        assert [r["state"] for r in e.core.requests() if r["priority"] == Priority.BACKGROUND] == ["preempted"]
        final_of = lambda events: [ev for ev in events][-1]  # noqa: E731
        final_of(first)  # its sequence is free: the background reply resumes there, beside the urgent one
        deadline = time.monotonic() + 60
        while (moved_to := {r["seq"] for r in e.core.requests() if r["priority"] == Priority.BACKGROUND}) == {None}:
            assert time.monotonic() < deadline, "the preempted reply never resumed"
            time.sleep(0.01)
        assert moved_to != was_on, (seqs, was_on, moved_to)
        done = {name: final_of(ev) for name, ev in (("background", background), ("urgent", urgent))}
        assert all(d.finish_reason == "max_tokens" for d in done.values())
        # Each draft sequence drafted for the reply on its target sequence: the background reply's history on
        # the sequence it ended on, the urgent one's on the sequence it took over.
        for name, seq in (("background", moved_to.pop()), ("urgent", was_on.pop())):
            prompt = e.prompt_tokens(asks[name])
            held = e.speculation.draft_on(seq)._kv
            assert held[:len(prompt)] == prompt, name
            assert held[len(prompt):] == list(done[name].token_ids[:len(held) - len(prompt)]), name
    finally:
        e.close()
