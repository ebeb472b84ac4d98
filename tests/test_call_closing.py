"""A forced tool call closes within its token budget (decode/call_closing.py).

First a writer that never wants to stop (random logits, the end of generation pushed away) under
llama.cpp's real grammar over the bundled model's vocabulary: whatever its budget, from the
shortest call up, its call closes in time and validates. Then the real bundled model wearing
Qwen 2.5's template (Hermes syntax): a three-tool set's forced calls under a budget that cuts
some of them without the check all complete and validate; the check never changes a call that
had room (the same tokens, greedy or sampled); a budget too small for any call ends the reply
at once with a note, and a budget of exactly the shortest call writes it.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from serving import qwen_tool_engine

from engine.bench.tools import PROMPTS, TOOLS, check
from engine.decode.call_closing import NoRoomForCall, call_closing
from engine.decode.constraint import ConstrainedSampler
from engine.decode.prepare import Prepared
from engine.prompt.messages import Message
from engine.reply_formats.tool_parser import ToolCallParser
from engine.reply_formats.tools import ToolPlan
from engine.reply_formats.tool_syntax import syntax_by_name
from engine.types import SamplingParams

THREE = TOOLS[:3]   # get_weather, create_user (nested, optional fields), convert (number, enums)
PROMPT_LEN = 100    # the unit test's pretend prompt


def write(backend, plan: ToolPlan, budget: int, seed: int, rewind_at: int | None = None) -> list[int]:
    """A writer that never wants to end (random logits, end of generation last), under the real grammar
    and the check, until it ends; ``rewind_at``: once, go back to that many tokens and write on."""
    rng = np.random.default_rng(seed)
    eos = list(backend.eos_ids)

    def writer(history, logits):
        noise = rng.standard_normal(logits.size).astype(np.float32)
        noise[eos] = -50.0
        return int(np.argmax(logits + noise))

    grammar = backend.grammar(plan.grammar())
    closing = call_closing(backend, plan.grammar(), prompt_len=PROMPT_LEN, limit=budget, n_ctx=4096)
    assert closing is not None
    sampler = ConstrainedSampler(writer, grammar, closing=closing)
    history = [0] * PROMPT_LEN
    zeros = np.zeros(backend.n_vocab, dtype=np.float32)
    try:
        while len(history) < PROMPT_LEN + budget + 5:
            tok = sampler(history, zeros)
            history.append(tok)
            if tok in backend.eos_ids:
                break
            if rewind_at is not None and len(history) == PROMPT_LEN + rewind_at + 6:
                del history[PROMPT_LEN + rewind_at:]
                sampler.rewind(PROMPT_LEN + rewind_at, writer)
                rewind_at = None
    finally:
        grammar.close()
    return history[PROMPT_LEN:]


def the_call(backend, plan: ToolPlan, tokens: list[int], choice: str) -> str | None:
    """Why the written call is not one valid call (None: it is)."""
    text = b"".join(backend.token_bytes(t) for t in tokens if t not in backend.eos_ids).decode()
    parser = ToolCallParser(plan)
    parser.feed(text)
    if parser.finish()[1]:
        return f"cut: {text!r}"
    return check(parser.calls, THREE, choice)


@pytest.mark.parametrize("choice", ["create_user", "convert", "required"])
def test_a_writer_that_never_stops_closes_its_call_in_time(llama_backend, choice):
    plan = ToolPlan(syntax_by_name("hermes"), THREE, choice, parallel=False)
    closing = call_closing(llama_backend, plan.grammar(), prompt_len=PROMPT_LEN, limit=1000, n_ctx=4096)
    assert closing is not None
    start = closing.states[0][0]
    shortest = int(closing.pieces.count(closing.walk.shortest(start) or b"")) + 1  # and the end of generation
    for budget in (shortest, shortest + 1, shortest + 7, shortest + 30, shortest + 90):
        for seed in range(2):
            tokens = write(llama_backend, plan, budget, seed)
            assert tokens[-1] in llama_backend.eos_ids and len(tokens) <= budget, (budget, seed, len(tokens))
            assert the_call(llama_backend, plan, tokens, choice) is None, (budget, seed)
    with pytest.raises(NoRoomForCall, match=f"takes {shortest};"):
        write(llama_backend, plan, shortest - 1, 0)


def test_a_call_drawn_again_from_an_earlier_point_still_closes_in_time(llama_backend):
    """decode/resample.py sends a reply back to its call's start and draws again: the check goes back too."""
    plan = ToolPlan(syntax_by_name("hermes"), THREE, "create_user", parallel=False)
    for rewind_at in (0, 12, 30):
        tokens = write(llama_backend, plan, 60, 3, rewind_at=rewind_at)
        assert tokens[-1] in llama_backend.eos_ids and len(tokens) <= 60
        assert the_call(llama_backend, plan, tokens, "create_user") is None


