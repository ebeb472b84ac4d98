"""One request's tools: which functions it offers, how the model must call them, and the grammar.

``Tool`` is one function (its name, description and ``parameters`` JSON Schema); ``ToolPlan`` is
one request's tools in the model family's ``ToolSyntax`` (tool_syntax.py): the grammar (``grammar()``;
lazy, behind the trigger, for ``tool_choice`` auto) and what it leaves to the validator, and the
``ToolCallParser`` (tool_parser.py) reads the calls back. ``check_tool`` and ``tools_from_openai``
read a request's tools and name the field that is wrong; ``strict_problem`` applies OpenAI's rules
for a strict function.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .glm_args import kv_arguments
from .json_grammar import Grammar, SchemaError, check_schema, json_literal, literal
from .tool_syntax import ToolSyntax

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_PARALLEL = 8   # calls in one reply, where the family can write several
FENCE_CLOSE = "```"


@dataclass(frozen=True, slots=True)
class Tool:
    """One function a request offers: its name, description and ``parameters`` JSON Schema.
    ``schema_at``: where the request gave the schema (``tools[0].input_schema`` on Anthropic's
    wire), so an error names the client's own field; the name is its sibling ``.name``."""
    name: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    schema_at: str = field(default="", compare=False)
    strict: bool = False  # OpenAI's structured outputs: its schema rules apply (strict_problem)

    def at(self, i: int, key: str = "parameters") -> str:
        """The request's field for this tool's ``key`` (``parameters`` or ``name``)."""
        base = self.schema_at or f"tools[{i}].function.parameters"
        return base if key == "parameters" else base.rsplit(".", 1)[0] + "." + key

    def as_dict(self) -> dict[str, Any]:
        """OpenAI's shape, which chat templates read (``tool.function.name``...)."""
        fn: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            fn["description"] = self.description
        if self.strict:
            fn["strict"] = True
        return {"type": "function", "function": fn}


