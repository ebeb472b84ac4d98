"""Every valid JSON Schema a tool declares is accepted (issue #43): what a grammar can enforce it
enforces, checked by llama.cpp's own grammar sampler on real text; what it cannot is listed and left
to the validator; only a schema that is not valid JSON Schema (or a strict tool outside OpenAI's
rules) is refused."""
from __future__ import annotations

import json

import pytest
from grammar_check import accepts, value_grammar

from engine.reply_formats.json_grammar import SchemaError, check_schema
from engine.reply_formats.number_grammar import integer_rule
from engine.reply_formats.regex_grammar import PatternError, pattern_rule
from engine.reply_formats.tools import Tool, ToolError, ToolPlan, strict_problem
from engine.reply_formats.tool_syntax import syntax_by_name


def ok(backend, schema, *values) -> None:
    gbnf, _ = value_grammar(schema)
    for v in values:
        assert accepts(backend, gbnf, json.dumps(v, separators=(", ", ": "))), (schema, v)


def no(backend, schema, *values) -> None:
    gbnf, _ = value_grammar(schema)
    for v in values:
        assert not accepts(backend, gbnf, json.dumps(v, separators=(", ", ": "))), (schema, v)


def test_integer_ranges_are_exact(llama_backend):
    people = {"type": "object", "properties": {"people": {"type": "integer", "minimum": 1, "maximum": 20}},
              "required": ["people"]}
    ok(llama_backend, people, {"people": 1}, {"people": 9}, {"people": 20})
    no(llama_backend, people, {"people": 0}, {"people": 21}, {"people": -3}, {"people": 100})
    # mcp-server-fetch's max_length: exclusiveMinimum 0, exclusiveMaximum 1000000
    fetch = {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000}
    ok(llama_backend, fetch, 1, 5000, 999999)
    no(llama_backend, fetch, 0, 1000000, -1)
    ok(llama_backend, {"type": "integer", "minimum": -15, "maximum": -3}, -15, -9, -3)
    no(llama_backend, {"type": "integer", "minimum": -15, "maximum": -3}, -16, -2, 0, 3)


def test_integer_rules_cover_their_range_exactly():
    import re

    for lo, hi in ((0, 9), (5, 15), (1, 20), (17, 1234), (-100, 100), (None, 3), (42, None)):
        rx = re.compile("^(" + integer_rule(lo, hi).replace('"', "").replace(" ", "") + ")$")
        for n in range(-300, 1500):
            assert bool(rx.match(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), (lo, hi, n)


def test_patterns_lengths_and_formats(llama_backend):
    code = {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"}
    ok(llama_backend, code, "ABC-12", "XYZ-9876")
    no(llama_backend, code, "abc-12", "ABC-1", "ABCD-12")
    ok(llama_backend, {"type": "string", "pattern": r"\.py$"}, "main.py", "a/b.py")
    no(llama_backend, {"type": "string", "pattern": r"\.py$"}, "main.pyc")
    ok(llama_backend, {"type": "string", "pattern": 'a"b\\\\c'}, 'a"b\\c and more')  # quotes and backslashes
    ok(llama_backend, {"type": "string", "minLength": 2, "maxLength": 4}, "ab", "abcd")
    no(llama_backend, {"type": "string", "minLength": 2, "maxLength": 4}, "a", "abcde")
    ok(llama_backend, {"type": "string", "format": "date"}, "2026-12-04")
    no(llama_backend, {"type": "string", "format": "date"}, "2026-13-04", "yesterday")
    ok(llama_backend, {"type": "string", "format": "ipv4"}, "192.168.0.1", "8.8.8.8")
    no(llama_backend, {"type": "string", "format": "ipv4"}, "256.1.1.1")


def test_arrays_unions_refs_and_constants(llama_backend):
    pair = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}
    ok(llama_backend, pair, [1, 2], [1, 2, 3])
    no(llama_backend, pair, [1], [1, 2, 3, 4])
    either = {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 10}]}
    ok(llama_backend, either, "abc", 10, 99)
    no(llama_backend, either, "abcd", 9, True)
    both = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"properties": {"b": {"const": "x"}}, "required": ["b"]}]}
    ok(llama_backend, both, {"a": 1, "b": "x"})
    no(llama_backend, both, {"a": 1}, {"a": 1, "b": "y"})
    kids = {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
    node = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": kids}, "required": ["v"]}
    tree = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    ok(llama_backend, tree, {"v": 1}, {"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})
    ok(llama_backend, {"enum": ["red", 3, None]}, "red", 3, None)
    no(llama_backend, {"enum": ["red", 3, None]}, "blue", 4)
    ok(llama_backend, {"type": "object", "additionalProperties": {"type": "integer"}}, {}, {"x": 1, "y": 2})
    no(llama_backend, {"type": "object", "additionalProperties": {"type": "integer"}}, {"x": "no"})


def test_what_no_grammar_can_say_is_left_to_the_validator_not_refused():
    for schema, where in [({"type": "number", "minimum": 2.5}, "minimum"),
                          ({"type": "integer", "multipleOf": 3}, "multipleOf"),
                          ({"not": {"type": "null"}}, "not"),
                          ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
                          ({"type": "string", "pattern": r"(\w+) \1"}, "pattern"),
                          ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf")]:
        _, g = value_grammar(schema)
        assert any(where in u for u in g.unchecked), (schema, g.unchecked)
    plan = ToolPlan(syntax_by_name("hermes"), (Tool("f", {"type": "object", "properties": {
        "ratio": {"type": "number", "exclusiveMaximum": 1}}}),))
    assert plan.grammar() and plan.unchecked() == ["properties.ratio.exclusiveMaximum (a number's bound)"]


def test_a_nonnegative_number_stays_nonnegative(llama_backend):
    ok(llama_backend, {"type": "number", "minimum": 0}, 0, 1.5, 12)
    no(llama_backend, {"type": "number", "minimum": 0}, -1, -0.5)


def test_only_a_schema_that_is_not_json_schema_is_refused():
    for schema, match in [({"type": "object", "properties": {"x": {"type": "strange"}}}, "not a valid JSON Schema"),
                          ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, r"\$ref"),
                          ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5,
                                                                     "maximum": 2}}}, "no integer")]:
        with pytest.raises(ToolError, match=match) as e:
            ToolPlan(syntax_by_name("hermes"), (Tool("f", schema),)).grammar()
        assert e.value.param == "tools[0].function.parameters"
    with pytest.raises(SchemaError):
        check_schema({"type": 5})
    with pytest.raises(PatternError):
        pattern_rule("(?=a)b")


def test_strict_tools_follow_openais_rules():
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    assert strict_problem(closed) is None
    assert "additionalProperties" in strict_problem({"type": "object", "properties": {"a": {"type": "string"}},
                                                      "required": ["a"]})
    two = {"a": {"type": "string"}, "b": {"type": "integer"}}
    assert "missing 'b'" in strict_problem({**closed, "properties": two})
    assert "'allOf' is not permitted" in strict_problem({**closed, "allOf": [{}]})
    with pytest.raises(ToolError, match="strict function 'f'"):
        ToolPlan(syntax_by_name("hermes"), (Tool("f", {"type": "object", "properties": {}}, strict=True),)).grammar()
    ToolPlan(syntax_by_name("hermes"), (Tool("f", closed, strict=True),)).grammar()  # accepted
