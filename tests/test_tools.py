"""Tool calling in each family's own format: detection from the real chat templates,
rendering with tools as transformers renders it, the call grammar (compiled by llama.cpp)
accepting what each family's template writes for a call, and the streaming parser.

Real parts: the templates are the models' own (llama.cpp's models/templates), the
reference renderer is transformers', the grammar is llama.cpp's over the bundled
model's vocabulary, and arguments are checked by ``jsonschema``.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
from grammar_check import accepts

from engine.prompt.chat_template import ChatTemplate
from engine.reply_formats.json_grammar import STRING_CAP, SchemaError
from engine.reply_formats.tool_parser import ToolCallError, ToolCallParser
from engine.reply_formats.tools import Tool, ToolError, ToolPlan
from engine.reply_formats.tool_syntax import syntax_by_name, detect_tools, unsupported_tools

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
FAMILIES = {
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "unsloth-mistral-Devstral-Small-2507": "mistral-args",
    "GLM-4.6": "glm",
}
NO_TOOLS = ["smollm2", "deepseek-ai-DeepSeek-V3.1", "openai-gpt-oss-120b", "ByteDance-Seed-OSS", "MiniMax-M2"]
WEATHER = Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"},
                                                               "unit": {"enum": ["c", "f"]}},
                               "required": ["city"]}, "Das Wetter einer Stadt")
ADD = Tool("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                   "required": ["a", "b"]})
CALL = {"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
CONV = [{"role": "user", "content": "Wie ist das Wetter in Zürich? 🙂"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": '{"temp": 21, "sky": "晴"}'}]


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def render(name: str, conv, **kw) -> str:
    return ChatTemplate(source(name), bos_token="<s>", eos_token="</s>").render(conv, **kw)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_known_from_its_real_template(name):
    assert detect_tools(source(name)).name == FAMILIES[name]
    assert unsupported_tools(source(name)) is None


@pytest.mark.parametrize("name", NO_TOOLS)
def test_templates_hearth_cannot_call_through_say_so(name):
    assert detect_tools(source(name)) is None
    why = unsupported_tools(source(name))
    if name == "openai-gpt-oss-120b":
        assert "Harmony" in why
    elif name == "ByteDance-Seed-OSS":
        assert "XML" in why
    elif name in ("smollm2", "deepseek-ai-DeepSeek-V3.1"):
        assert why is None  # the template takes no tools at all: the engine says that instead


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_rendering_with_tools_is_what_transformers_renders(name):
    from transformers.utils.chat_template_utils import render_jinja_template

    tools = [WEATHER.as_dict(), ADD.as_dict()]
    expected, _ = render_jinja_template(conversations=[CONV], chat_template=source(name), tools=tools,
                                        add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    assert render(name, CONV, tools=tools) == expected[0]


def _template_call_text(name: str) -> str:
    """What the family's own template writes for CALL, from the call section's opener on."""
    syntax = detect_tools(source(name))
    user = CONV[0]["content"]
    text = render(name, CONV[:2], tools=[WEATHER.as_dict()], add_generation_prompt=False)
    return text[text.index(syntax.open, text.index(user) + len(user)):]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_parser_reads_back_what_the_template_writes(name):
    plan = ToolPlan(detect_tools(source(name)), (WEATHER, ADD))
    p = ToolCallParser(plan)
    events = []
    for ch in _template_call_text(name):  # one character at a time: every split point
        events += p.feed(ch)
    events += p.finish()[0]
    calls = [e.call for e in events if e.kind == "call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Zürich"})]
    shown = "".join(e.text for e in events if e.kind == "text")
    assert not any(tag in shown for tag in ("<tool_call>", "[TOOL_CALLS]", "<arg_key>", '"name"'))
    if name.startswith("mistralai"):
        assert calls[0].id == "abc123XYZ"  # the model's own id, the one its template checks


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_grammar_accepts_what_the_template_writes(llama_backend, name):
    """Token by token through llama.cpp's grammar (required: it applies from the first token)."""
    syntax = detect_tools(source(name))
    plan = ToolPlan(syntax, (WEATHER, ADD), "required", parallel=False)
    p = ToolCallParser(plan)
    text = _template_call_text(name)
    p.feed(text)
    section = p._section[:p._pos]
    g = llama_backend.grammar(plan.grammar())
    import numpy as np
    for tok in llama_backend.tokenize(section, add_bos=False, special=False):
        logits = g.mask(np.zeros(llama_backend.n_vocab, dtype=np.float32))
        assert np.isfinite(logits[tok]), f"{name}: the grammar refuses {llama_backend.token_bytes(tok)!r}"
        g.accept(tok)
    logits = g.mask(np.zeros(llama_backend.n_vocab, dtype=np.float32))
    assert all(np.isfinite(logits[t]) for t in llama_backend.eos_ids)  # the call is complete
    g.close()


