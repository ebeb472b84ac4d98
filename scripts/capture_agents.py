#!/usr/bin/env python3
"""Record what real coding agents send Hearth, as test fixtures (tests/fixtures/agents/AGENT/NN.json).

Each installed agent (Claude Code, Codex CLI, OpenCode; ``python -m engine launch`` says how to
install one) is started the way ``engine launch`` starts it, against ``engine serve`` behind a
recording proxy (engine/bench/agent_proxy.py), with a one-tool task in a scratch folder. Every
request it makes (its endpoint, headers with secrets taken out, and JSON body: tools, system
prompt, messages) is written out. Run it again when an agent's new version changes what it sends;
the tests replay the fixtures (tests/test_agent_requests.py).

``--mcp`` records instead the tools the known MCP servers from PyPI offer (Settings → Tools' list:
fetch, git, time), as tests/fixtures/mcp/NAME.json: ``bench tools --schemas recorded`` forces
calls over them beside the agents' tools.

    .venv/bin/python scripts/capture_agents.py [--model M] [--agents claude,codex,opencode] [--seconds 180]
    .venv/bin/python scripts/capture_agents.py --mcp
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.bench.agent_proxy import RecordingProxy  # noqa: E402
from engine.bench.agents import RUN, free_port  # noqa: E402
from engine.serve.agents import AGENT_CONTEXT, AGENTS, agent_command, find_agent, running_model, start_server  # noqa: E402


def capture_mcp(out: Path) -> int:
    """Each known PyPI server's tools (name, description, input schema), as its MCP list gives them."""
    from app.bridge.mcp_client import McpClient
    from app.core import known_servers
    from app.core.mcp_servers import McpServer

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as repo:
        subprocess.run(["git", "init", "-q", repo], check=True)
        for k in known_servers.KNOWN:
            if not k.pypi:
                continue
            program, args, note = known_servers.command_for(k, repo)
            if note:
                print(f"{k.name}: {note}", file=sys.stderr)
                continue
            client = McpClient()
            try:
                state = client.connect([McpServer(k.name, "stdio", command=program, args=tuple(args))]).result(60)
                if not state[k.name].ready:
                    print(f"{k.name}: {state[k.name]}", file=sys.stderr)
                    continue
                tools = [{"name": t.name, "description": t.description, "inputSchema": dict(t.schema)}
                         for t in client.tools()]
            finally:
                client.close()
            (out / f"{k.name}.json").write_text(json.dumps({"server": k.pypi, "tools": tools}, indent=1) + "\n")
            print(f"{k.name}: {len(tools)} tools", file=sys.stderr)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--agents", default="claude,codex,opencode")
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--ctx", type=int, default=AGENT_CONTEXT, help="the server's context (agents' prompts are long)")
    p.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "agents"))
    p.add_argument("--mcp", action="store_true", help="record the known MCP servers' tools instead")
    a = p.parse_args()
    if a.mcp:
        return capture_mcp(Path(a.out).parent / "mcp")
    port, key = free_port(), "capture-key"
    log = Path(tempfile.gettempdir()) / "hearth-capture-serve.log"
    server = start_server(a.model, port, key, a.ctx, log)
    try:
        deadline = time.monotonic() + 300
        model = None
        while model is None and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.5)
            model = running_model(f"http://127.0.0.1:{port}", key)
        if model is None:
            print(f"the server did not start; see {log}", file=sys.stderr)
            return 1
        for name in a.agents.split(","):
            agent = AGENTS[name]
            program = find_agent(agent)
            if program is None:
                print(f"{name}: not installed, skipped", file=sys.stderr)
                continue
            proxy = RecordingProxy(f"http://127.0.0.1:{port}")
            with tempfile.TemporaryDirectory(prefix=f"hearth-{name}-") as work:
                cmd, env = agent_command(agent, program, proxy.url, key, model, RUN[name], folder=Path(work))
                env = {**os.environ, **env, "HOME": work, "XDG_CONFIG_HOME": work, "XDG_DATA_HOME": work}
                try:
                    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=a.seconds)
                    print(f"{name}: exit {r.returncode}; {r.stderr.strip()[-300:]}", file=sys.stderr)
                except subprocess.TimeoutExpired:
                    print(f"{name}: stopped after {a.seconds:.0f} s", file=sys.stderr)
            proxy.close()
            out = Path(a.out) / name
            out.mkdir(parents=True, exist_ok=True)
            for old in out.glob("*.json"):
                old.unlink()
            for i, ex in enumerate(proxy.exchanges):
                (out / f"{i:02d}.json").write_text(json.dumps(ex.fixture(), indent=1, ensure_ascii=False) + "\n")
            print(f"{name}: {len(proxy.exchanges)} requests: " +
                  ", ".join(f"{ex.method} {ex.path} -> {ex.status}" for ex in proxy.exchanges), file=sys.stderr)
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
