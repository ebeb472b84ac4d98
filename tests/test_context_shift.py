"""Conversations that outgrow the context, on the real bundled model (engine/prompt/view.py).

The shift is checked against llama.cpp itself, driven directly as its server drives a slot
(tests/llama_reference.py): a reply that fills the context equals llama-server's context shift on
the same tokens, and a prompt whose oldest turns were left out equals its cache reuse. Step drop
hits the prefix cache on the turns after it; a reply that fills the context goes on up to its
max_tokens under every policy but stop; pinned messages and the system prompt are never left out;
compaction summarizes with the model and says so.
"""
from __future__ import annotations

import dataclasses

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import HearthError
from engine.prompt.messages import Message
from engine.prompt.summary import SUMMARY_HEAD, compacted, summary_text
from engine.types import SamplingParams

from llama_reference import greedy_with_context_shift

SYSTEM = Message("system", "You are a helpful assistant. The secret word is PLUM.")
LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
SHORT = SamplingParams(temperature=0.0, max_tokens=12)


def final_of(events):
    evs = list(events)
    assert evs[-1].kind == "final"
    return evs[-1]


def chat(turns: int, start: int = 0) -> list[Message]:
    out = [SYSTEM]
    for i in range(start, start + turns):
        out += [Message("user", f"Turn {i}: tell me a short fact about the number {i * 7}, please."),
                Message("assistant", f"The number {i * 7} is {'even' if i % 2 == 0 else 'odd'} and it follows "
                                     f"{i * 7 - 1}.")]
    return out


@pytest.fixture(scope="module")
def fast(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=256, exactness="fast", cache_budget=0))
    yield e
    e.close()


@pytest.fixture(scope="module")
def exact(bundled_path):
    e = Engine.open(EngineConfig(bundled_path, n_ctx=512, exactness="exact", cache_budget=0))
    yield e
    e.close()


# -- shift, against llama.cpp itself -------------------------------------------------------


def test_a_reply_that_fills_the_context_equals_llama_servers_context_shift(fast):
    msgs = [Message("system", "You are a storyteller."), Message("user", "Write a very long story about a dragon.")]
    got = final_of(fast.stream(msgs, LONG, context_policy="shift"))
    assert got.finish_reason == "max_tokens" and got.stats.generated_tokens == 400 > fast.n_ctx
    assert got.stats.context_policy == "shift" and got.stats.shifted_tokens > 0 and got.stats.reread_tokens == 0
    assert "tokens before the reply's end were discarded" in got.stats.notes[-1]
    prompt, keep = fast.prompt_tokens(msgs), fast.prompts.keep_tokens(msgs)
    want = fast.core.call(lambda: greedy_with_context_shift(fast.backend, prompt, keep, 400))
    assert got.token_ids == want


@pytest.mark.parametrize("kind", ["ngram", "model"])
def test_a_speculative_reply_shifts_the_context_at_the_same_token_as_plain_decoding(fast, bundled_path, kind):
    """A round never drafts past the room left, so the shift comes at the same token with drafts as without
    (the model drafting for itself: every draft accepted; n-gram: hits and misses), and the reply is again
    llama-server's context shift, token for token."""
    msgs = [Message("system", "You are a storyteller."), Message("user", "Write a very long story about a dragon.")]
    fast.set_speculation(str(bundled_path) if kind == "model" else kind, k=4, force=True)
    try:
        fast.reset()
        got = final_of(fast.stream(msgs, LONG, context_policy="shift"))
    finally:
        fast.set_speculation("none")
    assert got.finish_reason == "max_tokens" and got.stats.shifted_tokens > 0
    assert got.stats.spec["drafted"] > 0
    prompt, keep = fast.prompt_tokens(msgs), fast.prompts.keep_tokens(msgs)
    want = fast.core.call(lambda: greedy_with_context_shift(fast.backend, prompt, keep, 400))
    assert got.token_ids == want


# -- step drop, and replies that fill the context -------------------------------------------


def test_after_a_step_drop_the_next_turns_hit_the_prefix_cache(exact):
    hist, rows = [SYSTEM], []
    for i in range(16):
        hist.append(Message("user", f"Turn {i}: tell me a short fact about the number {i * 7}, please."))
        f = final_of(exact.stream(hist, SHORT, context_policy="drop_oldest"))
        rows.append((f.stats.prompt_tokens, f.stats.cached_tokens, f.stats.dropped_messages))
        hist.append(Message("assistant", f.text))
    first = next(i for i, r in enumerate(rows) if r[2])
    assert first >= 3 and rows[first][1] < rows[first][0] // 2  # the step: read again, once
    assert rows[first][0] <= 512 * 0.5  # down to half the context
    after = [r for r in rows[first + 1:] if r[2] == rows[first][2]]
    assert len(after) >= 2  # the same cut holds for the next turns...
    for prompt, cached, _dropped in after:
        assert prompt - cached < 40  # ...which read only their own new turn


