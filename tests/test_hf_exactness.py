"""Prefix cache and speculative decoding on the transformers backend.

The shared code (engine.py, prefix_cache.py, speculative.py) drives the hf
backend unchanged. Unlike our llama.cpp build, torch's CPU kernels are not
bit-identical between a batch and single steps (logits differ by ~1e-5; see
test_batch_vs_steps_difference_is_tiny), so greedy equality below is checked on
fixed prompts where no two candidates are that close; the runs are
deterministic, so a pass here is a pass every time.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.engine import Engine
from engine.config import EngineConfig
from engine.prompt.messages import Message
from engine.types import SamplingParams

pytest.importorskip("torch")

SYSTEM = "You are a concise assistant. Answer in one sentence. " * 4
G = SamplingParams(temperature=0.0, max_tokens=24)


def run(e, messages, params=G):
    # "stop": a reply that fills the context ends there (the other policies go on past it: test_context_shift.py)
    for ev in e.stream(messages, params, context_policy="stop"):
        if ev.kind == "final":
            return ev


@pytest.fixture(scope="module")
def hf_pair(bundled_path):
    warm = Engine.open(EngineConfig(bundled_path, backend="hf", n_ctx=512, n_threads=2))
    cold = Engine.open(EngineConfig(bundled_path, backend="hf", n_ctx=512, n_threads=2, cache_budget=0))
    yield warm, cold
    warm.close()
    cold.close()


def fresh(cold, messages, params=G):
    cold.reset()
    return run(cold, messages, params)


def test_batch_vs_steps_difference_is_tiny(hf_pair):
    b = hf_pair[0].backend
    toks = b.tokenize("The history of the rainbow is long and colourful. " * 3)
    b.truncate(0)
    rows = b.forward(toks, all_logits=True).copy()
    b.truncate(0)
    steps = np.stack([b.forward([t]).copy() for t in toks])
    assert np.abs(rows - steps).max() < 1e-3
    assert (rows.argmax(1) == steps.argmax(1)).all()
    hf_pair[0].reset()


def test_hf_prefix_cache_equals_uncached(hf_pair):
    warm, cold = hf_pair
    warm.reset()
    a = [Message("system", SYSTEM), Message("user", "What is rain?")]
    b = [Message("system", SYSTEM), Message("user", "Why is the sky blue?")]
    ra = run(warm, a)
    rb = run(warm, b)  # another conversation: A's live KV is snapshotted first
    assert rb.stats.cached_tokens > 40  # the shared system prompt is reused
    assert rb.token_ids == fresh(cold, b).token_ids
    assert ra.token_ids == fresh(cold, a).token_ids
    # Third turn: only the new message and its template tokens are prefilled.
    conv = b + [Message("assistant", rb.text), Message("user", "Shorter.")]
    r2 = run(warm, conv)
    conv += [Message("assistant", r2.text), Message("user", "Thanks!")]
    before = len(warm.kv.kv_tokens())
    r3 = run(warm, conv)
    assert r3.stats.cached_tokens == before
    assert r3.token_ids == fresh(cold, conv).token_ids
    # Back to conversation A after B overwrote the live KV: no leak, same as fresh.
    a2 = a + [Message("assistant", ra.text), Message("user", "And snow?")]
    ra2 = run(warm, a2)
    assert ra2.stats.cached_tokens >= ra.stats.prompt_tokens
    assert ra2.token_ids == fresh(cold, a2).token_ids


FILL = SamplingParams(temperature=0.0, max_tokens=600, ignore_eos=True)
Q = [Message("user", "List the days of the week.")]


@pytest.fixture(scope="module")
def small_ctx(bundled_path):
    """A 128-token context that the replies fill up, to cover the boundary."""
    plain = Engine.open(EngineConfig(bundled_path, backend="hf", n_ctx=128, n_threads=2, cache_budget=0))
    spec = Engine.open(EngineConfig(bundled_path, backend="hf", n_ctx=128, n_threads=2, cache_budget=0))
    spec.set_speculation(str(bundled_path), force=True)  # the bundled model drafting for itself
    yield plain, spec, run(plain, Q, FILL)
    spec.close()
    plain.close()


@pytest.mark.parametrize("kind,k", [("model", 1), ("model", 4), ("model", 8), ("ngram", 2), ("ngram", 5)])
def test_hf_speculative_greedy_identical_until_context_full(small_ctx, kind, k):
    _, spec, plain_fill = small_ctx
    spec.set_speculation(kind, k=k, force=True)
    spec.reset()
    ev = run(spec, Q, FILL)
    assert plain_fill.finish_reason == ev.finish_reason == "context_full"
    assert ev.token_ids == plain_fill.token_ids
    assert ev.stats.spec["drafted"] > 0
