"""``python -m engine bench agents``: real coding agents doing a one-tool task against Hearth.

Each installed agent (Claude Code, Codex CLI, OpenCode: ``python -m engine launch`` says how to
install one) is started as ``engine launch`` starts it, through a recording proxy
(agent_proxy.py), against ``engine serve`` on ``--model`` (default: Qwen2.5-Coder-1.5B from
``models fetch-bench-pair``, a model that calls tools) with a context that holds its prompt.
The task needs one tool call: create a file with a word in it, in a scratch folder. Per agent it
prints what happened: each request (its endpoint, status, time to the response's first byte, the
prompt tokens and how many of them came from the prefix cache, the calls the reply made), whether
the file is there with the word, and the agent's exit status and last words.

Agents' prompts are long (Claude Code's is about 20,000 tokens), so on a CPU the first request
reads its prompt for minutes; from the second request on the prefix cache holds it. This is a
benchmark, not a test: CI replays the requests recorded here (tests/test_agent_requests.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ..serve.agents import AGENT_CONTEXT, AGENTS, agent_command, find_agent, install_hint, running_model, start_server
from ..workers.machines import free_loopback_port
from .agent_proxy import Exchange, RecordingProxy

TASK = "Create a file named hello.txt in the current folder containing the word hi."
# How each agent runs one task without asking (root refuses Claude Code's skip-permissions flag).
RUN = {"claude": ["-p", TASK, "--permission-mode", "acceptEdits", "--max-turns", "4"],
       "codex": ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK],
       "opencode": ["run", TASK]}


def _events(raw: bytes) -> list[dict[str, Any]]:
    """A response's JSON: the body, or each SSE ``data:`` line of a stream."""
    text = raw.decode("utf-8", "replace")
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                out.append(json.loads(line[5:]))
            except ValueError:
                continue
    return out


def read_exchange(ex: Exchange, t0: float | None = None) -> dict[str, Any]:
    """One request as the report shows it: when it started and its first byte came, prompt and cached
    tokens from the usage the reply carried (whichever protocol), how long it waited in the server's
    queue (where the reply carries llama-server-style timings; None elsewhere), and its tool calls."""
    prompt = cached = queue_ms = None
    calls: list[str] = []
    for ev in _events(ex.response):
        if isinstance(ev.get("timings"), dict):  # Hearth's server on Chat Completions: its own queue wait
            queue_ms = ev["timings"].get("queue_ms", queue_ms)
        use = ev.get("usage") or (ev.get("message") or {}).get("usage") or (ev.get("response") or {}).get("usage")
        if isinstance(use, dict):
            if "cache_read_input_tokens" in use:  # Anthropic: input_tokens are the ones computed
                cached = use.get("cache_read_input_tokens") or 0
                prompt = (use.get("input_tokens") or 0) + cached if use.get("input_tokens") is not None else prompt
            elif "prompt_tokens" in use:
                prompt = use["prompt_tokens"]
                cached = (use.get("prompt_tokens_details") or {}).get("cached_tokens", cached)
            elif "input_tokens" in use:
                prompt = use["input_tokens"]
                cached = (use.get("input_tokens_details") or {}).get("cached_tokens", cached)
        block = ev.get("content_block") or ev.get("item") or {}
        if block.get("type") in ("tool_use", "function_call") and ev.get("type") in (
                "content_block_start", "response.output_item.done"):
            calls.append(block.get("name", "?"))
        whole = ev.get("content") if ev.get("type") == "message" else ev.get("output")  # a reply not streamed
        if isinstance(whole, list):
            calls += [b.get("name", "?") for b in whole if isinstance(b, dict)
                      and b.get("type") in ("tool_use", "function_call")]
        for choice in ev.get("choices") or []:
            for c in (choice.get("delta") or choice.get("message") or {}).get("tool_calls") or []:
                name = (c.get("function") or {}).get("name")
                if name:
                    calls.append(name)
    started = {"started_s": round(ex.started - t0, 2)} if t0 is not None else {}  # requests may overlap
    return {"request": f"{ex.method} {ex.path.split('?')[0]}", "status": ex.status, **started,
            "first_byte_s": round(ex.first_byte_s, 2) if ex.first_byte_s is not None else None,
            "queue_wait_s": round(queue_ms / 1e3, 2) if isinstance(queue_ms, (int, float)) else None,
            "seconds": round(ex.seconds, 2), "prompt_tokens": prompt, "cached_tokens": cached, "calls": calls}


def run_agent(name: str, base: str, key: str, model: str, seconds: float) -> dict[str, Any]:
    agent = AGENTS[name]
    program = find_agent(agent)
    if program is None:
        return {"agent": name, "skipped": install_hint(agent)}
    proxy = RecordingProxy(base)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"hearth-{name}-") as work:
        cmd, env = agent_command(agent, program, proxy.url, key, model, RUN[name], folder=Path(work))
        # PWD too: OpenCode takes its folder from it, so an inherited one sent its file elsewhere
        env = {**os.environ, **env, "HOME": work, "XDG_CONFIG_HOME": work, "XDG_DATA_HOME": work, "PWD": work}
        try:
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=seconds)
            code, said = r.returncode, (r.stdout + r.stderr).strip()[-400:]
        except subprocess.TimeoutExpired:
            code, said = None, f"stopped after {seconds:.0f} s"
        made = Path(work) / "hello.txt"
        content = made.read_text(errors="replace").strip() if made.is_file() else None
    proxy.close()
    reqs = [read_exchange(ex, t0) for ex in proxy.exchanges]
    gen = [r for r in reqs if r["request"].startswith("POST")]
    return {"agent": agent.title, "exit": code, "seconds": round(time.perf_counter() - t0, 1),
            "task_done": content is not None and "hi" in content.lower(), "file": content,
            "requests": reqs, "calls_made": [c for r in gen for c in r["calls"]],
            "first_request_first_byte_s": gen[0]["first_byte_s"] if gen else None,
            "second_request_cached_tokens": gen[1]["cached_tokens"] if len(gen) > 1 else None,
            "agent_said": said}


def default_model() -> str | None:
    from ..models import catalogue

    p = catalogue.bench_model_path(catalogue.BENCH_TARGET)
    return str(p) if p else None


def bench_agents(a: argparse.Namespace) -> dict[str, Any]:
    model = a.model or default_model()
    if model is None:
        raise SystemExit("bench agents needs a model that calls tools: run `python -m engine models "
                         "fetch-bench-pair`, or give --model")
    which = [w for w in (getattr(a, "agents", None) or "claude,codex,opencode").split(",") if w]
    port, key = free_loopback_port(), "bench-agents"
    log = Path(tempfile.gettempdir()) / "hearth-bench-agents-serve.log"
    server = start_server(model, port, key, a.ctx or AGENT_CONTEXT, log)
    base = f"http://127.0.0.1:{port}"
    try:
        served = None
        deadline = time.monotonic() + 600
        while served is None and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            served = running_model(base, key)
        if served is None:
            raise SystemExit(f"the server did not start; see {log}")
        runs = [run_agent(w, base, key, served, getattr(a, "seconds", None) or 1800) for w in which]
    finally:
        server.terminate()
        server.wait(30)
    return {"model": served, "context": a.ctx or AGENT_CONTEXT, "task": TASK, "agents": runs}
