"""Take the documentation's pictures of an MCP tool call: the card asking, and the card answered.

    .venv/bin/python scripts/tool_screenshots.py   # offscreen: assets/tool-card-asking.png, tool-card-done.png

All real: the window, the bundled model and the test suite's MCP server (tests/mcp_server.py,
over stdio, offering its ``add`` tool). The bundled model wears Qwen2.5's chat template (a
copy of its GGUF, made the way the tests make it), so it writes Hermes ``<tool_call>`` calls;
"the first step must call a tool" makes it call. ``--model FILE`` takes a model whose own
template takes tools instead (the documentation's pictures: Qwen2.5-Coder 1.5B from
``python -m engine models fetch-bench-pair``), also allowed one call. (Left to choose, that
model writes its call as a JSON code block instead of its template's ``<tool_call>``, which
is text, not a call; "must call" holds its first step to the grammar.) Everything happens in a scratch data folder that
is deleted afterwards.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "What is 12 + 30? Use the add tool."


def take(out: Path, scratch: Path, theme: str, own: str | None) -> None:
    from app.core.settings import Settings
    from app.window.selftest import wait_until
    from engine.models.catalogue import bundled_model_path
    from offscreen_pictures import open_window
    from serving import QWEN
    from test_app_think import with_template

    model = own or with_template(Path(bundled_model_path()), scratch / "smollm2-qwen2.5-template.gguf", QWEN)
    calc = {"name": "calculator", "kind": "stdio", "command": sys.executable,
            "args": [str(ROOT / "tests" / "mcp_server.py"), "stdio", str(scratch), "--only", "add"]}
    s = Settings(model=str(model), mcp_servers=[calc], tool_choice="required",
                 max_tool_calls=1, theme=theme)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 200 if own else 60})
    win = open_window(s)
    tools = win.replies.tools
    if not wait_until(lambda: "calculator" in tools.states, 60.0) or not tools.states["calculator"].ready:
        raise RuntimeError(f"the MCP server did not start: {tools.states}")
    win.send(PROMPT)
    win.rename_conversation(win.current, "A tool call")
    if not wait_until(lambda: (tools.pending is not None and tools.pending.card is not None) or win.stream is None,
                      300.0) or tools.pending is None:
        said = [m.content for m in win.store.messages(win.current)][1:]
        raise RuntimeError(f"the model made no call: {said} " + " | ".join(win.info.messages()))
    card = tools.pending.card
    wait_until(lambda: False, 0.5)
    suffix = "-dark" if theme == "dark" else ""
    if not win.grab().save(str(out / f"tool-card-asking{suffix}.png")):
        raise RuntimeError("could not write the asking picture")
    card.btn_allow.click()
    if not wait_until(lambda: win.stream is None, 600.0):
        raise RuntimeError("the reply did not end")
    wait_until(lambda: False, 0.5)
    if not win.grab().save(str(out / f"tool-card-done{suffix}.png")):
        raise RuntimeError("could not write the answered picture")
    win.close()


def main() -> int:
    from offscreen_pictures import take_pictures

    def more(p) -> None:
        p.add_argument("--model", default=None, help="a GGUF whose template takes tools (default: the bundled model)")

    return take_pictures(__doc__ or "", lambda out, scratch, t, args: take(
        out, scratch, t, args.model and str(Path(args.model).resolve())), prefix="hearth-tools-", more=more)


if __name__ == "__main__":
    sys.exit(main())