class ToolError(ValueError):
    """Tools a request cannot use (a bad name, a schema the grammar cannot express)."""

    def __init__(self, message: str, param: str = "tools") -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """One request's tools: which, how the model must call them, and in whose syntax.

    ``choice``: ``auto`` (the model may answer or call: the grammar waits for the
    syntax's opener), ``required`` (it must call one) or a tool's name (it must call
    that one); both of the last apply from the first answer token. ``none``: the
    template still shows the tools (so the prompt, and its cached prefix, is the one
    the other steps read), but the reply is text: no grammar, no call parsing."""

    syntax: ToolSyntax
    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True

    def __post_init__(self) -> None:
        if not self.tools:
            raise ToolError("tools must list at least one function")
        names = [t.name for t in self.tools]
        for i, t in enumerate(self.tools):
            if not NAME_RE.match(t.name):
                raise ToolError(f"{t.at(i, 'name')} must be 1-64 letters, digits, _ . or -, got {t.name!r}",
                                t.at(i, "name"))
        if len(set(names)) != len(names):
            raise ToolError("tools: two functions have the same name")
        if self.choice not in ("auto", "required", "none") and self.choice not in names:
            raise ToolError(f"tool_choice names {self.choice!r}, which is not one of the tools", "tool_choice")

    def calling(self) -> ToolPlan | None:
        """This plan where the reply may call (its grammar and parser apply), None under ``none``."""
        return None if self.choice == "none" else self

    @property
    def many(self) -> bool:
        return self.parallel and self.syntax.parallel

    @property
    def lazy(self) -> bool:
        return self.choice == "auto"

    def offered(self) -> tuple[Tool, ...]:
        return self.tools if self.choice in ("auto", "required") else tuple(t for t in self.tools
                                                                           if t.name == self.choice)

    def template_tools(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.tools]

    def with_tools(self, template_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        """The template's variables with ``tools`` added (every tool, even under a named choice:
        the model sees what it was offered, the grammar decides what it may call)."""
        return {**(template_kwargs or {}), "tools": self.template_tools()}

    def triggers(self) -> tuple[str, ...]:
        """llama.cpp lazy-grammar trigger patterns (regexes; the grammar is fed from the first group)."""
        if not self.lazy:
            return ()
        if self.syntax.at_start:
            return (r"^\s*(" + re.escape(self.syntax.open) + r')[\s\S]*$',)
        out: tuple[str, ...] = ("(" + re.escape(self.syntax.open) + ")",)
        if self.syntax.fence:  # a fenced call only when it names one of the tools: other JSON stays free
            names = "|".join(re.escape(t.name) for t in self.offered())
            ws = r"[ \t\n]{0,8}"  # as the grammar's fenced head allows (ws), so it reads what fired it
            out += ("(" + re.escape(self.syntax.fence) + r"[ \t\n]{0,4}\{" + ws + '"' + re.escape(self.syntax.name_key)
                    + '"' + ws + ":" + ws + '"(?:' + names + ')")',)
        return out

    def fenced(self) -> ToolSyntax | None:
        """The syntax of a fenced call (``syntax.fence``), where the model may write one: auto only."""
        s = self.syntax
        if not (self.lazy and s.fence):
            return None
        return ToolSyntax(f"{s.name}-fenced", open=s.fence, call_close=FENCE_CLOSE, parallel=False,
                          name_key=s.name_key, args_key=s.args_key)

    def grammar(self) -> str:
        """GBNF for the whole call section, from its opener on; raises ToolError for a schema that is
        not valid JSON Schema, names a ``$ref`` it lacks, or breaks OpenAI's strict rules where the
        tool asked for them. What the grammar leaves to the validator is in ``unchecked()``."""
        return self._built()[0]

    def unchecked(self) -> list[str]:
        """The schema keywords (with where they are) that the grammar does not enforce: every call is
        validated against them, and a call that fails is drawn again (decode/resample.py)."""
        return self._built()[1]

    def _built(self) -> tuple[str, list[str]]:
        g = Grammar()
        s = self.syntax
        alts = []
        for i, t in enumerate(self.tools):
            if t not in self.offered():
                continue
            try:
                check_schema(dict(t.parameters))
                why = strict_problem(dict(t.parameters)) if t.strict else None
                if why is not None:
                    raise ToolError(f"{t.at(i)}: invalid schema for the strict function {t.name!r}: {why}", t.at(i))
                alts.append(self._call(g, s, t, i))
            except SchemaError as e:
                raise ToolError(f"{t.at(i)}.{e.path}: {str(e).split(': ', 1)[-1]}"
                                if e.path else f"{t.at(i)}: {e}", t.at(i)) from None
        call = g.add("call", " | ".join(alts))
        first = call if s.at_start else f"{literal(s.open)} {call}"  # at_start: the opener is the JSON's "{"
        more = f"{literal(s.join)} {call}" if s.join else call
        body = f"{first} ({more}){{0,{MAX_PARALLEL - 1}}}" if self.many else first
        if s.close:
            body += f" {literal(s.close)}"
        fenced = self.fenced()
        if fenced is not None:  # one call, as the fenced trigger left it: the same call JSON between the fences
            inner = replace(fenced, call_close="")
            g.rules["ws"] = "[ \\t\\n]{0,8}"  # the head as the trigger matched it: any white space
            bare = [self._call(g, inner, t, i, "ws") for i, t in enumerate(self.tools) if t in self.offered()]
            body = f'({body}) | {literal(fenced.open)} [ \\t\\n]{{0,4}} ({" | ".join(bare)}) [ \\t\\n]{{0,4}} ' \
                   f'{literal(FENCE_CLOSE)}'

        lead = '[ \\n]{0,2} ' if not self.lazy else ""
        return g.text(f"{lead}{body}"), g.unchecked

    def _call(self, g: Grammar, s: ToolSyntax, t: Tool, i: int, space: str = "sp") -> str:
        name = f"t{i}"
        pre = literal(s.call_open) + " " if s.call_open else ""
        post = " " + literal(s.call_close) if s.call_close else ""
        if s.body == "kv":
            return g.add(f"{name}-call", f"{pre}{literal(t.name)} {kv_arguments(g, t.parameters, name)}{post}")
        args = g.value(dict(t.parameters), f"{name}-args")
        if s.body == "name-args":
            return g.add(f"{name}-call", f"{pre}{literal(t.name)} {literal(s.args_sep)} {args}{post}")
        head = f'"{{" {space} {json_literal(s.name_key)} {space} ":" {space} {json_literal(t.name)} {space} "," ' \
               f'{space} {json_literal(s.args_key)} {space} ":" {space}'
        own_id = ' ("," sp "\\"id\\"" sp ":" sp "\\"" [a-zA-Z0-9]{9} "\\"")?' if s.id_in_call else ""
        return g.add(f"{name}-call", f'{pre}{head} {args}{own_id} sp "}}"{post}')


def check_tool(fn: Any, at: str, schema_key: str = "parameters") -> Tool:
    """One tool's ``{name, description, <schema_key>}`` (``at``: where the request has it, as
    ``tools[0].function``) as a Tool; a bad shape raises ToolError naming the field."""
    name, params, desc, strict = fn.get("name"), fn.get(schema_key), fn.get("description"), fn.get("strict", False)
    if not isinstance(name, str):
        raise ToolError(f"{at}.name must be text", f"{at}.name")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise ToolError(f"{at}.{schema_key} must be a JSON Schema object", f"{at}.{schema_key}")
    if desc is None:
        desc = ""
    if not isinstance(desc, str):
        raise ToolError(f"{at}.description must be text", f"{at}.description")
    if strict is None:
        strict = False
    if not isinstance(strict, bool):
        raise ToolError(f"{at}.strict must be true or false", f"{at}.strict")
    return Tool(name, params, desc, schema_at=f"{at}.{schema_key}", strict=strict)


def tools_from_openai(raw: Any, *, flat: bool = False) -> tuple[Tool, ...]:
    """OpenAI's ``tools`` list as Tools: Chat Completions' ``{type: function, function: {...}}``,
    or (``flat``) the Responses API's ``{type: function, name, parameters...}``; a bad shape
    raises ToolError naming the field."""
    shape = "{type: 'function', name, parameters}" if flat else "{type: 'function', function: {name, parameters}}"
    if not isinstance(raw, list) or not raw:
        raise ToolError(f"tools must be a non-empty list of {shape}")
    out = []
    for i, t in enumerate(raw):
        fn = t if flat else (t.get("function") if isinstance(t, dict) else None)
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise ToolError(f"tools[{i}] must be {shape}", f"tools[{i}]")
        out.append(check_tool(fn, f"tools[{i}]" if flat else f"tools[{i}].function"))
    return tuple(out)


# OpenAI's structured outputs take a subset of JSON Schema; a strict tool outside it is refused, as OpenAI does.
STRICT_UNSUPPORTED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                      "patternProperties", "propertyNames", "unevaluatedProperties", "minProperties",
                      "maxProperties", "contains", "uniqueItems")


