"""What real coding agents send, replayed (issue #43).

``tests/fixtures/agents/AGENT/NN.json`` are requests Claude Code, Codex CLI and OpenCode made to
Hearth's server, recorded by ``scripts/capture_agents.py`` (their tools, system prompts and every
field they set). Each must be accepted as a whole, each tool's schema must become a grammar that
llama.cpp's own parser takes, and calls forced under those grammars must validate against the
schemas with ``jsonschema``, a validator Hearth does not write. Through the HTTP server, each
agent's own request (its tools cut to a few, so that the tiny bundled model's context holds them)
is answered in its protocol's shape with a valid call.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
from serving import local_server, qwen_tool_engine

from engine.bench.agent_proxy import RecordingProxy, recorded_request, recorded_tools
from engine.bench.agents import read_exchange
from engine.prompt.messages import Message
from engine.reply_formats.tools import Tool, ToolPlan
from engine.reply_formats.tool_syntax import syntax_by_name
from engine.types import SamplingParams

FIXTURES = Path(__file__).parent / "fixtures"
TOOLED = ("claude", "codex", "opencode", "mcp-fetch", "mcp-git", "mcp-time")
FORCED_PER_AGENT = 3
SCHEMA_KEYWORDS = {"type", "properties", "required", "items", "enum", "const", "anyOf", "oneOf", "allOf",
                   "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                   "pattern", "format", "minItems", "maxItems", "additionalProperties", "default", "$ref",
                   "$defs", "definitions", "uniqueItems", "multipleOf", "propertyNames", "not"}


def recorded(path: Path) -> dict:
    return json.loads(path.read_text())


def posted() -> list[Path]:
    return [p for p in sorted(FIXTURES.glob("agents/*/*.json")) if recorded(p)["method"] == "POST"]


def agent_tools() -> dict[str, tuple[Tool, ...]]:
    """Each agent's tools (from the first of its requests that offers them) and each MCP server's."""
    return recorded_tools(FIXTURES)


def test_there_is_a_recording_of_each_agent_and_server_offering_tools():
    assert set(agent_tools()) == set(TOOLED)
    assert sum(len(t) for t in agent_tools().values()) >= 60


@pytest.mark.parametrize("path", posted(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_recorded_request_is_accepted_whole(path):
    ex = recorded(path)
    req = recorded_request(ex)  # an ApiError (a 400) fails the test with its message
    assert req.messages
    if ex["body"].get("tools"):
        hosted = [t for t in ex["body"]["tools"] if t.get("type") not in (None, "function", "namespace", "custom")]
        assert req.tools and all(h["type"] in " ".join(req.notes) for h in hosted)


@pytest.mark.parametrize("agent", TOOLED)
def test_every_agent_tool_becomes_a_grammar_llama_cpp_takes(agent, llama_backend):
    tools = agent_tools()[agent]
    plan = ToolPlan(syntax_by_name("hermes"), tools, "auto")
    llama_backend.grammar(plan.grammar(), plan.triggers()).close()  # llama.cpp parses it, or raises
    for t in tools:  # and forced, one by one
        forced = ToolPlan(syntax_by_name("hermes"), (t,), t.name, parallel=False)
        llama_backend.grammar(forced.grammar()).close()


@pytest.fixture(scope="module")
def tooled(bundled_path):
    with qwen_tool_engine(bundled_path, n_ctx=4096) as e:
        yield e


def keywords(schema) -> set[str]:
    """The JSON Schema keywords a schema uses, at any depth."""
    if isinstance(schema, dict):
        return set(schema) | {k for v in schema.values() for k in keywords(v)}
    if isinstance(schema, list):
        return {k for v in schema for k in keywords(v)}
    return set()


def richest(tools: tuple[Tool, ...], n: int = FORCED_PER_AGENT) -> tuple[Tool, ...]:
    """Tools that between them use every schema keyword the agent's tools use (each next one the
    tool adding the most keywords not yet covered), then the richest others up to ``n``: what a
    regression in the grammars would break first. Every tool's grammar is checked above, and
    `bench tools --schemas recorded` forces calls to all of them (the statistics)."""
    def kw(t: Tool) -> set[str]:
        return keywords(dict(t.parameters)) & SCHEMA_KEYWORDS

    ranked = sorted(tools, key=lambda t: (-len(kw(t)), -len(json.dumps(dict(t.parameters))), t.name))
    chosen: list[Tool] = []
    left = set().union(*(kw(t) for t in tools))
    while left:
        best = max(ranked, key=lambda t: len(kw(t) & left))  # the first of the richest on a tie
        chosen.append(best)
        left -= kw(best)
    chosen += [t for t in ranked if t not in chosen][:max(0, n - len(chosen))]
    return tuple(chosen)


def test_the_forced_tools_cover_every_keyword_the_agents_use():
    for agent, tools in agent_tools().items():
        used = set().union(*(keywords(dict(t.parameters)) for t in tools))
        forced = set().union(*(keywords(dict(t.parameters)) for t in richest(tools)))
        assert (used - forced) & SCHEMA_KEYWORDS == set(), agent  # property names are keys too: not counted
        assert len(richest(tools)) == min(len(tools), FORCED_PER_AGENT) or len(richest(tools)) <= 8, agent


@pytest.mark.parametrize("agent", TOOLED)
def test_forced_calls_to_each_agent_tool_validate(agent, tooled):
    """The agent's richest tools forced once each, sampled: every call validates against its schema.
    A tiny model may repeat itself inside a free string until ``max_tokens``: that reply comes back
    cut, with no call (never half a one), and such replies stay few."""
    tools = richest(agent_tools()[agent])
    cut = []
    for i, t in enumerate(tools):
        # The tool's own description is left out of the prompt (Claude Code's Workflow tool alone is
        # 5,000 tokens of prose, a minute and a half to read here): the schema makes the grammar.
        plan = tooled.plan_tools([dataclasses.replace(t, description="")], t.name, parallel=False)
        params = SamplingParams(temperature=0.8, top_k=40, seed=i, max_tokens=300)
        final = list(tooled.stream([Message("user", f"Use {t.name}.")], params, tools=plan))[-1]
        if final.finish_reason == "max_tokens":
            assert final.tool_calls == (), t.name
            cut.append(t.name)
            continue
        assert final.finish_reason == "tool_calls", (t.name, final.finish_reason, final.text[-200:])
        [call] = final.tool_calls
        assert call.name == t.name
        jsonschema.validate(json.loads(call.arguments), dict(t.parameters))
    assert len(cut) <= max(1, len(tools) // 8), cut


# -- through the server, in each agent's own protocol ----------------------------------------------

# The first is the tool each request forces. Claude's is Read: greedy, the tiny model writes Write's free "content"
# until max_tokens (the forced-calls test above samples Write instead).
KEEP = {"claude": ("Read", "Write", "Bash"), "codex": ("exec_command", "spawn_agent", "update_goal"),
        "opencode": ("write", "read", "bash")}


def trimmed(agent: str) -> tuple[str, dict, str]:
    """The agent's first request with tools, cut down: its own tools (a few), one short user turn,
    and the first tool forced, the way the agent's own protocol forces one."""
    path = next(p for p in posted() if p.parent.name == agent and recorded(p)["body"].get("tools"))
    ex = recorded(path)
    body = dict(ex["body"], stream=False)
    keep = KEEP[agent]
    if agent == "claude":
        body.update(tools=[t for t in body["tools"] if t["name"] in keep], system="You read and write files.",
                    messages=[{"role": "user", "content": "Show me what /tmp/hello.txt says."},
                              {"role": "system", "content": "Reminder: use the tools."}],
                    tool_choice={"type": "tool", "name": keep[0]}, max_tokens=200)
        body.pop("thinking", None)
    elif agent == "codex":
        tools = []
        for t in body["tools"]:
            if t.get("type") == "namespace":
                t = dict(t, tools=[f for f in t["tools"] if f["name"] in keep])
                if not t["tools"]:
                    continue
            elif t.get("name") not in keep and t.get("type") == "function":
                continue
            tools.append(t)
        body.update(tools=tools, input="Run ls.", instructions="You run commands.",
                    tool_choice={"type": "function", "name": keep[0]}, max_output_tokens=200)
    else:
        body.update(tools=[t for t in body["tools"] if t["function"]["name"] in keep],
                    messages=[{"role": "system", "content": "You write files."},
                              {"role": "user", "content": "Create hello.txt containing hi."}],
                    tool_choice={"type": "function", "function": {"name": keep[0]}}, max_tokens=200)
        body.pop("stream_options", None)
    # Greedy: the recorded bodies sample (Claude Code sends no temperature: 1.0, unseeded), and a sampled tiny
    # model may ramble inside a string until max_tokens, so the same test passed or failed by chance.
    body["temperature"] = 0.0
    return ex["path"].split("?")[0], body, keep[0]


