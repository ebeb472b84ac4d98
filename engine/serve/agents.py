"""Coding agents pointed at Hearth's server: which agents Hearth knows (Claude Code, Codex CLI,
OpenCode), where one is installed, the settings each reads (base URL, key, model), and starting
``engine serve`` for them. ``python -m engine launch`` (engine/cli/launch.py), the window's Agents
menu and ``bench agents`` all start agents through this.

- Claude Code: Anthropic's Messages API (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN``,
  ``ANTHROPIC_MODEL`` and the small model, a long ``API_TIMEOUT_MS`` for a CPU's prefill);
- Codex CLI: a model provider of its own on the Responses API (``-c model_providers.hearth=...``);
- OpenCode: a provider in a config file (``OPENCODE_CONFIG``) through ``@ai-sdk/openai-compatible``.

Agents' prompts are long (Claude Code's system prompt and tools are about 20,000 tokens), so a
server started for them asks for a context that holds them (``AGENT_CONTEXT``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

AGENT_CONTEXT = 32768
KEY_ENV = "HEARTH_API_KEY"


@dataclass(frozen=True, slots=True)
class Agent:
    name: str            # what ``engine launch`` calls it
    title: str
    program: str         # the command it installs
    npm: str             # the package


AGENTS = {a.name: a for a in (
    Agent("claude", "Claude Code", "claude", "@anthropic-ai/claude-code"),
    Agent("codex", "Codex CLI", "codex", "@openai/codex"),
    Agent("opencode", "OpenCode", "opencode", "opencode-ai"),
)}


def agent_folder() -> Path:
    """Where ``npm install --prefix`` may have put agents for Hearth (looked at after the PATH)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "hearth" / "agents"


def find_agent(agent: Agent) -> str | None:
    """The agent's program: on the PATH, or installed for Hearth under ``agent_folder()``."""
    found = shutil.which(agent.program)
    if found:
        return found
    local = agent_folder() / "node_modules" / ".bin" / agent.program
    return str(local) if local.exists() else None


def install_hint(agent: Agent) -> str:
    return (f"{agent.title} is not installed; install it with: npm install -g {agent.npm}  "
            f"(or: npm install --prefix {agent_folder()} {agent.npm})")


def agent_command(agent: Agent, program: str, base_url: str, key: str, model: str,
                  extra: Sequence[str] = (), folder: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and the environment (added to this process's) that point ``agent`` at
    Hearth's server at ``base_url`` (http://host:port, no /v1) with ``key`` and ``model``.
    ``folder``: where OpenCode's config file is written."""
    env = {KEY_ENV: key}
    if agent.name == "claude":
        env.update(ANTHROPIC_BASE_URL=base_url, ANTHROPIC_AUTH_TOKEN=key, ANTHROPIC_API_KEY="",
                   ANTHROPIC_MODEL=model, ANTHROPIC_SMALL_FAST_MODEL=model, ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
                   ANTHROPIC_DEFAULT_SONNET_MODEL=model, ANTHROPIC_DEFAULT_OPUS_MODEL=model,
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                   API_TIMEOUT_MS="3600000")
        return [program, *extra], env
    if agent.name == "codex":
        provider = (f'{{name="Hearth", base_url="{base_url}/v1", env_key="{KEY_ENV}", wire_api="responses"}}')
        return [program, "-c", "model_provider=hearth", "-c", f"model_providers.hearth={provider}",
                "-m", model, *extra], env
    folder = folder or Path(tempfile.mkdtemp(prefix="hearth-opencode-"))
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "model": f"hearth/{model}",
              "provider": {"hearth": {"npm": "@ai-sdk/openai-compatible", "name": "Hearth",
                                      "options": {"baseURL": f"{base_url}/v1", "apiKey": f"{{env:{KEY_ENV}}}"},
                                      "models": {model: {"name": model}}}}}
    path = folder / "opencode.json"
    path.write_text(json.dumps(config, indent=2))
    env["OPENCODE_CONFIG"] = str(path)
    return [program, *extra], env


def running_model(base_url: str, key: str) -> str | None:
    """The model a Hearth server at ``base_url`` serves (its first in /v1/models), or None if none answers."""
    req = urllib.request.Request(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            data = json.load(r).get("data") or []
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return data[0]["id"] if data and isinstance(data[0], dict) and "id" in data[0] else None


def start_server(model: str | None, port: int, key: str, n_ctx: int, log: Path) -> subprocess.Popen:
    """``engine serve`` in the background with a context that holds an agent's prompt; its log in ``log``."""
    cmd = [sys.executable, "-m", "engine", "serve", "--port", str(port), "--api-key", key, "--ctx", str(n_ctx),
           "--parallel", "1"]
    if model:
        cmd += ["--model", model]
    with open(log, "w") as f:  # a file, not a pipe: llama.cpp's load log would fill a pipe and block
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
