"""Start a coding agent in a terminal window, pointed at the window's local server (the Agents menu).

The agent is a terminal program, so it gets a terminal of its own: a small launcher script
(POSIX shell, or a .cmd file on Windows) sets the environment ``engine launch`` would
(engine/cli/launch.py: the base URL, the key, the model) and starts the agent in the folder the
user chose; the first terminal found runs it. Where no terminal is found, the result carries the
command to paste into one. Qt-free.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.serve import AGENTS, agent_command, find_agent, install_hint

# Terminals tried in order on Linux and the BSDs, each with how it runs one command.
TERMINALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x-terminal-emulator", ("-e",)), ("gnome-terminal", ("--",)), ("konsole", ("-e",)),
    ("xfce4-terminal", ("-x",)), ("kitty", ()), ("alacritty", ("-e",)), ("xterm", ("-e",)),
)
# An agent's prompt (tools and system prompt) takes about this many tokens of context.
AGENT_PROMPT_TOKENS = {"claude": 20_000, "codex": 12_000, "opencode": 10_000}


@dataclass(frozen=True, slots=True)
class Started:
    """What happened: ``ok``, and a sentence for the user (the command to paste when no terminal ran it)."""
    ok: bool
    message: str
    script: Path | None = None


def context_warning(agent: str, n_ctx: int) -> str | None:
    """A sentence when the model's context cannot hold the agent's prompt, else None."""
    need = AGENT_PROMPT_TOKENS[agent]
    if n_ctx >= need + 2048:
        return None
    return (f"{AGENTS[agent].title}'s prompt takes about {need:,} tokens and this model's context is {n_ctx:,}: "
            f"raise the context in Settings → Model (32,768 holds any of the agents)")


def launcher_script(agent: str, base_url: str, key: str, model: str, folder: Path,
                    program: str, where: Path | None = None) -> Path:
    """Write the script that starts ``agent`` in ``folder`` with its settings; its path."""
    cmd, env = agent_command(AGENTS[agent], program, base_url, key, model, folder=Path(tempfile.mkdtemp(
        prefix=f"hearth-{agent}-")))
    where = where or Path(tempfile.mkdtemp(prefix="hearth-launch-"))
    if sys.platform == "win32":
        lines = ["@echo off", f'cd /d "{folder}"'] + [f'set "{k}={v}"' for k, v in env.items()]
        lines.append(subprocess.list2cmdline(cmd))
        path = where / f"start-{agent}.cmd"
        path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
        return path
    lines = ["#!/bin/sh", f"cd {shlex.quote(str(folder))} || exit 1"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(f"echo {shlex.quote(f'{AGENTS[agent].title} on {model} at {base_url} (Hearth)')}")
    lines.append("exec " + " ".join(shlex.quote(c) for c in cmd))
    path = where / f"start-{agent}.sh"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o700)  # it holds the key: only the user reads it
    return path


def terminal_for(script: Path) -> list[str] | None:
    """The command that opens a terminal running ``script`` on this system, or None."""
    if sys.platform == "win32":
        return ["cmd", "/c", "start", "", "cmd", "/k", str(script)]
    if sys.platform == "darwin":
        return ["open", "-a", "Terminal", str(script)]
    for name, flag in TERMINALS:
        found = shutil.which(name)
        if found:
            return [found, *flag, str(script)]
    return None


def start_agent(agent: str, base_url: str, key: str, model: str, folder: Path) -> Started:
    """Open a terminal with ``agent`` running in ``folder`` against the server at ``base_url``."""
    a = AGENTS[agent]
    program = find_agent(a)
    if program is None:
        return Started(False, install_hint(a))
    script = launcher_script(agent, base_url, key, model, folder, program)
    term = terminal_for(script)
    if term is None:
        return Started(False, f"No terminal program was found to run {a.title}: run {script} in one", script)
    try:
        subprocess.Popen(term, cwd=str(folder), start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    except OSError as e:
        return Started(False, f"The terminal did not start ({e}): run {script} in one", script)
    return Started(True, f"{a.title} started in a terminal, in {folder}, on this window's model", script)