def strict_problem(schema: Any, context: tuple[str, ...] = ()) -> str | None:
    """Why ``schema`` breaks OpenAI's rules for a strict function (every object closed with
    ``additionalProperties: false`` and listing all its properties in ``required``, the root an
    object, no keyword outside the subset), or None."""
    if not context and (not isinstance(schema, dict) or schema.get("type") != "object"):
        return "the root must be an object (type 'object')"
    if not isinstance(schema, dict):
        return None
    where = f"In context={context}, " if context else ""
    for key in STRICT_UNSUPPORTED:
        if key in schema:
            return f"{where}{key!r} is not permitted"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{where}'additionalProperties' is required to be supplied and to be false"
        missing = [k for k in schema.get("properties", {}) if k not in (schema.get("required") or [])]
        if missing:
            return f"{where}'required' is required to include every key in properties; missing {missing[0]!r}"
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            why = strict_problem(sub, (*context, key, name))
            if why:
                return why
    for key in ("items", "anyOf", "prefixItems"):
        subs = schema.get(key)
        for j, sub in enumerate(subs if isinstance(subs, list) else [subs] if isinstance(subs, dict) else []):
            why = strict_problem(sub, (*context, key, str(j)) if isinstance(subs, list) else (*context, key))
            if why:
                return why
    return None