@pytest.fixture(scope="module")
def engine(bundled_path):
    with qwen_tool_engine(bundled_path, n_ctx=2048) as e:
        yield e


def forced(engine, i: int, max_tokens: int, temperature: float = 0.8):
    """The i-th forced call of the three-tool set: required, then each tool by name, in turn."""
    choice = "required" if i % 4 == 0 else THREE[i % 3].name
    plan = engine.plan_tools(THREE, choice, parallel=False)
    params = SamplingParams(temperature=temperature, seed=i, max_tokens=max_tokens)
    prompt = PROMPTS[THREE[i % 3].name][i % 2]
    final = [ev for ev in engine.stream([Message("user", prompt)], params, tools=plan) if ev.kind == "final"][0]
    return choice, final


def without_the_check(monkeypatch) -> None:
    monkeypatch.setattr(Prepared, "closing", lambda self, backend, n_ctx: None)


@pytest.mark.timeout(1200)  # 24 replies on a shared 2-core machine
def test_every_forced_call_of_a_three_tool_set_completes_in_a_tight_budget(engine, monkeypatch):
    budget = 48
    checked = [forced(engine, i, budget) for i in range(12)]
    for choice, final in checked:
        assert final.finish_reason == "tool_calls", (choice, final.text, final.stats.notes)
        assert check(final.tool_calls, THREE, choice) is None
        assert final.stats.generated_tokens <= budget
    without_the_check(monkeypatch)
    unchecked = [forced(engine, i, budget) for i in range(12)]
    cut = [f for _, f in unchecked if f.finish_reason == "max_tokens"]
    assert cut and not any(f.tool_calls for f in cut)   # the budget is tight: without the check, calls are lost
    # a call that fit without the check is the same call with it: the same draws, token for token
    for (_, a), (_, b) in zip(checked, unchecked):
        if b.finish_reason == "tool_calls":
            assert a.token_ids == b.token_ids


@pytest.mark.timeout(900)
def test_the_check_never_changes_a_greedy_call_that_had_room(engine, monkeypatch):
    """(A sampled call that had room is the same too: the test above compares them.)"""
    checked = [forced(engine, i, 400, 0.0)[1] for i in range(4)]
    without_the_check(monkeypatch)
    unchecked = [forced(engine, i, 400, 0.0)[1] for i in range(4)]
    assert [f.token_ids for f in checked] == [f.token_ids for f in unchecked]
    assert all(f.finish_reason == "tool_calls" for f in checked)


def test_a_budget_below_the_shortest_call_ends_at_once_and_says_so(engine):
    choice, final = forced(engine, 1, 10)
    assert (final.finish_reason, final.text, final.tool_calls, final.token_ids) == ("max_tokens", "", (), [])
    note = next(n for n in final.stats.notes if n.startswith("no tool call"))
    assert "10 tokens were left of max_tokens (10)" in note
    shortest = int(re.search(r"the shortest complete call takes (\d+)", note).group(1))
    _, final = forced(engine, 1, shortest)   # exactly the shortest call's budget: that call is written
    assert final.finish_reason == "tool_calls" and check(final.tool_calls, THREE, choice) is None
    assert final.stats.generated_tokens <= shortest
