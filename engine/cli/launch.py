"""``python -m engine launch claude|codex|opencode``: a coding agent already pointed at Hearth.

What ``ollama launch`` and LM Studio's ``lms`` do for their users: the local server is used when it
runs (started here, with ``engine serve``, when it does not, and stopped when the agent exits),
and the agent is started with the settings it reads (engine/serve/agents.py: the base URL, a key,
the model, and what keeps it quiet: no telemetry, no updates). An agent that is not installed is
one line that says how to install it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from ..serve.agents import AGENT_CONTEXT, AGENTS, KEY_ENV, agent_command, find_agent, install_hint, running_model, \
    start_server


def launch(name: str, *, model: str | None = None, port: int = 8765, key: str | None = None,
           n_ctx: int = AGENT_CONTEXT, extra: Sequence[str] = (), wait_s: float = 600.0) -> int:
    """Start ``name`` pointed at Hearth; the agent's exit status (2: it could not start)."""
    agent = AGENTS.get(name)
    if agent is None:
        print(f"error: unknown agent {name!r}; choose one of {', '.join(AGENTS)}", file=sys.stderr)
        return 2
    program = find_agent(agent)
    if program is None:
        print(install_hint(agent), file=sys.stderr)
        return 2
    key = key or os.environ.get(KEY_ENV) or "hearth-local"
    base = f"http://127.0.0.1:{port}"
    server = None
    served = running_model(base, key)
    if served is None:
        log = Path(tempfile.gettempdir()) / f"hearth-serve-{port}.log"
        print(f"starting Hearth's server on {base} (context {n_ctx:,}; log: {log})...", file=sys.stderr)
        server = start_server(model, port, key, n_ctx, log)
        deadline = time.monotonic() + wait_s
        while served is None and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            served = running_model(base, key)
        if served is None:
            server.terminate()
            print(f"error: Hearth's server did not start; see {log}", file=sys.stderr)
            return 2
    cmd, env = agent_command(agent, program, base, key, served, extra)
    print(f"{agent.title} on {served} at {base}", file=sys.stderr)
    try:
        return subprocess.run(cmd, env={**os.environ, **env}).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