def test_an_opener_split_across_pieces_is_never_shown_half():
    p = ToolCallParser(ToolPlan(syntax_by_name("hermes"), (WEATHER,)))
    out = p.feed("Let me check. <tool") + p.feed("_ca")
    assert "".join(e.text for e in out) == "Let me check. "
    out += p.feed('ll>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    out += p.finish()[0]
    assert [e.call.name for e in out if e.kind == "call"] == ["get_weather"]
    assert "".join(e.text for e in out) == "Let me check. "


def test_a_call_cut_short_is_no_call_and_its_text_is_kept():
    p = ToolCallParser(ToolPlan(syntax_by_name("hermes"), (WEATHER,)))
    cut = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os'
    assert p.feed(cut) == []
    events, rest = p.finish()
    assert rest == cut and [e.text for e in events] == [cut] and p.calls == []


def test_text_that_only_looks_like_an_opener_stays_text():
    p = ToolCallParser(ToolPlan(syntax_by_name("hermes"), (WEATHER,)))
    events = p.feed("a < b and <tool is a word") + p.finish()[0]
    assert "".join(e.text for e in events) == "a < b and <tool is a word"


@pytest.mark.parametrize("body, match", [
    ('{"name": "get_weather", "arguments": {"city": 3}}', "does not match its schema"),
    ('{"name": "rm_rf", "arguments": {}}', "not one of the tools"),
    ('{"name": "get_weather", "arguments": {"city": "x"', "not valid JSON"),
    ('{"name": "get_weather", "arguments": {}}', "does not match its schema"),
])
def test_an_invalid_call_is_an_error_never_a_made_up_call(body, match):
    """What a backend without grammars (transformers) may write."""
    p = ToolCallParser(ToolPlan(syntax_by_name("hermes"), (WEATHER,)))
    with pytest.raises(ToolCallError, match=match):
        p.feed(f"<tool_call>\n{body}\n</tool_call>")
        p.finish()


def test_glm_values_take_their_schema_types():
    p = ToolCallParser(ToolPlan(syntax_by_name("glm"), (ADD, WEATHER)))
    events = p.feed("<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n"
                    "<arg_value>0.5</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                    "<arg_value>12</arg_value>\n</tool_call>") + p.finish()[0]
    assert [json.loads(e.call.arguments) for e in events if e.kind == "call"] == [{"a": 2, "b": 0.5},
                                                                                  {"city": "12"}]


def test_glm_strings_are_bare_and_follow_their_schema(llama_backend):
    """GLM's template writes every string bare: an enum's and a const's too (the grammar wrote them as
    JSON, quotes and all, which the parser read back as the string '"c"', so the call failed its schema),
    and a bare string keeps its format and lengths (the grammar took any text)."""
    tool = Tool("get_weather", {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 2, "maxLength": 12}, "unit": {"type": "string", "enum": ["c", "f"]},
        "mode": {"type": "string", "const": "now"}, "day": {"type": "string", "format": "date"}},
        "required": ["city", "unit", "mode", "day"]})
    plan = ToolPlan(syntax_by_name("glm"), (tool,), "required")
    call = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>{}</arg_value>\n<arg_key>unit</arg_key>\n"
            "<arg_value>{}</arg_value>\n<arg_key>mode</arg_key>\n<arg_value>{}</arg_value>\n<arg_key>day</arg_key>\n"
            "<arg_value>{}</arg_value>\n</tool_call>")
    good = ("Rom", "c", "now", "2026-05-01")
    assert accepts(llama_backend, plan.grammar(), call.format(*good))
    for i, bad in ((0, "R"), (0, "Rom" * 5), (1, '"c"'), (2, '"now"'), (3, "tomorrow")):
        assert not accepts(llama_backend, plan.grammar(), call.format(*good[:i], bad, *good[i + 1:])), bad
    p = ToolCallParser(plan)
    events = p.feed(call.format("Rom", "f", "now", "2026-05-01")) + p.finish()[0]
    assert [json.loads(e.call.arguments) for e in events if e.kind == "call"] == [
        {"city": "Rom", "unit": "f", "mode": "now", "day": "2026-05-01"}]


