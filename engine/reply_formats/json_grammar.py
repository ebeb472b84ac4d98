"""JSON Schema to GBNF, bounded, for tool-call arguments.

A tool's ``parameters`` schema becomes grammar rules that accept the JSON a validator
accepts, within bounds: every string, array and free-form object has a maximum size (the
schema's own, or the caps below), so a small model constrained by the grammar cannot write
forever. The grammar enforces types, required and optional properties, ``enum``/``const``,
``anyOf``/``oneOf``/``allOf``, local ``$ref`` (recursive ones too), string lengths,
patterns (regex_grammar.py) and formats, array lengths and tuples, and an integer's range
(number_grammar.py). What no grammar can say (a number's bounds, ``multipleOf``, ``not``,
``uniqueItems``, a pattern it cannot translate, ``oneOf``'s "exactly one"...) is listed in
``Grammar.unchecked``: every call is validated against the whole schema anyway (tool_parser.py),
and a call that fails is sampled again. Annotations and keywords this module does not know
are read past, as JSON Schema says; only a schema that is not valid JSON Schema, or a
``$ref`` that names nothing, raises ``SchemaError``.

Rules are written with llama.cpp's bounded repetition (``x{0,n}``), so a cap
costs one rule, not n nested ones. Objects write their declared properties in
declared order; where the schema allows others (``additionalProperties``), the
grammar still writes only the declared ones, which the schema accepts.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .number_grammar import BoundsError, integer_bounds, integer_rule, nonnegative_number
from .regex_grammar import PatternError, pattern_rule
from .schema_merge import MergeError, merge_all

STRING_CAP = 2048     # characters in a string without its own maxLength
ARRAY_CAP = 64        # items in an array without its own maxItems
FREE_DEPTH = 3        # nesting of a free-form value ({"type": "object"} without properties)
FREE_KEYS = 16        # keys in a free-form object
FREE_STRING_CAP = 256  # characters in a free-form value's strings (keys included)

ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly", "format", "strict"})
# Keywords a grammar cannot enforce: the validator that checks every call does.
UNCHECKED = frozenset({"not", "multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "if", "then",
                       "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
                       "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties",
                       "unevaluatedItems", "$dynamicRef", "$recursiveRef"})
FORMATS = {
    "date": r'[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
    "time": r'([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
            r'("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
    "uuid": r'[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
}
FORMATS["date-time"] = f'{FORMATS["date"]} "T" {FORMATS["time"]}'
FORMATS["ipv4"] = r'(("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]) "."){3} ' \
    r'("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9])'
FORMATS["email"] = r'[a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){0,8} "." [a-zA-Z]{2,24}'
FORMATS["uri"] = r'[a-zA-Z] [a-zA-Z0-9+.-]{0,31} ":" [^"\\ \x00-\x1f]{1,2000}'
FORMATS["hostname"] = r'[a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])? ("." [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} ' \
    r'[a-zA-Z0-9])?){0,8}'

# Shared pieces every grammar gets.
BASE = {
    "sp": '" "?',
    "jchar": r'[^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "jint": r'"-"? ("0" | [1-9] [0-9]{0,15})',
    "jnum": r'"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "jbool": '"true" | "false"',
    "jnull": '"null"',
    "jstr": f'"\\"" jchar{{0,{STRING_CAP}}} "\\""',
}
TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")


class SchemaError(ValueError):
    """A schema that is not valid JSON Schema (or names a ``$ref`` it does not define); ``path``
    says where (``properties.city.$ref``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def json_literal(value: Any) -> str:
    """The GBNF literal of one JSON value, written compactly the way the parser reads it back."""
    return literal(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))


