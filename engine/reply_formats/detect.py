"""Know a model's reasoning layout from its chat template and vocabulary.

Never from the file name. Three questions, each answered from what the model
carries:
1. **Which family?** The first row of ``layouts.FAMILIES`` whose marker strings
   all occur in the template source. A vocabulary with ``<think>``/``</think>``
   or Harmony tokens names a layout even when the template does not.
2. **Which Think switch?** The variables the template reads
   (``jinja2.meta.find_undeclared_variables``): ``reasoning_effort``,
   ``thinking_budget``, ``enable_thinking``, ``thinking``, or a ``/no_think``
   flag in its text. A switch that changes nothing in the rendered prompt is
   not offered. The model's default is the choice whose prompt equals the one
   rendered with nothing passed.
3. **Does the generation prompt open the block?** The template is rendered in
   the sandbox (``ChatTemplate``) with thinking on, and the prompt is checked
   for ending inside an open block. The closing text for a thinking budget is
   read the same way, from how the template writes an earlier reply's reasoning.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.meta

from ..prompt.chat_template import ChatTemplate
from ..errors import TemplateError
from .layouts import FAMILIES, HARMONY_FINAL_HEADER, HARMONY_TOKENS, THINK_TAGS, Layout, ThinkControl, layout_by_name
from .parser import opens_in_prompt

_PROBE = "Hi"
_R, _A = "R7x-reasoning", "A7x-answer"   # unlikely to occur in any template
_MAX_CLOSE = 80


@functools.lru_cache(maxsize=32)
def template_variables(source: str) -> frozenset[str]:
    """The variables a template reads from its caller (parsed, never run)."""
    from ..prompt.chat_template import _environment  # the sandbox: same extensions, so every template parses

    try:
        ast = _environment().parse(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"the chat template has a syntax error on line {e.lineno}: {e.message}") from e
    return frozenset(jinja2.meta.find_undeclared_variables(ast))


def _family(source: str) -> Layout | None:
    for family in FAMILIES:
        if all(marker in source for marker in family.markers) and (
                not family.variables or set(family.variables) <= _variables_or_none(source)):
            return family.layout
    return None


def _variables_or_none(source: str) -> frozenset[str]:
    try:
        return template_variables(source)
    except TemplateError:
        return frozenset()


def _from_vocab(tokens: set[str]) -> Layout | None:
    if "<|channel|>" in tokens and "<|message|>" in tokens:
        return layout_by_name("gpt-oss").with_(think=None)
    if "<think>" in tokens and "</think>" in tokens:
        return THINK_TAGS
    return None


def _control(source: str, variables: frozenset[str]) -> ThinkControl | None:
    """The switch the template reads, with the table's choices; the default is filled in later."""
    if "reasoning_effort" in variables:
        return ThinkControl("effort", "reasoning_effort", ("low", "medium", "high"))
    if "thinking_budget" in variables:
        return ThinkControl("budget", "thinking_budget", (-1, 0))
    for name in ("enable_thinking", "thinking"):
        if name in variables:
            return ThinkControl("switch", name, (True, False))
    for off in ("/no_think", "/nothink"):
        if off in source:
            return ThinkControl("flag", "", ("/think", off))
    return None


def _messages(control: ThinkControl | None, value: Any) -> list[dict[str, Any]]:
    user = {"role": "user", "content": _PROBE}
    if control is not None and control.kind == "flag" and value is not None:
        return [{"role": "system", "content": value}, user]
    return [user]


def _render(template: ChatTemplate, control: ThinkControl | None, value: Any,
            extra: Sequence[Mapping[str, Any]] = (), generation: bool = True) -> str | None:
    """The probe conversation's prompt with ``value`` chosen (None: the caller passes nothing)."""
    kwargs = control.kwargs(value) if control is not None and value is not None else {}
    try:
        return template.render([*_messages(control, value), *extra], add_generation_prompt=generation,
                               **kwargs)
    except TemplateError:
        return None


def _on_value(control: ThinkControl | None) -> Any:
    if control is None:
        return None
    if control.kind == "effort":
        return control.default if control.default is not None else "medium"
    return control.choices[0]


def _refine_control(template: ChatTemplate, control: ThinkControl | None) -> ThinkControl | None:
    """Keep a switch only if it changes the prompt; fill in the default from rendering."""
    if control is None:
        return None
    renders = {value: _render(template, control, value) for value in control.choices}
    if len({r for r in renders.values() if r is not None}) < 2:
        return None                                   # it reads the name but nothing changes
    plain = _render(template, control, None)
    default = next((v for v, r in renders.items() if r is not None and r == plain), None)
    return ThinkControl(control.kind, control.variable, control.choices, default)


def _closing(template: ChatTemplate, layout: Layout, control: ThinkControl | None) -> str | None:
    """The text the template writes between an earlier reply's reasoning and its answer."""
    reply = {"role": "assistant", "content": _A,
             # every name templates read reasoning under (transformers' aliases)
             "reasoning_content": _R, "reasoning": _R, "thinking": _R}
    text = _render(template, control, _on_value(control), extra=[reply], generation=False)
    if text is None or _R not in text or _A not in text:
        return None
    i = text.rfind(_R) + len(_R)
    j = text.find(_A, i)
    if j < 0:
        return None
    between = text[i:j]
    if len(between) > _MAX_CLOSE:
        return None
    if layout.channels:
        return between if between.endswith(HARMONY_FINAL_HEADER) else None
    return between if layout.close in between else None


def _tag_ids(layout: Layout, tokens: Sequence[str]) -> dict[str, int]:
    wanted = {layout.open, layout.close} - {""}
    for tag in tuple(wanted):
        wanted.update(re.findall(r"<\|?[^<>|]*\|?>", tag))
    if layout.channels:
        wanted.update(HARMONY_TOKENS)
    found: dict[str, int] = {}
    for i, text in enumerate(tokens):
        if text in wanted and text not in found:
            found[text] = i
    return found


def detect(template: str | None, tokens: Sequence[str] = (), *,
           bos_token: str = "", eos_token: str = "") -> Layout | None:
    """The reasoning layout of a model with this chat template and vocabulary, or None.

    ``tokens``: the vocabulary's token texts by id (``Vocab.tokens``), special
    tokens included; it names a layout the template does not and fills
    ``Layout.tag_ids``. A template that fails to render keeps the table's values.
    """
    source = template if isinstance(template, str) and template.strip() else ""
    layout = _family(source) if source else None
    if layout is None:
        layout = _from_vocab(set(t for t in tokens if t.startswith("<")))
        if layout is None:
            return None
        if not source:
            return layout.with_(tag_ids=_tag_ids(layout, tokens))
    try:
        compiled = ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
        variables = template_variables(source)
    except TemplateError:
        compiled = None
    if compiled is None or _render(compiled, None, None) is None:
        return layout.with_(tag_ids=_tag_ids(layout, tokens))   # nothing to learn by rendering
    control = _refine_control(compiled, _control(source, variables))
    changes: dict[str, Any] = {"think": control, "tag_ids": _tag_ids(layout, tokens)}
    prompt = _render(compiled, control, _on_value(control))
    if prompt is not None:
        changes["prompt_opens"] = opens_in_prompt(layout, prompt)
    closing = _closing(compiled, layout, control)
    if closing is not None:
        changes["force_close"] = closing
    return layout.with_(**changes)
