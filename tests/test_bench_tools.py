"""engine/bench/tools.py: forced calls checked by jsonschema. The checker is shown to catch
each kind of bad call, then one forced call per tool is made by the real bundled model
wearing Qwen 2.5's template (Hermes syntax) and every one must validate."""
from __future__ import annotations

import re

from engine.bench import tools as bench
from engine.prompt.messages import ToolCall
from serving import qwen_tool_engine


def test_every_tool_of_the_set_is_offered_and_named_in_turn():
    got = bench.cases(len(bench.TOOLS) * 2)
    assert {offered[0].name for _, offered, _ in got} == {t.name for t in bench.TOOLS}
    assert all(len({t.name for t in offered}) == 3 for _, offered, _ in got)
    assert [choice for _, _, choice in got[:2]] == ["required", got[1][1][0].name]
    assert any(not p.isascii() for p, _, _ in got)


def test_the_checker_refuses_each_kind_of_bad_call():
    weather, user, _, book = bench.TOOLS[:4]
    offered = (weather, user, book)
    ok = ToolCall("c1", "get_weather", '{"city": "Zürich", "unit": "celsius"}')
    assert bench.check((ok,), offered, "required") is None
    assert bench.check((ok,), offered, "get_weather") is None
    for calls, choice, why in (
            ((), "required", "without a call"),
            ((ToolCall("c", "convert", '{}'),), "required", "not offered"),
            ((ok,), "create_user", "not offered"),
            ((ToolCall("c", "get_weather", '{"unit": "celsius"}'),), "required", "'city' is a required"),
            ((ToolCall("c", "get_weather", '{"city": "x", "unit": "kelvin"}'),), "required", "is not one of"),
            ((ToolCall("c", "create_user", '{"user": {"name": "a", "age": 1.5}}'),), "required", "not of type"),
            ((ToolCall("c", "book_table", '{"date": "2026-13-45", "guests": 2}'),), "required", "is not a 'date'"),
            ((ToolCall("c", "get_weather", '{"city": '),), "required", "get_weather")):
        got = bench.check(calls, offered, choice)
        assert got is not None and why in got, (calls, got)


def test_forced_calls_by_the_real_model_all_validate(bundled_path):
    with qwen_tool_engine(bundled_path) as engine:
        out = bench.forced_calls(engine, len(bench.TOOLS))
    assert out["invalid"] == 0, out["invalid_calls"]
    assert out["valid"] == len(bench.TOOLS) and out["cut_by_max_tokens"] == 0
    assert out["by_tool"] == {t.name: 1 for t in bench.TOOLS}  # the offered tool, never a distractor


def test_forced_calls_in_a_tight_budget_are_closed_at_it(bundled_path):
    """A budget that cuts these calls without decode/call_closing.py: both end valid, at the budget."""
    lines: list[str] = []
    with qwen_tool_engine(bundled_path) as engine:
        out = bench.forced_calls(engine, 2, max_tokens=36, progress=lines.append, every=1)
    assert len(lines) == 1 and re.fullmatch(r"1/2 calls: 1 valid, 0 invalid, 0 cut, [01] at budget", lines[0])
    assert out["invalid"] == 0, out["invalid_calls"]
    assert (out["valid"], out["cut_by_max_tokens"]) == (2, 0) and out["valid_at_budget"] >= 1