class Grammar:
    """Rules collected while schemas are visited; ``text(root)`` writes the grammar."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = dict(BASE)
        self._defs: dict[str, Any] = {}
        self._free: str | None = None
        self.unchecked: list[str] = []  # where a keyword is left to the validator, and why

    def add(self, name: str, body: str) -> str:
        name = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-") or "r"
        base, i = name, 1
        while name in self.rules and self.rules[name] != body:
            i += 1
            name = f"{base}-{i}"
        self.rules[name] = body
        return name

    def text(self, root: str) -> str:
        """The grammar, ``root ::= root``-body first (llama.cpp reads rules in any order)."""
        return "\n".join([f"root ::= {root}", *(f"{k} ::= {v}" for k, v in self.rules.items())]) + "\n"

    # -- schemas ------------------------------------------------------------------

    def value(self, schema: Any, name: str, path: str = "") -> str:
        """A rule (its name, or an inline expression) accepting the JSON ``schema`` describes."""
        if schema is True or schema == {}:
            return self.free()
        if schema is False:
            raise SchemaError(path, "false accepts no value, so no call could be written")
        if not isinstance(schema, dict):
            raise SchemaError(path, f"a schema must be an object, got {type(schema).__name__}")
        for key in UNCHECKED.intersection(schema):
            self.leave(_at(path, key), key)
        for key in ("$defs", "definitions"):
            defs = schema.get(key)
            if defs is not None:
                if not isinstance(defs, dict):
                    raise SchemaError(_at(path, key), f"{key} must be an object")
                for k, v in defs.items():
                    self._defs[f"#/{key}/{k}"] = v
        if "$ref" in schema:
            return self._ref(schema["$ref"], _at(path, "$ref"))
        if "const" in schema:
            return json_literal(schema["const"])
        if "enum" in schema:
            options = schema["enum"]
            if not isinstance(options, list) or not options:
                raise SchemaError(_at(path, "enum"), "enum must be a non-empty list")
            return self.add(f"{name}-enum", " | ".join(json_literal(v) for v in options))
        if "allOf" in schema:
            try:
                merged = merge_all(schema, path, self.definition, self.leave)
            except MergeError as e:
                raise SchemaError(e.path, str(e.args[0])) from None
            return self.value(merged, name, path)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                alts = schema[key]
                if not isinstance(alts, list) or not alts:
                    raise SchemaError(_at(path, key), f"{key} must be a non-empty list of schemas")
                rest = {k: v for k, v in schema.items() if k != key}
                if key == "oneOf" and len(alts) > 1:
                    self.leave(_at(path, key), "exactly one")
                bodies = [self.value({**rest, **a} if isinstance(a, dict) else a, f"{name}-{i}",
                                     _at(path, f"{key}[{i}]")) for i, a in enumerate(alts)]
                return self.add(f"{name}-any", " | ".join(bodies))
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise SchemaError(_at(path, "type"), "type must name at least one type")
            alts = [self._typed({**schema, "type": t}, t, f"{name}-{t}", path) for t in types]
        else:
            if types is None:
                types = _guess_type(schema)
            alts = [self._typed(schema, types, name, path)] if types is not None else [self.free()]
        if schema.get("nullable") is True and "jnull" not in alts:
            alts.append("jnull")
        return alts[0] if len(alts) == 1 else self.add(f"{name}-or", " | ".join(alts))

    def definition(self, ref: Any, path: str) -> Any:
        """The schema a local ``$ref`` names (#/$defs/NAME or #/definitions/NAME)."""
        if not isinstance(ref, str) or ref not in self._defs:
            raise SchemaError(path, f"{ref!r} is not a local definition (#/$defs/NAME) of this schema")
        return self._defs[ref]

    def _ref(self, ref: Any, path: str) -> str:
        self.definition(ref, path)
        name = "def-" + ref.rsplit("/", 1)[-1]
        if name in self.rules:
            return name
        self.rules[name] = "jnull"  # placeholder: a recursive definition refers to itself by name
        self.rules[name] = self.value(self._defs[ref], name, path)
        return name

    def leave(self, where: str, what: str) -> None:
        """Note a keyword the grammar does not enforce (the validator checks it)."""
        note = f"{where} ({what})"
        if note not in self.unchecked:  # a rule built twice (a fenced call's copy) notes it once
            self.unchecked.append(note)

    def _typed(self, schema: dict, t: Any, name: str, path: str) -> str:
        if t not in TYPES:
            raise SchemaError(_at(path, "type"), f"unknown type {t!r}; JSON Schema types are {', '.join(TYPES)}")
        if t == "string":
            return self._string(schema, name, path)
        if t in ("integer", "number"):
            return self._number(schema, t, name, path)
        if t == "boolean":
            return "jbool"
        if t == "null":
            return "jnull"
        if t == "array":
            return self._array(schema, name, path)
        return self._object(schema, name, path)

    def _number(self, schema: dict, t: str, name: str, path: str) -> str:
        bounded = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]
        if not bounded:
            return "jint" if t == "integer" else "jnum"
        try:
            lo, hi = integer_bounds(schema)
        except BoundsError as e:
            raise SchemaError(_at(path, bounded[0]), str(e)) from None
        if t == "integer":
            return self.add(f"{name}-int", integer_rule(lo, hi))
        for key in bounded:
            self.leave(_at(path, key), "a number's bound")
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        if isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 0:
            return self.add("jnum-nonneg", nonnegative_number())
        return "jnum"

    def _string(self, schema: dict, name: str, path: str) -> str:
        fmt = schema.get("format")
        if fmt in FORMATS:
            return self.add(f"fmt-{fmt}", f'"\\"" {FORMATS[fmt]} "\\""')
        if isinstance(schema.get("pattern"), str):
            try:
                body = pattern_rule(schema["pattern"])
            except PatternError as e:
                self.leave(_at(path, "pattern"), str(e))
            else:
                if "minLength" in schema or "maxLength" in schema:
                    self.leave(_at(path, "maxLength"), "a length beside a pattern")
                return self.add(f"{name}-pat", f'"\\"" {body} "\\""')
        lo, hi = _bounds(schema, "minLength", "maxLength", STRING_CAP, path)
        if (lo, hi) == (0, STRING_CAP):
            return "jstr"
        return self.add(f"{name}-str", f'"\\"" jchar{{{lo},{hi}}} "\\""')

    def _array(self, schema: dict, name: str, path: str) -> str:
        if "prefixItems" in schema:
            items = schema["prefixItems"]
            if not isinstance(items, list) or not items:
                raise SchemaError(_at(path, "prefixItems"), "prefixItems must be a non-empty list of schemas")
            if schema.get("items") not in (None, False):
                raise SchemaError(_at(path, "items"), "items beside prefixItems cannot be enforced here; "
                                                      "set items to false")
            parts = [self.value(s, f"{name}-{i}", _at(path, f"prefixItems[{i}]")) for i, s in enumerate(items)]
            return self.add(f"{name}-tuple", '"[" sp ' + ' "," sp '.join(parts) + ' sp "]"')
        item = self.value(schema.get("items", True), f"{name}-item", _at(path, "items"))
        lo, hi = _bounds(schema, "minItems", "maxItems", ARRAY_CAP, path)
        if hi == 0:
            return '"[" sp "]"'
        more = self.add(f"{name}-more", f'"," sp {item}')
        body = f'{item} {more}{{{max(0, lo - 1)},{hi - 1}}}'
        return self.add(f"{name}-arr", f'"[" sp {body} sp "]"' if lo > 0 else f'"[" sp ({body})? sp "]"')

    def _object(self, schema: dict, name: str, path: str) -> str:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaError(_at(path, "properties"), "properties must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(_at(path, "required"), "required must be a list of property names")
        extra = schema.get("additionalProperties")
        missing = [r for r in required if r not in props]
        if missing and extra is False:
            raise SchemaError(_at(path, "required"), f"required names {missing[0]!r}, which properties does not "
                                                     "describe and additionalProperties forbids: no call could pass")
        if missing:  # required keys that only additionalProperties describes: written with its schema
            props = {**props, **{k: extra if isinstance(extra, dict) else True for k in missing}}
        if not props:
            if isinstance(extra, dict) and extra:
                return self._map(extra, name, path)
            # No parameters declared ({"properties": {}}, as a tool that takes none says) writes {};
            # only an object with no properties keyword at all is free-form.
            free = "properties" not in schema and extra is not False
            return self.free("object") if free else '"{" sp "}"'
        keys = list(props)
        kv = {k: self.add(f"{name}-{k}-kv", f'{json_literal(k)} sp ":" sp '
                          f'{self.value(props[k], f"{name}-{k}", _at(path, f"properties.{k}"))}') for k in keys}
        need = set(required)

        # rest(i, first): properties from i on, ``first`` when none was written yet; each a rule,
        # so optional properties cost two rules each, never a combination per subset.
        memo: dict[tuple[int, bool], str] = {}

        def rest(i: int, first: bool) -> str:
            if i == len(keys):
                return ""
            if (i, first) in memo:
                return memo[(i, first)]
            k = keys[i]
            lead = "" if first else '"," sp '
            take = f"{lead}{kv[k]} {rest(i + 1, False)}".strip()
            if k in need:
                body = take
            else:
                skip = rest(i + 1, first)
                body = f"{take} | {skip}" if skip else f"({take})?"
            memo[(i, first)] = self.add(f"{name}-p{i}{'f' if first else ''}", body) if body else ""
            return memo[(i, first)]

        inner = rest(0, True)
        return self.add(f"{name}-obj", f'"{{" sp {inner} sp "}}"' if inner else '"{" sp "}"')

    def _map(self, values: dict, name: str, path: str) -> str:
        """An object whose every key is free and every value follows ``values`` (additionalProperties)."""
        if "fstr" not in self.rules:
            self.free()
        val = self.value(values, f"{name}-val", _at(path, "additionalProperties"))
        pair = self.add(f"{name}-pair", f'fstr sp ":" sp {val}')
        return self.add(f"{name}-map", f'"{{" sp ({pair} ("," sp {pair}){{0,{FREE_KEYS - 1}}})? sp "}}"')

    def free(self, kind: str = "value") -> str:
        """Any JSON value (``kind="value"``, for ``{}``) or any object (``"object"``, for a
        free-form ``{"type": "object"}``), bounded in depth, keys and lengths."""
        if self._free is None:
            self.rules["fstr"] = f'"\\"" jchar{{0,{FREE_STRING_CAP}}} "\\""'
            prev = "fstr | jnum | jbool | jnull"
            obj = ""
            for d in range(FREE_DEPTH, 0, -1):
                val = self.add(f"free-{d}", prev)
                obj = f'"{{" sp (fstr sp ":" sp {val} ("," sp fstr sp ":" sp {val}){{0,{FREE_KEYS - 1}}})? sp "}}"'
                arr = f'"[" sp ({val} ("," sp {val}){{0,{ARRAY_CAP - 1}}})? sp "]"'
                prev = f"fstr | jnum | jbool | jnull | {obj} | {arr}"
            self._free = self.add("free", prev)
            self.rules["free-object"] = obj
        return self._free if kind == "value" else "free-object"


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _guess_type(schema: dict) -> str | None:
    if "properties" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if "minLength" in schema or "maxLength" in schema:
        return "string"
    return None


def _bounds(schema: dict, lo_key: str, hi_key: str, cap: int, path: str) -> tuple[int, int]:
    lo, hi = schema.get(lo_key, 0), schema.get(hi_key, cap)
    for key, v in ((lo_key, lo), (hi_key, hi)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SchemaError(_at(path, key), f"{key} must be a whole number of at least 0, got {v!r}")
    if lo > hi:
        raise SchemaError(_at(path, lo_key), f"{lo_key} {lo} is above {hi_key} {hi}")
    return lo, hi


def check_schema(schema: Any) -> None:
    """SchemaError when ``schema`` is not valid JSON Schema (by the validator its ``$schema`` names,
    else 2020-12's): a tool whose schema no validator could read is refused, with the reason."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = ".".join(str(p) for p in e.absolute_path)
        raise SchemaError(where, f"not a valid JSON Schema: {e.message}") from None
