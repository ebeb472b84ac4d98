"""What a model family writes: reasoning blocks and Harmony channels, as data plus one parser.

- ``layouts``: the families' layouts (``Layout``, ``ThinkControl``, ``FAMILIES``);
- ``detect``: ``detect(template, tokens)`` picks and refines a layout from the chat
  template and the vocabulary, never from the file name;
- ``parser``: ``ReasoningParser`` turns a token stream into reasoning, text and
  markup events and a ``ReplySummary``; ``force_close`` and ``opens_in_prompt``.

Qt-free and engine-free: the engine, the window, the API and the store consume
the events; none of them parses reply text.
"""
from .detect import detect, template_variables
from .layouts import FAMILIES, Family, Layout, ThinkControl, by_name
from .parser import Event, ReasoningParser, ReplySummary, force_close, opens_in_prompt, parse_reply

__all__ = ["FAMILIES", "Event", "Family", "Layout", "ReasoningParser", "ReplySummary", "ThinkControl",
           "by_name", "detect", "force_close", "opens_in_prompt", "parse_reply", "template_variables"]