def test_llama3_calls_only_at_the_start_of_the_answer():
    plan = ToolPlan(syntax_by_name("llama3"), (WEATHER,))
    p = ToolCallParser(plan)
    text = 'Use {"name": "get_weather"} like this.'
    assert "".join(e.text for e in p.feed(text) + p.finish()[0]) == text
    p = ToolCallParser(plan)
    events = p.feed(' {"name": "get_weather", "parameters": {"city": "Rom"}}') + p.finish()[0]
    assert [e.call.name for e in events if e.kind == "call"] == ["get_weather"]


@pytest.mark.parametrize("schema, path", [
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?=a)a+$"}}}, "properties.s.pattern"),
    ({"type": "object", "properties": {"n": {"type": "number", "minimum": 2}}}, "properties.n.minimum"),
    ({"type": "object", "properties": {"x": {"not": {"type": "null"}}}}, "properties.x.not"),
])
def test_a_keyword_the_grammar_cannot_express_is_left_to_the_validator(schema, path):
    # Issue #43: such a schema is accepted; the grammar enforces the rest and the validator this keyword.
    plan = ToolPlan(syntax_by_name("hermes"), (Tool("f", schema),))
    assert plan.grammar() and any(u.startswith(path) for u in plan.unchecked())


def test_a_ref_that_names_nothing_is_refused_by_name():
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(ToolError, match=r"properties\.x\.\$ref") as e:
        ToolPlan(syntax_by_name("hermes"), (Tool("f", schema),)).grammar()
    assert e.value.param == "tools[0].function.parameters"
    assert isinstance(SchemaError("x", "y"), ValueError)


def test_strings_and_arrays_are_bounded():
    g = ToolPlan(syntax_by_name("hermes"), (Tool("f", {"type": "object", "properties": {
        "s": {"type": "string"}, "l": {"type": "array", "items": {"type": "string", "maxLength": 5}}}}),)).grammar()
    assert f"jchar{{0,{STRING_CAP}}}" in g and "jchar{0,5}" in g and "{0,63}" in g
    assert "*" not in g.replace("jchar*", "") and "+" not in g.replace("[-+]", "")


def test_a_tool_without_parameters_writes_an_empty_object():
    """{"properties": {}} (how MCP and OpenAI clients declare a tool that takes nothing) is {}:
    a small model given a free-form object there writes on until max_tokens."""
    for schema in ({"type": "object", "properties": {}}, {"type": "object", "properties": {}, "title": "x"},
                   {"type": "object", "additionalProperties": False}):
        g = ToolPlan(syntax_by_name("hermes"), (Tool("f", schema),), "required").grammar()
        assert "free" not in g and '"{" sp "}"' in g, schema
    assert "free-object" in ToolPlan(syntax_by_name("hermes"), (Tool("f", {"type": "object"}),), "required").grammar()


def test_bad_tool_lists_are_refused():
    with pytest.raises(ToolError, match="letters, digits"):
        ToolPlan(syntax_by_name("hermes"), (Tool("no spaces please"),))
    with pytest.raises(ToolError, match="same name"):
        ToolPlan(syntax_by_name("hermes"), (WEATHER, WEATHER))
    with pytest.raises(ToolError, match="not one of the tools"):
        ToolPlan(syntax_by_name("hermes"), (WEATHER,), "add")


