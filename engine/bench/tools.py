"""``python -m engine bench tools``: forced tool calls over varied schemas, each checked by a
real JSON Schema validator.

Each of ``--calls`` replies (default 200) is offered three of the tools below and must call
one: ``tool_choice`` is ``required`` on even turns and the matching tool's name on odd ones.
The schemas cover what models get wrong: nested objects, enums, arrays (of arrays too),
integers beside numbers, booleans, a nullable field, a date, a tool without parameters and
non-ASCII strings. Replies are sampled (temperature 0.8, a seed per call), so the calls vary.
``--schemas recorded`` forces calls over real tools instead: the ones Claude Code, Codex CLI and
OpenCode sent, and the MCP servers' (tests/fixtures/agents, tests/fixtures/mcp).

A call counts as *valid* when the reply ends ``tool_calls``, every call names an offered
tool (the named one, when named) and ``jsonschema`` accepts its arguments. *Invalid* is
anything else that ended in a call (or a parser error); *cut* is a reply that
reached ``max_tokens`` first (``length`` in the API), which must come back with no call,
never a broken one. Every call here is forced, and a forced call is closed within its budget
(decode/call_closing.py), so *cut* counts only replies whose budget could not hold any call.
The goal is 0 invalid and 0 cut. *Valid at budget*: valid calls whose reply used every token of
its budget (most of them closed at the last moment by that check). A call the grammar let through but the validator
refused (a keyword no grammar says) is drawn again: the *resample rate* is the share of calls
that needed it. Run it on a model whose template takes tools,
or give one with ``--template`` (a Jinja file the model wears, as tests do with the bundled
model).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..reply_formats.tool_parser import ToolCallError
from ..reply_formats.tools import Tool
from ..prompt.messages import Message
from ..types import SamplingParams

S = {"type": "string"}
TOOLS: tuple[Tool, ...] = (
    Tool("get_weather", {"type": "object", "properties": {
        "city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]},
        "The weather in a city"),
    Tool("create_user", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": S, "age": {"type": "integer"},
                                                   "email": {"type": ["string", "null"]}},
                 "required": ["name", "age"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4}},
        "required": ["user"]}, "Create a user account"),
    Tool("convert", {"type": "object", "properties": {
        "value": {"type": "number"}, "from_unit": {"type": "string", "enum": ["m", "km", "mi", "ft"]},
        "to_unit": {"type": "string", "enum": ["m", "km", "mi", "ft"]}, "digits": {"type": "integer"}},
        "required": ["value", "from_unit", "to_unit"]}, "Convert a length"),
    Tool("book_table", {"type": "object", "properties": {
        "date": {"type": "string", "format": "date"}, "guests": {"type": "integer"},
        "vegetarian": {"type": "boolean"}, "notes": {"anyOf": [S, {"type": "null"}]}},
        "required": ["date", "guests"]}, "Book a restaurant table"),
    Tool("translate", {"type": "object", "properties": {
        "text": {"type": "string", "maxLength": 200},
        "target": {"type": "string", "enum": ["de", "fr", "ja", "zh", "es"]}},
        "required": ["text", "target"]}, "Translate a text"),
    Tool("matrix_sum", {"type": "object", "properties": {
        "rows": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
                 "minItems": 1, "maxItems": 4}}, "required": ["rows"]}, "Add up a matrix of integers"),
    Tool("current_time", {"type": "object", "properties": {}}, "The time now (takes nothing)"),
)
PROMPTS = {
    "get_weather": ["What's the weather in Zürich?", "Wie ist das Wetter in München, in Celsius?",
                    "東京の天気は？"],
    "create_user": ["Make an account for Zoë Ørsted, 34, tags admin and 北京.",
                    "Sign up José, aged 29, email jose@example.com."],
    "convert": ["How many feet is 3.5 km?", "Convert 26.2 miles to kilometres with 2 digits."],
    "book_table": ["Book a table for 4 on 2026-12-24, vegetarian.", "Reserve for two on 2027-01-03, note: "
                   "fenêtre, s'il vous plaît."],
    "translate": ["Translate 'Grüße aus Köln' into Japanese.", "把“你好，世界”翻译成法语。",
                  "Say 'naïve café' in Spanish."],
    "matrix_sum": ["Add up [[1, 2], [3, 4]].", "Sum the matrix 5 6 7 / 8 9 10."],
    "current_time": ["What time is it?"],
}


def cases(n: int, tools: tuple[Tool, ...] = TOOLS) -> list[tuple[str, tuple[Tool, ...], str]]:
    """``n`` (prompt, offered tools, choice): each tool in turn, with the next two as distractors."""
    out: list[tuple[str, tuple[Tool, ...], str]] = []
    for i in range(n):
        k = i % len(tools)
        target = tools[k]
        near = (target, tools[(k + 1) % len(tools)], tools[(k + 3) % len(tools)])
        offered = tuple({t.name: t for t in reversed(near)}.values())[::-1]  # a name once (the target's tool)
        prompts = PROMPTS.get(target.name) or [f"Use the {target.name} tool.", f"{target.description[:200]}"]
        choice = "required" if i % 2 == 0 else target.name
        out.append((prompts[(i // len(tools)) % len(prompts)] or f"Call {target.name}.", offered, choice))
    return out


def check(calls, offered: tuple[Tool, ...], choice: str) -> str | None:
    """Why the calls are invalid (None: every one is valid)."""
    import jsonschema

    by_name = {t.name: t for t in offered}
    if not calls:
        return "the reply ended tool_calls without a call"
    for c in calls:
        if c.name not in by_name or (choice != "required" and c.name != choice):
            return f"called {c.name!r}, which was not offered (choice {choice})"
        try:
            jsonschema.validate(json.loads(c.arguments), by_name[c.name].parameters,
                                format_checker=jsonschema.FormatChecker())
        except (ValueError, jsonschema.ValidationError) as e:
            return f"{c.name}: {str(e).splitlines()[0]}"
    return None


def forced_calls(engine, n: int, *, max_tokens: int = 160, temperature: float = 0.8,
                 tools: tuple[Tool, ...] = TOOLS, progress: Callable[[str], None] | None = None,
                 every: int = 10) -> dict[str, Any]:
    """Run ``n`` forced calls on ``engine`` over ``tools``; the counts, and each invalid call's reason.
    *Resampled*: calls the validator refused and that were drawn again (decode/resample.py);
    *given back*: replies whose call never passed and came back as text with the reason.
    ``progress`` gets a line of the counts so far every ``every`` calls (a long run on a slow machine)."""
    valid = cut = resamples = resampled = given_back = at_budget = 0
    invalid: list[dict[str, Any]] = []
    by_tool: dict[str, int] = {}
    t0 = time.perf_counter()
    tokens = 0
    for i, (prompt, offered, choice) in enumerate(cases(n, tools)):
        if progress is not None and i and i % every == 0:
            progress(f"{i}/{n} calls: {valid} valid, {len(invalid)} invalid, {cut} cut, {at_budget} at budget")
        plan = engine.plan_tools(offered, choice, parallel=False)
        params = SamplingParams(temperature=temperature, seed=1000 + i, max_tokens=max_tokens)
        try:
            final = [ev for ev in engine.stream([Message("user", prompt)], params, tools=plan)
                     if ev.kind == "final"][0]
        except ToolCallError as e:
            invalid.append({"i": i, "prompt": prompt, "why": f"parser: {e}"})
            continue
        tokens += tokens_of(final)
        drawn = final.stats.tool_resamples if final.stats else 0
        resamples += drawn
        resampled += drawn > 0
        if final.stats and any("did not match its schema" in note for note in final.stats.notes):
            given_back += 1
        if final.finish_reason in ("max_tokens", "context_full"):  # the API's "length": no call, never half a one
            if final.tool_calls:
                invalid.append({"i": i, "prompt": prompt, "why": "a call came back from a reply that was cut"})
                continue
            cut += 1
            continue
        why = check(final.tool_calls, offered, choice) if final.finish_reason == "tool_calls" else \
            f"ended {final.finish_reason} with text {final.text[:80]!r}"
        if why is None:
            valid += 1
            at_budget += tokens_of(final) >= max_tokens
            for c in final.tool_calls:
                by_tool[c.name] = by_tool.get(c.name, 0) + 1
        else:
            invalid.append({"i": i, "prompt": prompt, "why": why})
    seconds = time.perf_counter() - t0
    return {"calls": n, "valid": valid, "invalid": len(invalid), "cut_by_max_tokens": cut,
            "valid_at_budget": at_budget,
            "resampled_calls": resampled, "resample_rate": round(resampled / n, 4) if n else 0.0,
            "resamples": resamples, "given_back_as_text": given_back,
            "by_tool": dict(sorted(by_tool.items())), "invalid_calls": invalid[:20],
            "generated_tokens": tokens, "seconds": round(seconds, 1)}


def tokens_of(final) -> int:
    """The tokens a reply's final event says it generated (0 when it carries no stats)."""
    return final.stats.generated_tokens if final.stats else 0


