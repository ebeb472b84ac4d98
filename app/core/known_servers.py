"""MCP servers people use, each with the command that starts it here: Settings → Tools offers them.

A Python server (from PyPI) runs with this Python when it is installed beside Hearth
(``pip install mcp-server-fetch`` in Hearth's environment; the test set-up installs them), else
through ``uvx`` where uv is on the PATH; the filesystem server (npm) runs through ``npx``. A
server whose runner is missing is still offered, with the line that says how to install it.
``{folder}`` in the arguments is the folder the user picks (the repository, or what the file
server may read). Qt-free.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KnownServer:
    name: str
    about: str
    pypi: str = ""       # the PyPI package (its module: the name with _ for -)
    npm: str = ""        # the npm package
    args: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.pypi.replace("-", "_")


KNOWN = (
    KnownServer("fetch", "Fetches web pages and gives them to the model as Markdown", pypi="mcp-server-fetch"),
    KnownServer("git", "Reads a Git repository: status, log, diffs, branches", pypi="mcp-server-git",
                args=("--repository", "{folder}")),
    KnownServer("time", "The current time, and times converted between zones", pypi="mcp-server-time"),
    KnownServer("files", "Reads and writes files inside one folder", npm="@modelcontextprotocol/server-filesystem",
                args=("{folder}",)),
)


def command_for(k: KnownServer, folder: str = "") -> tuple[str, list[str], str]:
    """(program, its arguments, a note): how this machine starts ``k``; the note says how to install
    what is missing ("" when it can start now). ``folder`` fills ``{folder}`` in the arguments."""
    args = [a.replace("{folder}", folder or "~") for a in k.args]
    if k.pypi:
        if importlib.util.find_spec(k.module) is not None:
            return sys.executable, ["-m", k.module, *args], ""
        if shutil.which("uvx"):
            return "uvx", [k.pypi, *args], ""
        return sys.executable, ["-m", k.module, *args], f"install it first: pip install {k.pypi}"
    if shutil.which("npx"):
        return "npx", ["-y", k.npm, *args], ""
    return "npx", ["-y", k.npm, *args], "it needs Node.js (npx) on this computer"
