"""Forced tool calls over varied schemas: every one parses and validates.

The bundled model wears Qwen 2.5's template (Hermes syntax) and is made to call
(``tool_choice`` required) under the grammar built from the schemas, sampling at
temperature 0.9 with a different seed each time so the calls differ: nested objects,
enums, arrays, integers and numbers, booleans, nulls, non-ASCII strings, optional
properties, $defs. Each call is checked with ``jsonschema``, a validator Hearth does
not write. The count of invalid calls must be 0, and every reply must end with its call.

8 calls force each of the four tools by name once and offer all four (required) four times, with
different seeds: enough to catch a grammar that lets a bad call through. The rate over hundreds
of calls, and over real agents' schemas, is a statistic: ``python -m engine bench tools``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.bench.tools import check
from engine.engine import Engine
from engine.reply_formats.tools import Tool
from engine.models.gguf import model_info
from engine.prompt.messages import Message
from engine.types import SamplingParams

QWEN = (Path(__file__).parent / "fixtures" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
SCHEMAS = [
    Tool("book_trip", {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "nights": {"type": "integer", "minimum": 1},
        "class": {"enum": ["economy", "business", "première"]},
        "guests": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name"]}, "maxItems": 3}},
        "required": ["city", "nights", "class"]}, "Book a trip"),
    Tool("set_light", {"type": "object", "properties": {
        "on": {"type": "boolean"}, "level": {"type": "number"}, "room": {"type": ["string", "null"], "maxLength": 12},
        "colour": {"type": "object", "properties": {"r": {"type": "integer"}, "g": {"type": "integer"},
                                                    "b": {"type": "integer"}}, "required": ["r", "g", "b"]}},
        "required": ["on"]}),
    Tool("translate", {"type": "object", "$defs": {"lang": {"enum": ["de", "ja", "zh", "fr"]}}, "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": 40}, "to": {"$ref": "#/$defs/lang"},
        "alternatives": {"type": "array", "items": {"$ref": "#/$defs/lang"}, "maxItems": 2}},
        "required": ["text", "to"]}),
    Tool("note", {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string",
                                                                                       "maxLength": 10},
                                                            "minItems": 1, "maxItems": 4},
                                                   "pinned": {"type": "boolean"}},
                  "required": ["tags"], "additionalProperties": False}),
]
PROMPTS = ["Plan something for me.", "Bitte übersetze «Grüße» ins Japanische.", "Turn on the kitchen light 🙂",
           "写一个笔记", "Book Paris for two nights."]
N = 8


@pytest.fixture(scope="module")
def engine(bundled_path):
    info = dataclasses.replace(model_info(bundled_path), chat_template=QWEN)
    e = Engine(LlamaCppBackend(bundled_path, n_ctx=2048, n_threads=2, info=info))
    yield e
    e.close()


def test_forced_calls_all_parse_and_validate(engine):
    invalid, ended = [], {}
    for i in range(N):
        # one tool forced by name (each of the four once), or all four offered and the model picks (required)
        choice = SCHEMAS[(i // 2) % 4].name if i % 2 else "required"
        plan = engine.plan_tools(SCHEMAS, choice, parallel=False)
        params = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.0, seed=i,
                                max_tokens=300)
        final = list(engine.stream([Message("user", PROMPTS[i % len(PROMPTS)])], params, tools=plan))[-1]
        ended[final.finish_reason] = ended.get(final.finish_reason, 0) + 1
        # The same check as ``bench tools``: each call names an offered tool (the named one when one is
        # forced) and its arguments validate with jsonschema.
        why = check(final.tool_calls, tuple(SCHEMAS), choice)
        if why is not None:
            invalid.append((i, final.tool_calls, why))
    assert invalid == []
    assert ended == {"tool_calls": N}, ended
