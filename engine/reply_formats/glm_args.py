"""GLM's tool-call arguments: ``<arg_key>k</arg_key>\\n<arg_value>v</arg_value>`` pairs, as grammar and read back.

GLM 4.5-4.7 write a string's value bare (its template: ``v if v is string else v | tojson``) and
every other value as JSON. So a string property's value is grammar over bare text: any text
without ``<`` within its lengths, its ``format`` (the same rules JSON strings get, without the
quotes), or one of its ``enum``/``const`` strings; a ``pattern`` is left to the validator, which
checks every call. Other values follow their schema as JSON (json_grammar.py).
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .json_grammar import FORMATS, Grammar, literal

KV_VALUE_CAP = 2048   # characters in a bare string without its own maxLength
PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def kv_arguments(g: Grammar, parameters: Mapping[str, Any], name: str) -> str:
    """The grammar of a tool's arguments (its ``parameters`` schema) as GLM's pairs, each property in
    declared order, the required ones always written."""
    props = parameters.get("properties", {}) or {}
    required = set(parameters.get("required", []) or [])
    pairs = []
    for k, sch in props.items():
        if isinstance(sch, dict) and sch.get("type") == "string":
            value = bare_string(g, sch, f"{name}-{k}", f"properties.{k}")
        else:
            value = g.value(sch, f"{name}-{k}", f"properties.{k}")
        pair = g.add(f"{name}-{k}-pair", f'"\\n<arg_key>" {literal(k)} "</arg_key>\\n<arg_value>" {value} '
                                         '"</arg_value>"')
        pairs.append(pair if k in required else f"{pair}?")
    return " ".join(pairs) + ' "\\n"' if pairs else '"\\n"'


def bare_string(g: Grammar, schema: Mapping[str, Any], name: str, path: str) -> str:
    """A string value as GLM writes it, bare: one of its options, its format, or text within its lengths."""
    options = [schema["const"]] if "const" in schema else schema.get("enum")
    if options is not None and all(isinstance(v, str) for v in options):
        return g.add(f"{name}-bare", " | ".join(literal(v) for v in options))
    if schema.get("format") in FORMATS:
        return g.add(f"fmt-{schema['format']}-bare", FORMATS[schema["format"]])
    if isinstance(schema.get("pattern"), str):
        g.leave(f"{path}.pattern", "a GLM value's pattern")
    lo = schema.get("minLength", 0)
    hi = schema.get("maxLength", max(KV_VALUE_CAP, lo))
    return g.add(f"kv-text-{lo}-{hi}" if (lo, hi) != (0, KV_VALUE_CAP) else "kv-text", f"[^<]{{{lo},{hi}}}")


def read_kv(parameters: Mapping[str, Any] | None, raw: str) -> dict[str, Any]:
    """GLM's pairs as a JSON object (``parameters``: the tool's schema, None for a tool not offered): a string
    property's value as written, any other's as JSON where it is."""
    props = (parameters.get("properties", {}) if parameters else {}) or {}
    out: dict[str, Any] = {}
    for m in PAIR.finditer(raw):
        k, v = m.group(1).strip(), m.group(2)
        sch = props.get(k, {})
        if isinstance(sch, dict) and sch.get("type") == "string":
            out[k] = v
        else:
            try:
                out[k] = json.loads(v)
            except ValueError:
                out[k] = v
    return out
