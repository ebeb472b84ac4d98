"""``allOf`` as one schema: what the grammar writes for schemas that must all hold.

A grammar has no intersection, so the parts are merged into one schema: properties and
required united, the types both allow, the tightest bounds. What two parts set differently
is left to the validator, which checks every call against the whole schema.
"""
from __future__ import annotations

from typing import Any, Callable


class MergeError(ValueError):
    """``allOf`` that is not a list of schemas; ``path`` says where."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def merge_all(schema: dict, path: str, resolve: Callable[[str, str], Any], leave: Callable[[str, str], None]) -> dict:
    """``allOf``'s schemas and the rest of ``schema`` as one schema the grammar can write: properties
    and required united (a property both describe merged the same way), the types both allow, the
    tightest bounds. ``resolve(ref, where)`` gives a local ``$ref``'s schema; a keyword two parts set
    differently is left to the validator (``leave(where, why)``)."""
    parts = schema["allOf"]
    if not isinstance(parts, list) or not parts:
        raise MergeError(_at(path, "allOf"), "allOf must be a non-empty list of schemas")
    out = {k: v for k, v in schema.items() if k != "allOf"}
    for i, part in enumerate(parts):
        where = f"{path}.allOf[{i}]"
        if part is True or part == {}:
            continue
        if not isinstance(part, dict):
            raise MergeError(where, "allOf must list schemas (objects)")
        if isinstance(part.get("$ref"), str):
            base = resolve(part["$ref"], _at(where, "$ref"))
            part = {**(base if isinstance(base, dict) else {}), **{k: v for k, v in part.items() if k != "$ref"}}
        if "allOf" in part:
            part = merge_all(part, where, resolve, leave)
        for k, v in part.items():
            out[k] = v if k not in out else _merged(k, out[k], v, where, leave)
    return out


def _merged(key: str, a: Any, b: Any, where: str, leave: Callable[[str, str], None]) -> Any:
    if a == b:
        return a
    if key == "properties" and isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: ({"allOf": [a[k], v]} if k in a else v) for k, v in b.items()}}
    if key == "required" and isinstance(a, list) and isinstance(b, list):
        return list(dict.fromkeys([*a, *b]))
    if key in ("minimum", "exclusiveMinimum", "minLength", "minItems") and _num(a) and _num(b):
        return max(a, b)
    if key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems") and _num(a) and _num(b):
        return min(a, b)
    if key == "type":
        x, y = set(a if isinstance(a, list) else [a]), set(b if isinstance(b, list) else [b])
        both = (x & y) | ({"integer"} if ("integer" in x and "number" in y) or ("number" in x and "integer" in y)
                         else set())
        if both:
            return sorted(both) if len(both) > 1 else both.pop()
    leave(_at(where, key), "two schemas of allOf set it differently")
    return a


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