def schemas(which: str) -> tuple[tuple[Tool, ...], str]:
    """The tools to force calls over: ``builtin`` (this file's), or ``recorded`` (what real coding
    agents and MCP servers offer, from tests/fixtures/agents and tests/fixtures/mcp), or a folder
    laid out as tests/fixtures is."""
    if which == "builtin":
        return TOOLS, "builtin"
    from .agent_proxy import recorded_tools

    folder = Path(__file__).resolve().parents[2] / "tests" / "fixtures" if which == "recorded" else Path(which)
    found = recorded_tools(folder) if folder.is_dir() else {}
    if not found:
        raise SystemExit(f"no recorded agents' or MCP servers' tools under {folder} "
                         "(scripts/capture_agents.py records them)")
    # Each tool's own description is left out of the prompt (Claude Code's Workflow tool alone is
    # 5,000 tokens of prose): the schemas, with their properties' descriptions, make the grammars.
    tools = tuple(dataclasses.replace(t, description="") for group in found.values() for t in group)
    return tools, f"recorded ({', '.join(found)}; {len(tools)} tools, their descriptions left out)"


def open_tool_engine(model: str | None, template: str | None, n_ctx: int, threads: int | None):
    """The engine to measure: ``model`` (default: the bundled one), wearing ``template`` if given."""
    from ..backends.llama.backend import LlamaCppBackend
    from ..engine import Engine
    from ..config import EngineConfig
    from ..models.catalogue import resolve
    from ..models.gguf import model_info

    path = resolve(model).path
    if template is None:
        return Engine.open(EngineConfig(path, n_ctx=n_ctx, n_threads=threads, cache_budget=0))
    info = dataclasses.replace(model_info(path), chat_template=Path(template).read_text(encoding="utf-8"))
    return Engine(LlamaCppBackend(path, n_ctx=n_ctx, n_threads=threads, info=info), cache_budget=0)


def bench_tools(a: argparse.Namespace) -> dict:
    engine = open_tool_engine(a.model, getattr(a, "template", None), a.ctx or 4096, a.threads)
    try:
        if engine.tool_syntax is None:
            raise SystemExit("this model's chat template takes no tools: give one with --template FILE")
        tools, source = schemas(getattr(a, "schemas", None) or "builtin")
        out = forced_calls(engine, getattr(a, "calls", None) or 200, tools=tools,
                           progress=lambda line: print(line, file=sys.stderr, flush=True))
        out["schemas"] = source
        out["syntax"] = engine.tool_syntax.name
        out["model"] = Path(engine.backend.path).name
        out["goal"] = "0 invalid, 0 cut"
        out["meets_goal"] = out["invalid"] == 0 and out["cut_by_max_tokens"] == 0
        return out
    finally:
        engine.close()
