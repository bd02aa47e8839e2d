"""Last resort for a parameter schema that ``tools.schema.normalize`` cannot make valid.

Public documents carry keywords with values JSON Schema 2020-12 does not
allow (``minLength: -1``, ``uniqueItems: "yes"``, ``format: 5``,
``multipleOf: 0``). Each keyword the 2020-12 metaschema rejects is dropped
-- an invalid subschema becomes ``{}`` -- and the loader names what was
dropped; the server still checks what it checks. Keywords ``normalize``
repairs itself (``type`` aliases, ``required: true`` in a property,
``enum``/``examples`` that are not lists, ``items`` as a list, numbers
written as text) are left to it.
"""

from __future__ import annotations

import copy
from typing import Any

_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SINGLE = ("additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else",
           "unevaluatedProperties", "unevaluatedItems", "additionalItems")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_LEFT_TO_NORMALIZE = {"type", "required", "enum", "examples", "items", "nullable"}
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
            "minItems", "maxItems", "minProperties", "maxProperties")
_VALIDATOR: Any = None


def _validator() -> Any:
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        cls = jsonschema.Draft202012Validator
        _VALIDATOR = cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    return _VALIDATOR


def _target(schema: Any, path: list) -> list | None:
    """Where to cut for an error at ``path``: the keyword with the bad value, or the bad subschema."""
    node, i, out = schema, 0, []
    while i < len(path):
        key = path[i]
        if not isinstance(node, dict):
            return None
        value = node.get(key)
        if key in _MAPS and i + 1 < len(path) and isinstance(value, dict) and path[i + 1] in value:
            out += [key, path[i + 1]]
            node, i = value[path[i + 1]], i + 2
        elif key in _LISTS and i + 1 < len(path) and isinstance(value, list) and isinstance(path[i + 1], int):
            out += [key, path[i + 1]]
            node, i = value[path[i + 1]], i + 2
        elif key in _SINGLE and isinstance(value, (dict, bool)):
            out.append(key)
            node, i = value, i + 1
        else:
            if key in _LEFT_TO_NORMALIZE or key in _NUMERIC and isinstance(value, str):
                return None
            return out + [key]
    if isinstance(node, str):  # a bare type name as a subschema: normalize reads it
        return None
    return out or None  # the root itself cannot be cut


def _cut(schema: dict, target: list) -> bool:
    parent: Any = schema
    for part in target[:-1]:
        parent = parent[part] if isinstance(parent, (dict, list)) else None
    last = target[-1]
    if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        parent[last] = {}
    elif isinstance(parent, dict) and last in parent:
        if len(target) >= 2 and target[-2] in _MAPS:
            parent[last] = {}
        else:
            parent.pop(last)
    else:
        return False
    return True


def repair(schema: dict) -> tuple[dict, list[str]]:
    """(a copy of ``schema`` without the keywords the 2020-12 metaschema rejects, their paths)."""
    fixed = copy.deepcopy(schema)
    dropped: list[str] = []
    for _ in range(50):
        targets = {tuple(t) for t in (_target(fixed, list(e.absolute_path)) for e in _validator().iter_errors(fixed))
                   if t}
        if not targets:
            break
        cut = [t for t in sorted(targets, key=len, reverse=True) if _cut(fixed, list(t))]
        if not cut:
            break
        dropped += [".".join(map(str, t)) for t in cut]
    return fixed, dropped
