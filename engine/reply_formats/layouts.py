"""What each model family writes around its reasoning, as data.

A family is recognised by what its chat template says (``detect.py``), never by
the model's file name. The table below holds each family's defaults; detection
refines the parts a template decides for itself (whether the generation prompt
already opens the block, which Think switch it reads, the model's default, how
it closes a block).

Two shapes exist:
- **tags**: the reasoning sits between an open and a close tag written in the
  reply (``<think>…</think>``, ``<seed:think>…</seed:think>``, Gemma 4's
  ``<|channel>thought…<channel|>``). Whether a tag is one special token or
  several text pieces makes no difference: the parser reads text.
- **channels**: gpt-oss's Harmony format, where every message of the reply has
  a header (``<|channel|>analysis<|message|>``) and the channel says what it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

ThinkKind = Literal["switch", "effort", "budget", "flag"]
THINK_KINDS = ("switch", "effort", "budget", "flag")


@dataclass(frozen=True, slots=True)
class ThinkControl:
    """The Think control a template offers, read from what the template reads.

    ``kind``:
    - ``switch``: a boolean template variable (``enable_thinking``, ``thinking``);
      ``choices`` is ``(True, False)``.
    - ``effort``: gpt-oss's ``reasoning_effort``; ``choices`` is
      ``("low", "medium", "high")``. The model always reasons; effort sets how much.
    - ``budget``: Seed-OSS's ``thinking_budget``; ``choices`` is ``(-1, 0)``
      (unlimited, off). Other numbers are a budget the model is told about.
    - ``flag``: no variable; a text in the system prompt switches it
      (Nemotron Nano v2: ``/think``, ``/no_think``); ``choices`` holds the two flags.

    ``default`` is what the template does when the caller passes nothing: one of
    ``choices``, or ``None`` where rendering could not tell.
    """

    kind: ThinkKind
    variable: str
    choices: tuple[Any, ...]
    default: Any = None

    def kwargs(self, value: Any) -> dict[str, Any]:
        """Template variables that select ``value`` (empty for a system-prompt flag)."""
        if self.kind == "flag":
            return {}
        if value not in self.choices and not (self.kind == "budget" and isinstance(value, int)):
            raise ValueError(f"{value!r} is not a choice for {self.variable}: {self.choices}")
        return {self.variable: value}

    def off_value(self) -> Any:
        """The choice that turns thinking off, or ``None`` where it cannot be turned off."""
        if self.kind == "effort":
            return None
        return self.choices[1]

    def as_dict(self) -> dict[str, Any]:
        """As JSON carries it (a Hearth server's model card, ``hearth_think``)."""
        return {"kind": self.kind, "variable": self.variable, "choices": list(self.choices), "default": self.default}

    @classmethod
    def from_dict(cls, d: Any) -> ThinkControl | None:
        """One from :meth:`as_dict` as another process sent it; None for what is not one (a server that
        describes its Think control otherwise, or not at all, offers none here)."""
        if not isinstance(d, dict) or d.get("kind") not in THINK_KINDS or not isinstance(d.get("variable"), str):
            return None
        choices = d.get("choices")
        if not isinstance(choices, list) or len(choices) < 2:
            return None
        default = d.get("default")
        return cls(d["kind"], d["variable"], tuple(choices), default if default in choices else None)


@dataclass(frozen=True, slots=True)
class Layout:
    """How one family lays out a reply. Plain data; ``parser.py`` reads it.

    ``open``/``close``: the tags around reasoning (tags shape). ``channels``:
    True for Harmony, where ``open``/``close`` are unused. ``prompt_opens``:
    with thinking on (or the template's default), the generation prompt already
    ends inside an open block, so the reply starts as reasoning. ``force_close``:
    what to append to end a block early (a thinking budget), so the model goes
    on to answer. ``trim``: characters the family writes between a tag and the
    text next to it (the newlines after ``<think>``, before ``</think>``, and
    before the answer); the parser reports them as markup, not as content.
    ``think``: the Think control, or None where the template offers none.
    ``tag_ids``: the tags that are one token in the model's vocabulary, by text.
    """

    name: str
    open: str = ""
    close: str = ""
    channels: bool = False
    prompt_opens: bool = False
    force_close: str = ""
    trim: str = "\n"
    think: ThinkControl | None = None
    tag_ids: dict[str, int] = field(default_factory=dict, compare=False)

    def with_(self, **changes: Any) -> Layout:
        """A copy with some fields changed (detection refines the defaults this way)."""
        return replace(self, **changes)


HARMONY_FINAL_HEADER = "<|start|>assistant<|channel|>final<|message|>"
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                  "<|constrain|>")
"""Harmony's control tokens, as the vocabulary spells them."""

