"""Render a model's own Jinja chat template, the way transformers does, in a sandbox.

The template string comes from the model file (GGUF ``tokenizer.chat_template``),
so it is untrusted code. It runs in Jinja's ``ImmutableSandboxedEnvironment``
and only ever sees plain copies of our data (str, int, float, bool, None,
lists, tuples and dicts of those), so it cannot reach files, run code or change
the caller's objects.

To produce byte-identical prompts to what the model was trained with, the
environment follows transformers' conventions (``render_jinja_template``):
``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson``
filter that does not HTML-escape or sort keys, the ``raise_exception`` and
``strftime_now`` helpers, ``tools``/``documents`` defined as ``None`` by default,
and a no-op ``{% generation %}`` tag so templates that mark assistant turns for
training still compile.

Size limits: the rendered text is capped at ``MAX_OUTPUT_CHARS``, and string or
list repetition, powers, and call/filter arguments that would build something
bigger are refused before they allocate. This stops the obvious memory bombs;
it is not a hard memory or CPU limit (a template can still loop for a long
time or grow a string inside a macro), which is one more reason the engine
renders off the GUI thread.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from ..errors import TemplateError
from .messages import Message, alias_reasoning_fields

MAX_OUTPUT_CHARS = 4 * 1024 * 1024
"""Largest prompt we accept, in characters. Far beyond any context window."""

_MAX_POWER_BITS = 64 * 1024  # ints past this are useless in a prompt and slow to build

CHATML_FALLBACK = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Plain ChatML, for model files that carry no template of their own."""


def _now() -> datetime:
    # A seam for tests: strftime_now must read the real clock in the app.
    return datetime.now()


def _strftime_now(fmt: str) -> str:
    """Templates (Llama 3.x) put today's date in the system prompt with this."""
    return _now().strftime(fmt)


def _raise_exception(message: Any) -> NoReturn:
    """Templates call this to reject a conversation they cannot format."""
    raise TemplateError(f"the chat template rejected this conversation: {_one_line(message)}")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """transformers' ``tojson``: unlike Jinja's own it keeps ``<>&'`` and key order.

    Tool schemas rendered with Jinja's filter would differ from what the model
    saw in training.
    """
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


class _DictFactory:
    """Stands in for the ``dict`` global, which Jinja binds to the builtin type.

    The immutable sandbox judges a method by the object it is read from, so
    ``dict.update(some_dict, ...)`` on the *type* passes its check and mutates
    data. This callable builds dicts and offers nothing else to misuse.
    """

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    @staticmethod
    def fromkeys(keys: Iterable[Any], value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


class _GenerationTag(jinja2.ext.Extension):
    """Accept ``{% generation %}...{% endgeneration %}`` and render its body.

    transformers uses the tag to find assistant tokens for training masks;
    for inference it means nothing, but without it such templates fail to parse.
    """

    tags = {"generation"}

    def parse(self, parser: Any) -> list[Any]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _check_sizes(values: Iterable[Any]) -> None:
    """Refuse arguments that only make sense for building huge strings."""
    for value in values:
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and abs(value) > MAX_OUTPUT_CHARS:
            raise SecurityError(f"the number {value} is too large for a chat template")
        if isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_OUTPUT_CHARS:
            raise SecurityError("a value passed in the chat template is too large")


def _guard_filter(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter so its size arguments (``center(10**9)``) are checked.

    Filters are called directly by compiled templates, not through
    ``Sandbox.call``. The filtered value itself is not checked, and neither is
    a context/environment argument; ``functools.wraps`` keeps Jinja's
    ``jinja_pass_arg`` marker so those still get passed.
    """
    skip = 2 if hasattr(func, "jinja_pass_arg") else 1

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _check_sizes(args[skip:])
        _check_sizes(kwargs.values())
        return func(*args, **kwargs)

    return guarded


class _Namespace(jinja2.utils.Namespace):
    """``namespace()`` whose attributes cannot grow past the size limit.

    A namespace is the only state that survives a loop iteration, so
    ``{% set ns.s = ns.s ~ ns.s %}`` in a loop is the cheapest way to double a
    string into gigabytes. Underscore names are refused too: they could never
    be read back through the sandbox, so only an attack would set them.
    """

    def __setitem__(self, name: str, value: Any) -> None:
        if str(name).startswith("_"):
            raise SecurityError(f"namespace attribute {name!r} is not allowed")
        _check_sizes((value,))
        super().__setitem__(name, value)


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, made strict and size-aware."""

    intercepted_binops = frozenset({"*", "**"})

    @staticmethod
    def concat(parts: Iterable[str]) -> str:
        # Joins the output of macros and {% set %}/{% filter %} blocks, which
        # the streaming cap in render() only sees once they are complete.
        parts = list(parts)
        if sum(map(len, parts)) > MAX_OUTPUT_CHARS:
            raise SecurityError("a block of the chat template would be larger than the prompt limit")
        return "".join(parts)

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        # Jinja returns an Undefined that prints as "" and only fails when
        # used; an attempt at ``__class__`` or ``list.append`` should fail now.
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} "
                            "value is not allowed")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if (isinstance(seq, (str, list, tuple)) and isinstance(times, int)
                        and len(seq) * times > MAX_OUTPUT_CHARS):
                    raise SecurityError("repetition would build a value larger than the prompt limit")
        elif (operator == "**" and isinstance(left, int) and isinstance(right, int)
                and abs(left) > 1 and abs(left).bit_length() * right > _MAX_POWER_BITS):
            raise SecurityError("the number would be too large for a chat template")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_sizes(args)
        _check_sizes(kwargs.values())
        return super().call(__context, __obj, *args, **kwargs)