def test_a_reply_that_fills_the_context_goes_on_under_every_policy_but_stop(fast, exact):
    msgs = [*chat(3), Message("user", "Write a very long story about a dragon and a baker.")]
    for engine, policy in ((exact, "drop_oldest"), (fast, "shift"), (exact, "compact"), (exact, "shift")):
        params = dataclasses.replace(LONG, max_tokens=engine.n_ctx + 150)
        f = final_of(engine.stream(msgs, params, context_policy=policy))
        assert (f.finish_reason, f.stats.generated_tokens) == ("max_tokens", engine.n_ctx + 150), policy
        assert f.stats.dropped_messages == 6 and f.stats.view_start == 7  # every turn before the question
        moved = engine is fast
        assert (f.stats.shifted_tokens > 0) == moved and (f.stats.reread_tokens > 0) != moved, policy
    stopped = final_of(fast.stream(msgs, LONG, context_policy="stop"))
    assert stopped.finish_reason == "context_full" and stopped.stats.generated_tokens < fast.n_ctx
    # With no max_tokens a reply ends once no turn is left to leave out: it would discard its question.
    endless = dataclasses.replace(LONG, max_tokens=None)
    f = final_of(fast.stream(msgs, endless, context_policy="shift"))
    assert f.finish_reason == "context_full" and f.stats.dropped_messages == 6
    assert f.stats.kv_used <= fast.n_ctx


def test_the_exact_profile_drops_where_shift_is_asked(exact):
    msgs = chat(14)
    f = final_of(exact.stream(msgs, SHORT, context_policy="shift"))
    assert f.stats.dropped_messages > 0 and f.stats.context_policy == "drop_oldest"
    assert f.stats.shifted_tokens == 0 and exact.kv.table.shifted[0] is None


def test_pinned_messages_and_the_system_prompt_are_never_left_out(exact):
    msgs = chat(14)
    msgs[3] = Message("user", "Remember: my cat is called Saffron.", pinned=True)
    built = exact.prompts.build(msgs, reserve=12, policy="drop_oldest")
    assert built.dropped > 0 and built.messages[0] == SYSTEM
    assert built.messages[1].content == "Remember: my cat is called Saffron." and built.messages[1].pinned
    assert built.messages[2] == msgs[4]  # its answer stays with it: the turn is whole
    assert built.cut is not None and built.cut.view_start > 3
    assert all(not m.pinned for m in built.cut.left_out) and len(built.cut.left_out) == built.dropped
    with pytest.raises(HearthError, match="choose one of stop, drop_oldest, shift, compact"):
        exact.prompts.build(msgs, reserve=12, policy="truncate")


# -- compaction ------------------------------------------------------------------------------


def test_compaction_summarizes_the_oldest_turns_with_the_model(exact):
    msgs = chat(14)
    msgs[3] = dataclasses.replace(msgs[3], pinned=True)
    msgs.append(Message("user", "What is the secret word?"))
    evs = list(exact.stream(msgs, SHORT, context_policy="compact"))
    context = [e for e in evs if e.kind == "context"]
    assert [bool(e.text) for e in context] == [False, True]  # first "summarizing", then the summary
    st = evs[-1].stats
    assert st.context_policy == "compact" and st.summary == context[1].text.strip() and st.summary
    assert st.summarized_messages > 0 and st.view_start > 3 and st.context_ms > 0
    assert "summarized to fit the context" in " ".join(st.notes)
    # The same turns again: the engine's summary is reused, not written again.
    again = list(exact.stream(msgs, SHORT, context_policy="compact"))
    assert again[-1].stats.summary == st.summary and again[-1].stats.context_ms < st.context_ms
    # What the caller keeps: the pinned message, then the summary in the turns' place.
    kept = compacted(msgs, st.view_start, st.summary)
    assert kept[0] == SYSTEM and kept[1:3] == msgs[3:5] and summary_text(kept[3]) == st.summary  # a pinned turn
    assert kept[3].content.startswith(SUMMARY_HEAD) and kept[4:] == msgs[st.view_start:]
    f = final_of(exact.stream(kept, SHORT, context_policy="compact"))  # it fits now: nothing to do
    assert f.stats.context_policy == "" and f.stats.summarized_messages == 0