_SWITCH = (True, False)


def _tags(name: str, force_close: str = "\n</think>\n\n", **kw: Any) -> Layout:
    return Layout(name=name, open="<think>", close="</think>", force_close=force_close, **kw)


@dataclass(frozen=True, slots=True)
class Family:
    """One row of the table: the template features that name a family, and its layout.

    Every string in ``markers`` must occur in the template source, and every
    name in ``variables`` must be a variable the template reads; the first
    matching row wins, so more specific rows come first.
    """

    markers: tuple[str, ...]
    layout: Layout
    variables: tuple[str, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family(("<|channel|>", "<|message|>"), Layout(
        name="gpt-oss", channels=True, trim="",
        force_close="<|end|>" + HARMONY_FINAL_HEADER,
        think=ThinkControl("effort", "reasoning_effort", ("low", "medium", "high"), "medium"))),
    Family(("<|channel>", "<channel|>"), Layout(
        name="gemma-4", open="<|channel>thought", close="<channel|>", force_close="\n<channel|>",
        think=ThinkControl("switch", "enable_thinking", _SWITCH, False))),
    Family(("<seed:think>",), Layout(
        name="seed-oss", open="<seed:think>", close="</seed:think>", force_close="\n</seed:think>\n",
        think=ThinkControl("budget", "thinking_budget", (-1, 0), -1))),
    Family(("]~b]", "<think>"), _tags("minimax-m2", prompt_opens=True)),
    Family(("<|im_assistant|>", "<think>"), _tags("kimi-k2-thinking", force_close="</think>")),
    Family(("<｜Assistant｜>", "<think>"), _tags(
        "deepseek-v3", force_close="</think>",
        think=ThinkControl("switch", "thinking", _SWITCH, False)), variables=("thinking",)),
    Family(("<｜Assistant｜>", "<think>"), _tags("deepseek-r1", prompt_opens=True)),
    Family(("<|assistant|>", "<think>"), _tags(
        "glm", force_close="</think>\n", think=ThinkControl("switch", "enable_thinking", _SWITCH, True))),
    Family(("<SPECIAL_11>", "<think>"), _tags(
        "nemotron", prompt_opens=True, think=ThinkControl("flag", "", ("/think", "/no_think"), "/think"))),
    Family(("<|im_start|>", "<think>", "truncate_history_thinking"), _tags(
        "nemotron-3", prompt_opens=True, think=ThinkControl("switch", "enable_thinking", _SWITCH, True))),
    Family(("<|im_start|>", "<think>"), _tags(
        "qwen3", think=ThinkControl("switch", "enable_thinking", _SWITCH, True))),
    Family(("</think>",), _tags("think-tags")),
)
"""The families, most specific first. Detection starts from a row's layout and
replaces what the template itself shows (see ``detect.py``)."""

THINK_TAGS = _tags("think-tags")
"""A layout for a vocabulary that has ``<think>``/``</think>`` tokens while its
template never mentions them (a GGUF whose template was replaced or lost)."""


def layout_by_name(name: str) -> Layout:
    """The table's layout for a family name (tests and the store's old replies use this)."""
    for family in FAMILIES:
        if family.layout.name == name:
            return family.layout
    raise KeyError(f"no reasoning layout named {name!r}")
