"""What a model family writes: reasoning blocks and Harmony channels, as data plus one parser.

- ``layouts``: the families' layouts (``Layout``, ``ThinkControl``, ``FAMILIES``);
- ``detect``: ``detect(template, tokens)`` picks and refines a layout from the chat
  template and the vocabulary, never from the file name;
- ``parser``: ``ReasoningParser`` turns a token stream into reasoning, text and
  markup events and a ``ReplySummary``; ``force_close`` and ``opens_in_prompt``.
- ``tool_syntax``: how each family writes a tool call (``ToolSyntax``), known from the template;
  ``tools``: one request's tools (``Tool``, ``ToolPlan``) and their grammar (``json_grammar``);
  ``tool_parser``: the calls read back out of the answer.

How a caller uses it, once per model and once per reply::

    layout = detect(backend.chat_template, backend.vocab().tokens)      # None: no reasoning
    prompt = template.render(messages, **layout.think.kwargs(choice))   # where layout.think offers one
    parser = ReasoningParser(layout, in_reasoning=opens_in_prompt(layout, prompt))
    for token_id, piece in stream:           # piece: the token's text, special tokens spelled out
        for event in parser.feed(token_id, piece): ...
        # a thinking budget: once spent while parser.in_reasoning, feed force_close(layout)
    parser.finish(); parser.summary          # reasoning, text, unfinished, token counts, time marks

Qt-free and engine-free: the engine, the window, the API and the store consume
the events; none of them parses reply text.

This package is public: the app uses ThinkControl and the tool names (tools.py: a tool and a
reply's tool plan; json_grammar.py: a tool's schema checked), these imported when first asked
(docs/layout.md, "The engine's face").
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .detect import detect, template_variables
from .layouts import FAMILIES, Family, Layout, ThinkControl, layout_by_name
from .parser import Event, ReasoningParser, ReplySummary, force_close, opens_in_prompt, parse_reply

if TYPE_CHECKING:
    from .json_grammar import Grammar, SchemaError, check_schema
    from .tools import NAME_RE, Tool, ToolPlan

_WHERE = {**dict.fromkeys(["Grammar", "SchemaError", "check_schema"], ".json_grammar"),
          **dict.fromkeys(["NAME_RE", "Tool", "ToolPlan"], ".tools")}
__all__ = ["FAMILIES", "Event", "Family", "Grammar", "Layout", "NAME_RE", "ReasoningParser", "ReplySummary",
           "SchemaError", "ThinkControl", "Tool", "ToolPlan", "check_schema", "detect", "force_close",
           "layout_by_name", "opens_in_prompt", "parse_reply", "template_variables"]
__getattr__ = lazy_exports(__name__, _WHERE)