@pytest.fixture(scope="module")
def server(tooled):
    with local_server(tooled, parallel=1, queue_limit=4) as srv:
        yield srv


@pytest.mark.parametrize("agent", ["claude", "codex", "opencode"])
def test_each_agent_request_through_the_server_gets_a_valid_call(agent, server):
    """Through the recording proxy ``bench agents`` reads agents' traffic with, too."""
    route, body, name = trimmed(agent)
    body["model"] = server.model_id
    proxy = RecordingProxy(server.url.removesuffix("/v1"))
    t0 = time.perf_counter()
    try:
        r = httpx.post(proxy.url + route, json=body, timeout=300)
    finally:
        proxy.close()
    assert r.status_code == 200, r.text
    seen = read_exchange(proxy.exchanges[0], t0)
    assert seen["status"] == 200 and seen["calls"] and set(seen["calls"]) == {name} and seen["prompt_tokens"] > 0
    assert 0 <= seen["started_s"] < 5  # when it began, in the agent's run (requests may overlap)
    # Its wait in the server's queue where the protocol carries the server's timings (Chat Completions).
    assert (seen["queue_wait_s"] is not None) == (agent == "opencode")
    assert seen["queue_wait_s"] is None or 0 <= seen["queue_wait_s"] <= seen["first_byte_s"]
    out = r.json()
    schemas = {t.name: dict(t.parameters) for t in agent_tools()[agent]}
    if agent == "claude":
        assert out["stop_reason"] == "tool_use"
        calls = [(b["name"], b["input"]) for b in out["content"] if b["type"] == "tool_use"]
    elif agent == "codex":
        assert "web_search" in r.headers["x-hearth-note"]
        calls = [(o["name"], json.loads(o["arguments"])) for o in out["output"] if o["type"] == "function_call"]
    else:
        assert out["choices"][0]["finish_reason"] == "tool_calls"
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for c in out["choices"][0]["message"]["tool_calls"]]
    assert calls and all(got == name for got, _ in calls)  # the forced tool (parallel calls allowed)
    for _, args in calls:
        jsonschema.validate(args, schemas[name])


def test_the_bench_runs_each_agent_in_its_own_scratch_folder(tmp_path, monkeypatch):
    # A stand-in for OpenCode that does the task where its PWD says, as OpenCode does: an inherited PWD
    # (the shell's) sent the real one's file into the checkout the bench was started from.
    from engine.bench.agents import run_agent

    fake = tmp_path / "bin" / "opencode"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport os\nwhere = os.path.join(os.environ['PWD'], 'hello.txt')\n"
                    "open(where, 'w').write('hi')\nprint('wrote', where)\n")  # a shell would correct PWD itself
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PWD", str(tmp_path))
    out = run_agent("opencode", "http://127.0.0.1:9", "key", "model", 60)
    assert out["exit"] == 0 and out["task_done"] and out["file"] == "hi", out
    assert not (tmp_path / "hello.txt").exists() and "hearth-opencode-" in out["agent_said"]
