"""engine.messages: the message model (parts, reasoning, tool calls), its checks, and its
rendering for chat templates, compared with transformers' own helpers and renderer.

transformers is imported for real: ``_alias_reasoning_fields`` (transformers 5) is the
function whose behaviour ``alias_reasoning_fields`` must have, and ``render_jinja_template``
is the reference renderer for real thinking templates (Qwen3, gpt-oss, Seed-OSS).
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from transformers.utils import chat_template_utils as hf

from engine.prompt import chat_template as ct
from engine.prompt.chat_template import ChatTemplate
from engine.errors import HearthError, TemplateError
from engine.prompt.messages import (REASONING_FIELDS, DocumentPart, ImagePart, Message, TextPart, ToolCall,
    ToolCallDelta, alias_reasoning_fields, merge, render)
from engine.prompt.builder import as_messages
from engine.types import EVENT_KINDS, TEXT, StreamEvent

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
TEMPLATES = {"qwen3": "Qwen-Qwen3-0.6B", "gpt_oss": "openai-gpt-oss-120b", "seed_oss": "ByteDance-Seed-OSS"}
SHA_A = "a" * 64
SHA_B = "0123456789abcdef" * 4


def fixture(name: str) -> str:
    # The chat templates of Qwen/Qwen3-0.6B, openai/gpt-oss-120b and ByteDance-Seed/Seed-OSS,
    # as llama.cpp's models/templates keeps them.
    return (FIXTURES / f"{TEMPLATES[name]}.jinja").read_text(encoding="utf-8")


def reference(source: str, messages: list[dict], **kwargs) -> str:
    rendered, _ = hf.render_jinja_template(conversations=[messages], chat_template=source, **kwargs)
    return rendered[0]


# -- the type -------------------------------------------------------------------------------

def test_a_text_message_is_what_it_always_was():
    m = Message("user", "héllo 👋")
    assert (m.role, m.content, m.text) == ("user", "héllo 👋", "héllo 👋")
    assert m.parts == (TextPart("héllo 👋"),) and m.only_text and m.attachments == ()
    assert (m.reasoning, m.tool_calls, m.tool_call_id) == (None, (), None)
    assert m.as_dict() == {"role": "user", "content": "héllo 👋"}
    assert list(m.as_dict()) == ["role", "content"]
    assert Message("assistant", "") .parts == () and Message("assistant", "").as_dict() == {
        "role": "assistant", "content": ""}
    assert m == Message.of("user", "héllo ", "👋") == Message("user", parts=[TextPart("héllo 👋")])
    assert hash(m) == hash(Message.of("user", "héllo 👋"))
    with pytest.raises(AttributeError):
        m.content = "changed"  # type: ignore[misc]


def test_parts_keep_their_order_and_content_is_their_text():
    img, doc = ImagePart(SHA_A, "image/png"), DocumentPart(SHA_B, "Vertrag.pdf", pages=12, mime="application/pdf")
    m = Message.of("user", "Look at ", img, "", " and ", doc, "?")
    assert m.parts == (TextPart("Look at "), img, TextPart(" and "), doc, TextPart("?"))
    assert m.content == "Look at  and ?" and not m.only_text and m.attachments == (img, doc)
    assert m.as_dict() == {"role": "user", "content": [
        {"type": "text", "text": "Look at "}, {"type": "image", "sha256": SHA_A, "mime": "image/png"},
        {"type": "text", "text": " and "},
        {"type": "document", "sha256": SHA_B, "name": "Vertrag.pdf", "pages": 12, "mime": "application/pdf"},
        {"type": "text", "text": "?"}]}
    assert Message.from_dict(m.as_dict()) == m
    # Giving the same text both ways is allowed; different text is not.
    assert Message("user", "Look at  and ?", m.parts) == m


@pytest.mark.parametrize("make, says", [
    (lambda: Message("robot", "x"), "unknown message role 'robot'"),
    (lambda: Message("user", 5), "content must be text"),  # type: ignore[arg-type]
    (lambda: Message("user", "x", parts=("x",)), "must be a TextPart"),  # type: ignore[arg-type]
    (lambda: Message("user", "x", parts="x"), "sequence of"),  # type: ignore[arg-type]
    (lambda: Message("user", "other", parts=(TextPart("x"),)), "differ"),
    (lambda: Message("user", "x", reasoning="why"), "only an assistant message has reasoning"),
    (lambda: Message("assistant", "x", reasoning=3), "reasoning must be text"),  # type: ignore[arg-type]
    (lambda: Message("user", "x", tool_calls=(ToolCall("1", "f"),)), "only an assistant message makes"),
    (lambda: Message("assistant", "x", tool_calls=({"name": "f"},)), "ToolCall values"),  # type: ignore[arg-type]
    (lambda: Message("assistant", "x", tool_call_id="c1"), "only a tool message answers"),
    (lambda: Message("tool", "x", tool_call_id=1), "tool_call_id must be text"),  # type: ignore[arg-type]
    (lambda: ImagePart("A" * 64, "image/png"), "SHA-256 in lowercase hex"),
    (lambda: ImagePart(SHA_A[:-1], "image/png"), "SHA-256"),
    (lambda: ImagePart(SHA_A, "application/pdf"), "must start with 'image/'"),
    (lambda: DocumentPart(SHA_A, "  "), "needs a name"),
    (lambda: DocumentPart(SHA_A, "a.pdf", pages=-1), "page count"),
    (lambda: DocumentPart(SHA_A, "a.pdf", pages=True), "page count"),
    (lambda: TextPart(b"x"), "must hold text"),  # type: ignore[arg-type]
    (lambda: ToolCall("1", ""), "needs the name"),
    (lambda: ToolCall("1", "f", {"a": 1}), "JSON text"),  # type: ignore[arg-type]
    (lambda: ToolCall(None, "f"), "id must be text"),  # type: ignore[arg-type]
    (lambda: Message.from_dict({"role": "user", "content": [{"type": "audio"}]}), "unknown content part"),
    (lambda: Message.from_dict({"role": "assistant", "content": "", "tool_calls": "f()"}), "must be a list"),
    (lambda: Message.from_dict(["user", "x"]), "must be a mapping"),  # type: ignore[arg-type]
])
def test_bad_values_fail_with_a_clear_message(make, says):
    with pytest.raises(HearthError, match=says):
        make()


def test_tool_calls_take_openais_shape_with_object_arguments():
    calls = (ToolCall("call_1", "get_weather", '{"city": "Zürich", "days": [1, 2]}'),
             ToolCall("call_2", "broken", '{"city": "Zür'),    # cut short: kept as written
             ToolCall("", "list_args", "[1, 2]"))              # JSON, but not an object
    m = Message("assistant", "", tool_calls=calls)
    assert m.as_dict()["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2]}}},
        {"id": "call_2", "type": "function", "function": {"name": "broken", "arguments": '{"city": "Zür'}},
        {"id": "", "type": "function", "function": {"name": "list_args", "arguments": "[1, 2]"}}]
    assert Message.from_dict(m.as_dict()).tool_calls[1:] == calls[1:]
    # Arguments given as an object come back as JSON text.
    back = Message.from_dict({"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": {"q": "日本"}}}]})
    assert back.tool_calls == (ToolCall("c", "f", '{"q": "日本"}'),) and back.content == ""
    tool = Message("tool", '{"temp_c": 21}', tool_call_id="call_1")
    assert tool.as_dict() == {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"}
    assert Message.from_dict(tool.as_dict()) == tool


def test_from_dict_reads_reasoning_under_each_of_its_names_in_transformers_order():
    for name in REASONING_FIELDS:
        assert Message.from_dict({"role": "assistant", "content": "A", name: "R"}).reasoning == "R"
    both = {"role": "assistant", "content": "A", "reasoning": "third", "thinking": "second"}
    assert Message.from_dict(both).reasoning == "second"
    assert Message.from_dict({"role": "assistant", "content": None, "thinking": None}).reasoning is None


def test_merging_two_turns_keeps_everything():
    img = ImagePart(SHA_A, "image/jpeg")
    a = Message.of("user", "one", img)
    b = Message("user", "two")
    assert merge(a, b) == Message.of("user", "one", img, "\n\ntwo")
    r = merge(Message("assistant", "x", reasoning="r1"), Message("assistant", "y", tool_calls=(ToolCall("1", "f"),)))
    assert (r.content, r.reasoning, r.tool_calls) == ("x\n\ny", "r1", (ToolCall("1", "f"),))
    assert merge(Message("assistant", "x", reasoning="r1"), Message("assistant", "y", reasoning="r2")).reasoning \
        == "r1\n\nr2"
    # The prompt builder's merge gives the text it always gave.
    merged = as_messages([Message("user", "a"), {"role": "user", "content": "b"}, Message("assistant", "c")])
    assert merged == [Message("user", "a\n\nb"), Message("assistant", "c")]
    assert as_messages([{"role": "assistant", "content": "c", "reasoning_content": "r"}]) == [
        Message("assistant", "c", reasoning="r")]


def test_stream_events_are_typed_and_text_keeps_its_name():
    assert TEXT == "delta" and EVENT_KINDS == ("delta", "reasoning", "tool_call", "context", "final")
    ev = StreamEvent("delta", "hi")
    assert (ev.reasoning, ev.reasoning_open, ev.tool_call, ev.tool_calls) == (None, False, None, ())
    delta = StreamEvent("tool_call", tool_call=ToolCallDelta(0, "call_1", "f", '{"a"'))
    assert delta.tool_call is not None and delta.tool_call.arguments == '{"a"'
    final = StreamEvent("final", "answer", "eos", reasoning="thought", tool_calls=(ToolCall("call_1", "f"),))
    assert (final.text, final.reasoning, final.tool_calls[0].name) == ("answer", "thought", "f")


# -- the reasoning aliases, against transformers' own function ----------------------------------

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "reasoning_content": "greet"}],
    [{"role": "assistant", "content": "A", "thinking": "t only"}],
    [{"role": "assistant", "content": "A", "reasoning": "r only"}],
    [{"role": "assistant", "content": "A", "reasoning": "r", "thinking": "t"}],          # thinking wins
    [{"role": "assistant", "content": "A", "thinking": "t", "reasoning_content": "rc"}],  # rc wins, t stays
    [{"role": "assistant", "content": "A", "reasoning_content": ""}],                    # "" is reasoning
    [{"role": "assistant", "content": "A", "reasoning_content": None, "reasoning": "late"}],
    [{"role": "system", "content": "S"}, {"role": "assistant", "content": "no reasoning"}],
]


@pytest.mark.parametrize("chat", CONVERSATIONS)
def test_alias_reasoning_fields_is_transformers_alias_reasoning_fields(chat):
    expected = hf._alias_reasoning_fields(json.loads(json.dumps(chat)))
    before = json.loads(json.dumps(chat))
    got = alias_reasoning_fields(chat)
    assert got == expected
    assert [list(m.items()) for m in got] == [list(m.items()) for m in expected]  # key order too
    assert chat == before  # the input is untouched


def test_render_gives_what_transformers_gives_for_the_same_conversation():
    img = ImagePart(SHA_A, "image/png")
    msgs = [Message("system", "Sé breve."), Message.of("user", "Was ist das? ", img),
            Message("assistant", "Ein Bild.", reasoning="Das Bild zeigt… 🤔",
                    tool_calls=(ToolCall("c1", "zoom", '{"x": 1}'),)),
            Message("tool", "ok", tool_call_id="c1"), Message("assistant", "Fertig.")]
    openai_shape = [m.as_dict() for m in msgs]
    assert render(msgs) == hf._alias_reasoning_fields(json.loads(json.dumps(openai_shape)))
    assert render(msgs)[2] == {"thinking": "Das Bild zeigt… 🤔", "role": "assistant", "content": "Ein Bild.",
                               "reasoning_content": "Das Bild zeigt… 🤔",
                               "tool_calls": [{"id": "c1", "type": "function",
                                               "function": {"name": "zoom", "arguments": {"x": 1}}}]}
    assert "reasoning" not in render(msgs)[2]


def test_the_template_sees_the_aliases_exactly_as_under_transformers():
    """Every message as JSON, keys in order: Message objects and mappings alike."""
    dump = "{% for m in messages %}{{ m|tojson }}\n{% endfor %}"
    for chat in CONVERSATIONS:
        plain = [{k: v for k, v in m.items() if v is not None} for m in chat]  # apply_chat_template's drop
        assert ChatTemplate(dump).render(chat) == reference(dump, plain)
    msgs = [Message("user", "Hi"), Message("assistant", "Hello", reasoning="greet")]
    assert ChatTemplate(dump).render(msgs) == reference(dump, [m.as_dict() for m in msgs])


# -- real thinking templates ----------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city <°C>.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

THINKING_CHAT = [
    Message("system", "Antworte kurz. 日本語も可。"),
    Message("user", "Wetter in Zürich?"),
    Message("assistant", "", reasoning="Ich brauche das Wetter → Werkzeug.",
            tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Zürich"}'),)),
    Message("tool", '{"temp_c": 21, "sky": "klar ☀"}', tool_call_id="call_1"),
    Message("assistant", "21 °C, klar.", reasoning="Das Werkzeug sagt 21 °C."),
    Message("user", "Und morgen? {{ 7 * 7 }}"),
]
# The same conversation as a client of transformers would write it (OpenAI's shape).
THINKING_DICTS = [
    {"role": "system", "content": "Antworte kurz. 日本語も可。"},
    {"role": "user", "content": "Wetter in Zürich?"},
    {"role": "assistant", "content": "", "reasoning_content": "Ich brauche das Wetter → Werkzeug.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
    {"role": "tool", "content": '{"temp_c": 21, "sky": "klar ☀"}', "tool_call_id": "call_1"},
    {"role": "assistant", "content": "21 °C, klar.", "reasoning_content": "Das Werkzeug sagt 21 °C."},
    {"role": "user", "content": "Und morgen? {{ 7 * 7 }}"},
]


@pytest.fixture
def frozen_clock(monkeypatch):
    frozen = datetime(2026, 3, 5, 14, 30)

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return frozen

    monkeypatch.setattr(ct, "_now", lambda: frozen)
    monkeypatch.setattr(hf, "datetime", FrozenDatetime)


@pytest.mark.parametrize("extra", [{}, {"enable_thinking": False}, {"reasoning_effort": "high"},
                                   {"thinking_budget": 512}])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("name", ["qwen3", "seed_oss"])
def test_real_thinking_templates_match_transformers(name, add_generation_prompt, extra):
    source = fixture(name)
    kwargs = {"tools": [WEATHER], **extra}
    expected = reference(source, THINKING_DICTS, add_generation_prompt=add_generation_prompt, **kwargs)
    got = ChatTemplate(source).render(THINKING_CHAT, add_generation_prompt=add_generation_prompt, **kwargs)
    assert got == expected
    assert ChatTemplate(source).render(THINKING_DICTS, add_generation_prompt=add_generation_prompt,
                                       **kwargs) == expected
    assert "Zürich" in got and "{{ 7 * 7 }}" in got


def test_qwen3_keeps_reasoning_after_the_last_question_only():
    """The template decides: reasoning of the tool-call turns (after the last user message) is
    shown, an earlier turn's is dropped."""
    source = fixture("qwen3")
    after = THINKING_CHAT[:5]
    got = ChatTemplate(source).render(after, add_generation_prompt=False)
    assert "<think>\nIch brauche das Wetter → Werkzeug.\n</think>" in got
    assert "<think>\nDas Werkzeug sagt 21 °C.\n</think>\n\n21 °C, klar." in got
    assert '{"name": "get_weather", "arguments": {"city": "Zürich"}}' in got
    later = ChatTemplate(source).render(THINKING_CHAT, add_generation_prompt=True)
    assert "Das Werkzeug sagt" not in later and "Ich brauche" not in later


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_gpt_oss_reads_thinking_and_matches_transformers(frozen_clock, add_generation_prompt):
    source = fixture("gpt_oss")
    chat = [Message("system", "Sé breve."), Message("user", "¿Tiempo en Zürich?"),
            Message("assistant", "", reasoning="Necesito la herramienta.",
                    tool_calls=(ToolCall("c1", "get_weather", '{"city": "Zürich"}'),)),
            Message("tool", '{"temp_c": 21}', tool_call_id="c1"),
            Message("assistant", "21 °C.", reasoning="La herramienta dice 21.")]
    kwargs = {"tools": [WEATHER], "reasoning_effort": "low"}
    expected = reference(source, [m.as_dict() for m in chat], add_generation_prompt=add_generation_prompt, **kwargs)
    got = ChatTemplate(source).render(chat, add_generation_prompt=add_generation_prompt, **kwargs)
    assert got == expected
    # gpt-oss reads `thinking`, which only the alias fills in: the tool call's analysis is there.
    assert "<|channel|>analysis<|message|>Necesito la herramienta.<|end|>" not in got  # a final answer follows
    alone = ChatTemplate(source).render(chat[:4], add_generation_prompt=True, **kwargs)
    assert "<|channel|>analysis<|message|>Necesito la herramienta.<|end|>" in alone
    assert 'json<|message|>{"city": "Zürich"}<|call|>' in alone
    assert "Current date: 2026-03-05" in got


def test_where_transformers_raises_hearth_raises_too(frozen_clock):
    """gpt-oss refuses an assistant tool-call turn with both content and thinking."""
    source = fixture("gpt_oss")
    chat = [Message("user", "x"), Message("assistant", "visible", reasoning="hidden",
                                          tool_calls=(ToolCall("c1", "get_weather", '{"city": "Bern"}'),))]
    with pytest.raises(Exception, match="Cannot pass both content and thinking"):
        reference(source, [m.as_dict() for m in chat], tools=[WEATHER])
    with pytest.raises(TemplateError, match="Cannot pass both content and thinking"):
        ChatTemplate(source).render(chat, tools=[WEATHER])