def test_choice_none_shows_the_tools_and_calls_nothing():
    plan = ToolPlan(syntax_by_name("hermes"), (WEATHER,), "none")
    assert plan.calling() is None  # no grammar, no call parsing
    assert plan.with_tools({})["tools"] == [WEATHER.as_dict()]  # still in the prompt
    auto = ToolPlan(syntax_by_name("hermes"), (WEATHER,))
    assert auto.calling() is auto


def test_mistral_ids_are_what_its_template_demands():
    ids = {syntax_by_name("mistral").new_id() for _ in range(50)}
    assert all(len(i) == 9 and i.isalnum() for i in ids) and len(ids) == 50
    assert all(syntax_by_name("hermes").new_id().startswith("call_") for _ in range(3))


def test_random_schemas_validate_what_the_parser_accepts():
    """The parser's validator is the real one: a value it lets through validates, always."""
    rng = random.Random(7)
    tool = Tool("f", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    for _ in range(50):
        n = rng.choice([rng.randint(-9, 9), "x", 1.5, None])
        p = ToolCallParser(ToolPlan(syntax_by_name("hermes"), (tool,)))
        text = f'<tool_call>\n{json.dumps({"name": "f", "arguments": {"n": n}})}\n</tool_call>'
        try:
            call = [e.call for e in p.feed(text) + p.finish()[0] if e.kind == "call"][0]
        except ToolCallError:
            assert not isinstance(n, int)
            continue
        jsonschema.validate(json.loads(call.arguments), tool.parameters)


def test_auto_is_llama_cpps_lazy_grammar_free_until_the_opener(llama_backend):
    """tool_choice auto: free text is never masked; from the opener on, only a valid call."""
    import numpy as np

    plan = ToolPlan(syntax_by_name("hermes"), (WEATHER,), "auto")
    tagged, fenced = plan.triggers()  # the template's tag, and a ```json fence naming one of the tools
    assert tagged == r"(<tool_call>)" and fenced.startswith("(```json") and "get_weather" in fenced
    g = llama_backend.grammar(plan.grammar(), plan.triggers())
    zeros = np.zeros(llama_backend.n_vocab, dtype=np.float32)
    tok = llama_backend.tokenize
    for t in tok("Sure, I will look it up: ", add_bos=False):
        assert np.isfinite(g.mask(zeros)).all()  # nothing masked before the opener
        g.accept(t)
    for t in tok("<tool_call>", add_bos=False):
        g.accept(t)
    masked = g.mask(zeros)
    assert np.isfinite(masked).sum() < llama_backend.n_vocab // 100  # the call's grammar now rules
    assert not np.isfinite(masked[tok("Hello", add_bos=False)[0]])
    for t in tok('\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', add_bos=False):
        assert np.isfinite(g.mask(zeros)[t])
        g.accept(t)
    assert all(np.isfinite(g.mask(zeros)[t]) for t in llama_backend.eos_ids)
    g.close()


def test_a_free_form_object_is_an_object_and_bounded(llama_backend):
    """{"type": "object"} without properties: any object, never an array or a string in its place."""
    import numpy as np

    plan = ToolPlan(syntax_by_name("hermes"), (Tool("f", {"type": "object", "properties": {"meta": {"type": "object"}},
                                                   "required": ["meta"]}),), "required")
    text = plan.grammar()
    assert "free-object" in text and "jchar{0,256}" in text
    zeros = np.zeros(llama_backend.n_vocab, dtype=np.float32)
    for body, ok in (('{"a": [1, {"b": null}], "c": "x"}', True), ('[1, 2]', False)):
        g = llama_backend.grammar(text)
        accepted = True
        for t in llama_backend.tokenize(f'<tool_call>\n{{"name": "f", "arguments": {{"meta": {body}}}}}\n</tool_call>',
                                        add_bos=False):
            if not np.isfinite(g.mask(zeros)[t]):
                accepted = False
                break
            g.accept(t)
        g.close()
        assert accepted is ok, body
