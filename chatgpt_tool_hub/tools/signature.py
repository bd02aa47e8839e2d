"""A function's JSON schema from its signature and docstring, for ``@tool``.

Plain annotations (``str``, ``int``, ``float``, ``bool``, ``list[int]``,
``dict[str, str]``, ``Optional[X]``, ``Literal["a", "b"]``, an ``Enum``) are
turned into schemas here, with no import; dataclasses, ``TypedDict`` and
pydantic models (and containers of them) go through pydantic's
``TypeAdapter`` (pydantic comes with the ``openai`` dependency), which also
turns the validated JSON back into those objects before the function is
called. Descriptions come from an ``Args:`` / ``Parameters:`` section of the
docstring, defaults from the signature.

A parameter annotated ``ToolContext`` (any name), or named ``context`` with
no annotation, receives the run's ``ToolContext`` and is not part of the
schema; any other parameter, ``context`` included, is an ordinary argument.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from typing import Any, Callable

__all__ = ["FunctionSignature", "signature_of", "split_docstring"]

_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_CONTAINERS = {list: "array", tuple: "array", set: "array", frozenset: "array", dict: "object"}


@dataclasses.dataclass
class FunctionSignature:
    schema: dict
    description: str
    context_parameter: str | None  # the parameter that receives the ToolContext, if any
    converters: dict[str, Callable[[Any], Any]]  # JSON value -> the annotated object (dataclass, Enum, model)


def signature_of(func: Callable[..., Any]) -> FunctionSignature:
    """The schema of ``func``'s parameters, its description, and how to call it."""
    from .base import ToolContext

    doc = inspect.getdoc(func) or ""
    summary, param_docs = split_docstring(doc)
    try:
        hints = typing.get_type_hints(func, include_extras=False)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = dict(getattr(func, "__annotations__", {}))
    props: dict[str, dict] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    converters: dict[str, Callable[[Any], Any]] = {}
    context_parameter = None
    for name, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name, param.annotation)
        if annotation is ToolContext or (name == "context" and annotation is inspect.Parameter.empty):
            context_parameter = name
            continue
        prop, convert = _schema_of(annotation, defs)
        if convert is not None:
            converters[name] = convert
        if name in param_docs:
            prop["description"] = param_docs[name]
        if param.default is param.empty:
            required.append(name)
        elif _json_safe(param.default):
            prop["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        props[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required,
                              "additionalProperties": False}
    if defs:
        schema["$defs"] = defs
    return FunctionSignature(schema, summary, context_parameter, converters)


def _schema_of(annotation: Any, defs: dict[str, Any]) -> tuple[dict, Callable[[Any], Any] | None]:
    """``(schema, converter)``; the converter turns validated JSON into the annotated object, or is None."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}, None
    plain = _plain_schema(annotation)
    if plain is not None:
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return plain, annotation
        return plain, None
    try:  # dataclasses, TypedDict, pydantic models and containers of them
        from pydantic import TypeAdapter

        adapter = TypeAdapter(annotation)
        schema = adapter.json_schema(ref_template="#/$defs/{model}")
    except Exception:
        return {}, None
    found = schema.pop("$defs", {})
    _close_dataclasses(annotation, [schema, *found.values()])
    defs.update(found)
    return schema, adapter.validate_python


def _close_dataclasses(annotation: Any, schemas: list) -> None:
    """The object schemas of the dataclasses in ``annotation`` refuse unknown keys, as the arguments
    themselves do (a misspelt field would otherwise be dropped and its default used without a word)."""
    names: set[str] = set()
    todo, seen = [annotation], set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if dataclasses.is_dataclass(item) and isinstance(item, type):
            names.add(item.__name__)
            try:
                todo.extend(typing.get_type_hints(item).values())
            except Exception:  # noqa: BLE001 - an unresolvable hint: its fields stay as pydantic made them
                pass
        todo.extend(typing.get_args(item))
    for node in schemas:
        if isinstance(node, dict) and node.get("type") == "object" and node.get("title") in names:
            node.setdefault("additionalProperties", False)


def _plain_schema(annotation: Any) -> dict | None:
    """The schema of an annotation made of builtins, Literal, Optional/Union and Enum; None for anything else."""
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    if annotation in _CONTAINERS:
        return {"type": _CONTAINERS[annotation]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        if all(_json_safe(v) for v in values):
            return {"enum": values}
        return None
    if typing.is_typeddict(annotation):  # by hand: pydantic takes only typing_extensions' on Python < 3.12
        try:
            hints = typing.get_type_hints(annotation)
        except Exception:
            return None
        props = {k: _plain_schema(v) for k, v in hints.items()}
        if any(v is None for v in props.values()):
            return None
        required = [k for k in hints if k in getattr(annotation, "__required_keys__", hints)]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)} if all(_json_safe(a) for a in args) else None
    if origin in (typing.Union, types.UnionType):
        found = [_plain_schema(a) for a in args]
        parts = [p for p in found if p is not None]
        if len(parts) < len(found):
            return None
        kinds = [p.get("type") for p in parts]
        if all(isinstance(k, str) for k in kinds) and all(len(p) == 1 for p in parts):
            return {"type": list(dict.fromkeys(kinds))}
        return {"anyOf": parts}
    if origin in _CONTAINERS:
        if origin is dict:
            value = _plain_schema(args[1]) if len(args) == 2 else {}
            return None if value is None else ({"type": "object", "additionalProperties": value} if value
                                               else {"type": "object"})
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [_plain_schema(a) for a in args]
            if any(i is None for i in items):
                return None
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        item = _plain_schema(args[0]) if args else {}
        if item is None:
            return None
        return {"type": "array", "items": item} if item else {"type": "array"}
    return None


def _json_safe(value: Any) -> bool:
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """First paragraph(s) before an ``Args:`` section, and ``name: text`` lines inside it."""
    match = re.search(r"^(Args|Arguments|Parameters):\s*$", doc, flags=re.M)
    if not match:
        return doc, {}
    params: dict[str, str] = {}
    current = None
    for line in doc[match.end():].splitlines():
        item = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
        if item:
            current = item.group(1)
            params[current] = item.group(2).strip()
        elif current and line.strip() and line.startswith((" ", "\t")):
            params[current] += " " + line.strip()
        elif line.strip() and not line.startswith((" ", "\t")):
            break
    return doc[: match.start()].strip(), params
