"""What each model family writes when it calls a tool, as data, and how it is known.

A family is recognised from its chat template (what it writes for an earlier
call) and never from the file name. Each ``ToolSyntax`` says how a call section
opens (its trigger, which is also what llama.cpp's lazy grammar waits for),
how one call is written, and how calls are joined:

- ``hermes``: Qwen 2.5/3, Hermes: ``<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>``;
- ``llama3``: Llama 3.1-3.3: the reply is ``{"name": N, "parameters": {...}}``;
- ``mistral``: Mistral Nemo and kin: ``[TOOL_CALLS][{"name": N, "arguments": {...}}, ...]``
  (ids of 9 letters and digits, which its template checks);
- ``mistral-args``: Devstral, Mistral Small 3.2: ``[TOOL_CALLS]N[ARGS]{...}``;
- ``deepseek``: DeepSeek V3.1/3.2: ``<｜tool▁calls▁begin｜>``, then per call
  ``<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``, then ``<｜tool▁calls▁end｜>``;
- ``glm``: GLM 4.5-4.7: ``<tool_call>N\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>``,
  a string's value written bare, every other value as JSON.

``detect_tools`` picks the syntax from a template, ``unsupported_tools`` says why a template that
reads tools gets none. A request's tools and their grammar in this syntax: tools.py; reading calls
written in it: tool_parser.py.
"""
from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Literal

Body = Literal["json", "name-args", "kv"]


@dataclass(frozen=True, slots=True)
class ToolSyntax:
    """How one family writes tool calls.

    ``open``: what starts the call section (the lazy grammar's trigger); ``close``: what
    ends it ("" where nothing does). ``call_open``/``call_close``: around each call
    (after ``open`` for the first). ``join``: between two calls. ``body``: ``json`` (an
    object with the name under ``name_key`` and the arguments under ``args_key``),
    ``name-args`` (the name, ``args_sep``, the arguments' JSON) or ``kv`` (GLM's
    ``<arg_key>``/``<arg_value>`` pairs). ``parallel``: whether several calls can be
    written. ``id_style``: ``openai`` (call_ + 24 hex) or ``alnum9`` (Mistral).
    ``at_start``: a call is only recognised at the start of the answer (Llama 3's bare JSON).
    """

    name: str
    open: str
    close: str = ""
    call_open: str = ""
    call_close: str = ""
    join: str = ""
    body: Body = "json"
    name_key: str = "name"
    args_key: str = "arguments"
    args_sep: str = ""
    parallel: bool = True
    id_style: str = "openai"
    at_start: bool = False
    id_in_call: bool = False         # the call object may carry its own ``"id"`` (Mistral's template writes it)
    fence: str = ""                  # auto only: a call may also be one JSON call in this fence (```json ... ```)
    markers: tuple[str, ...] = ()   # what the template's source must hold
    absent: tuple[str, ...] = ()    # ...and must not

    def new_id(self) -> str:
        if self.id_style == "alnum9":
            return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
        return "call_" + secrets.token_hex(12)


SYNTAXES: tuple[ToolSyntax, ...] = (
    ToolSyntax("glm", open="<tool_call>", call_close="</tool_call>", join="\n<tool_call>", body="kv",
               markers=("<arg_key>",)),
    ToolSyntax("hermes", open="<tool_call>", call_open="\n", call_close="\n</tool_call>",
               join="\n<tool_call>", fence="```json", markers=("<tool_call>",), absent=("<function=", "<arg_key>")),
    ToolSyntax("deepseek", open="<｜tool▁calls▁begin｜>", close="<｜tool▁calls▁end｜>",
               call_open="<｜tool▁call▁begin｜>", call_close="<｜tool▁call▁end｜>",
               body="name-args", args_sep="<｜tool▁sep｜>",
               markers=("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>' + tool['function']['arguments']")),
    ToolSyntax("mistral-args", open="[TOOL_CALLS]", join="[TOOL_CALLS]", body="name-args", args_sep="[ARGS]",
               markers=("[TOOL_CALLS]", "[ARGS]")),
    ToolSyntax("mistral", open="[TOOL_CALLS][", close="]", join=", ", id_style="alnum9", id_in_call=True,
               markers=("[TOOL_CALLS][",)),
    ToolSyntax("llama3", open="{", args_key="parameters", parallel=False, at_start=True,
               markers=('"parameters": ', "<|python_tag|>")),
)


def syntax_by_name(name: str) -> ToolSyntax:
    for s in SYNTAXES:
        if s.name == name:
            return s
    raise KeyError(name)


def detect_tools(template: str | None) -> ToolSyntax | None:
    """The family's tool syntax from its chat template, or None: the template takes no tools,
    or writes calls in a syntax Hearth cannot parse (``unsupported_tools`` says which)."""
    if not template or "tools" not in template:
        return None
    for s in SYNTAXES:
        if all(m in template for m in s.markers) and not any(a in template for a in s.absent):
            return s
    return None


def unsupported_tools(template: str | None) -> str | None:
    """Why a template that reads ``tools`` gets none from Hearth (None: it gets them, or reads none)."""
    if not template or "tools" not in template or detect_tools(template) is not None:
        return None
    if "<function=" in template:
        return "this model writes tool calls as XML (<function=...><parameter=...>), which Hearth does not parse yet"
    if "<|call|>" in template and "<|channel|>" in template:
        return "this model writes tool calls on Harmony's commentary channel, which Hearth does not parse yet"
    return "this model's chat template mentions tools but writes calls in a syntax Hearth does not know"