def _jinja_is_safe(version: str) -> bool:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    return parts >= [3, 1, 6]


@functools.cache
def _environment() -> _Sandbox:
    """Build the shared environment once; compiled templates keep a reference."""
    if not _jinja_is_safe(jinja2.__version__):
        # Older releases have public sandbox escapes (str.format, |attr).
        raise TemplateError(f"jinja2 {jinja2.__version__} is too old to run chat templates safely; "
                            "install jinja2 >= 3.1.6")
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True,
                   extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(f) for name, f in env.filters.items()}
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       dict=_DictFactory(), namespace=_Namespace)
    return env


def _one_line(text: Any, limit: int = 300) -> str:
    """Error text for a status bar: one line, bounded length."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _plain(value: Any) -> Any:
    """A copy built only from JSON-like types.

    The sandbox blocks a fixed list of dangerous attributes; an arbitrary
    object (a Path, an array) may expose methods it does not know about, and
    a copy also means the template can never touch the caller's data.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    raise TemplateError(f"cannot pass a {type(value).__name__} to a chat template")


def _message_dict(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(message, Message):
        # Content parts, reasoning_content, tool calls: see engine/messages.py.
        return _plain(message.as_dict())
    if isinstance(message, Mapping):
        # Like transformers' apply_chat_template: a None field is dropped, since
        # many templates test "is defined" and would otherwise print "None".
        return {k: v for k, v in _plain(message).items() if v is not None}
    raise TemplateError(f"a chat message must be a Message or a mapping, not {type(message).__name__}")


class ChatTemplate:
    """One compiled chat template. ``render`` is safe to call from any thread."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        if not isinstance(source, str) or not source.strip():
            raise TemplateError("the chat template is empty")
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"the chat template has a syntax error on line {e.lineno}: "
                                f"{_one_line(e.message)}") from e
        except Exception as e:  # e.g. RecursionError on absurd nesting
            raise TemplateError(f"the chat template could not be compiled: "
                                f"{type(e).__name__}: {_one_line(e)}") from e
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[Message | Mapping[str, str]], *,
               add_generation_prompt: bool = True, **extra: Any) -> str:
        """Format ``messages`` into the prompt text the model expects.

        ``extra`` reaches the template as variables (``tools``, ``date_string``,
        ``enable_thinking``...). Every failure, including the template's own
        ``raise_exception``, becomes a ``TemplateError`` with a one-line message.
        """
        variables: dict[str, Any] = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "tools": None,
            "documents": None,
            **_plain(extra),
            # Like transformers, reasoning under any of its names reaches the template under the
            # names templates read (reasoning_content, thinking); the template decides what to keep.
            "messages": alias_reasoning_fields([_message_dict(m) for m in messages]),
            "add_generation_prompt": bool(add_generation_prompt),
        }
        parts: list[str] = []
        size = 0
        try:
            for chunk in self._template.generate(variables):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateError(f"the chat template produced more than "
                                        f"{MAX_OUTPUT_CHARS // (1024 * 1024)} MiB of text; stopped")
                parts.append(chunk)
        except TemplateError:
            raise
        except SecurityError as e:
            raise TemplateError(f"the chat template tried something unsafe and was stopped: "
                                f"{_one_line(e)}") from e
        except jinja2.UndefinedError as e:
            raise TemplateError(f"the chat template used something undefined: {_one_line(e)}") from e
        except jinja2.TemplateError as e:
            raise TemplateError(f"the chat template failed: {_one_line(e)}") from e
        except Exception as e:
            raise TemplateError(f"the chat template failed: {type(e).__name__}: {_one_line(e)}") from e
        return "".join(parts)
