"""Tool parameter schemas: normalised once, checked once, validated fast, coerced safely, shown compactly.

Definitions come in many dialects: JSON Schema drafts, OpenAPI 3.0 (``nullable``),
OpenAPI 3.1 and MCP (type arrays), the Berkeley Function Calling Leaderboard
(``"type": "dict"``, ``float``, ``tuple``, ``any``), hand-written ones with a
stray ``required: true`` inside a property. :func:`normalize` turns any of them
into one valid JSON Schema 2020-12 document, once, when the tool is made, and
raises a :class:`~chatgpt_tool_hub.errors.ConfigError` naming the tool and the
path when it cannot. :class:`ParameterSchema` then holds the one validator
built for it (behind the schema compiled into one Python function, :mod:`.checker`,
which passes valid arguments in a microsecond and leaves every other case to
the route described here) and everything the engine asks of a schema per call: unknown
arguments, safe coercion (``"5"`` for an integer, ``4.0`` for an integer,
``"true"`` for a boolean, ``null`` for an optional parameter), the error text
the model sees, an example input, and a compact description for the prompt.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
from typing import Any, Mapping

from ..errors import ConfigError, ToolInputError
from .checker import Checker, compile_checker

__all__ = ["normalize", "ParameterSchema", "describe_schema", "schema_types", "JSON_TYPES"]

JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
_TYPE_ALIASES = {
    "dict": "object", "map": "object", "hash": "object", "hashmap": "object", "mapping": "object", "json": "object",
    "float": "number", "double": "number", "decimal": "number", "real": "number", "number": "number",
    "int": "integer", "integer": "integer", "long": "integer", "int32": "integer", "int64": "integer",
    "str": "string", "string": "string", "text": "string", "char": "string",
    "bool": "boolean", "boolean": "boolean",
    "list": "array", "array": "array", "tuple": "array", "set": "array", "sequence": "array",
    "null": "null", "none": "null", "nonetype": "null",
    "object": "object",
}
log = logging.getLogger("chatgpt_tool_hub.tools")
_ANY = {"any", "anything", "mixed", "", "unknown"}
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMAS = ("additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else",
               "unevaluatedProperties", "unevaluatedItems", "additionalItems")
_NUMERIC_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                     "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_INTEGER = re.compile(r"[+-]?\d{1,30}")
_MAX_DEPTH = 40


# ---- normalising ------------------------------------------------------------------------------------


def normalize(schema: Any, tool: str = "tool") -> dict:
    """``schema`` as one valid JSON Schema 2020-12 object schema (a deep copy), or ``ConfigError``."""
    if schema is None:
        schema = {}
    if not isinstance(schema, Mapping):
        raise ConfigError(f"tool '{tool}': parameters must be a JSON schema object, not {type(schema).__name__}",
                          key=tool)
    fixed = _fix(copy.deepcopy(dict(schema)), "parameters", 0, tool)
    if isinstance(fixed.get("required"), bool):  # nothing above the root collects it
        fixed.pop("required")
    if "type" not in fixed and "properties" in fixed or not fixed:
        fixed.setdefault("type", "object")
        fixed.setdefault("properties", {})
    if _types(fixed) != {"object"}:
        raise ConfigError(f"tool '{tool}': parameters must describe a JSON object (its arguments), not "
                          f"{fixed.get('type')!r}; put the value under a property", key=tool)
    fixed.setdefault("properties", {})
    _check(fixed, tool)
    return fixed


def _fix(node: Any, path: str, depth: int, tool: str) -> Any:
    if depth > _MAX_DEPTH:
        raise ConfigError(f"tool '{tool}': the schema is nested deeper than {_MAX_DEPTH} levels at {path}", key=tool)
    if isinstance(node, bool):
        return node
    if isinstance(node, str):  # {"city": "string"}: a bare type name as a property schema
        alias = _alias(node)
        return {"type": alias} if alias else {}
    if not isinstance(node, dict):
        return {}
    if "type" in node:
        kind = _fix_type(node["type"])
        if kind is None:
            strange = [n for n in (node["type"] if isinstance(node["type"], list) else [node["type"]])
                       if not (isinstance(n, str) and (n.strip().lower() in _ANY or _alias(n)))]
            if strange:
                log.warning("tool '%s': %s is not a JSON type (%s): any value is taken there", tool,
                            ", ".join(repr(n) for n in strange[:3]), f"{path}.type")
            node.pop("type")
        else:
            node["type"] = kind
    if node.pop("nullable", False) is True and "type" in node:  # OpenAPI 3.0
        kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
        node["type"] = kinds + ["null"] if "null" not in kinds else kinds
    if "enum" in node and not isinstance(node["enum"], list):
        node["enum"] = [node["enum"]]
    if "examples" in node and not isinstance(node["examples"], list):
        node["examples"] = [node["examples"]]
    for key in _NUMERIC_KEYWORDS:
        if isinstance(node.get(key), str):
            try:
                value = float(node[key])
                node[key] = int(value) if value.is_integer() else value
            except ValueError:
                node.pop(key)
    if isinstance(node.get("items"), list):  # the tuple form: one schema per position
        node["prefixItems"] = node.pop("items")
    for key in _SUBSCHEMAS:
        if key in node:
            node[key] = _fix(node[key], f"{path}.{key}", depth + 1, tool)
    for key in _SUBSCHEMA_LISTS:
        if key in node:
            items = node[key] if isinstance(node[key], list) else [node[key]]
            node[key] = [_fix(item, f"{path}.{key}[{i}]", depth + 1, tool) for i, item in enumerate(items)]
    for key in _SUBSCHEMA_MAPS:
        if key in node:
            if not isinstance(node[key], Mapping):
                node.pop(key)
                continue
            node[key] = {str(k): _fix(v, f"{path}.{key}.{k}", depth + 1, tool) for k, v in node[key].items()}
    _fix_required(node)
    if "properties" in node and "type" not in node:
        node["type"] = "object"
    return node


def _fix_required(node: dict) -> None:
    """``required: true`` inside a property (a common mistake, and Swagger 2.0's parameter style) moves up into
    the object's ``required`` list; the list keeps only names of strings, each once. A boolean ``required``
    of this node itself is left for its parent to collect."""
    props = node.get("properties")
    if not isinstance(props, dict):
        props = {}
    raw = node.get("required")
    wanted = [r for r in raw if isinstance(r, str)] if isinstance(raw, list) else []
    if raw is not None and not isinstance(raw, (list, bool)):
        node.pop("required")
    for name, prop in props.items():
        if isinstance(prop, dict) and isinstance(prop.get("required"), bool):
            if prop.pop("required"):
                wanted.append(name)
    if wanted or isinstance(raw, list):
        node["required"] = list(dict.fromkeys(wanted))


def _alias(name: str) -> str | None:
    low = name.strip().lower()
    if low in _ANY:
        return None
    return _TYPE_ALIASES.get(low) or (low if low in JSON_TYPES else None)


def _fix_type(value: Any) -> str | list[str] | None:
    names = value if isinstance(value, list) else [value]
    kinds: list[str] = []
    for name in names:
        kind = _alias(name) if isinstance(name, str) else None
        if kind is None:
            return None  # "any" anywhere: no type restriction
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        return None
    return kinds[0] if len(kinds) == 1 else kinds


_NODE_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_TEXT_KEYWORDS = ("description", "title", "format", "$comment", "pattern")
_FLAG_KEYWORDS = ("readOnly", "writeOnly", "deprecated", "uniqueItems")
_COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_ANY_VALUE = ("default", "const", "example")
_PLAIN = {"type", "properties", "required", "additionalProperties", "items", "enum", "examples", "multipleOf",
          *_NODE_LISTS, *_TEXT_KEYWORDS, *_FLAG_KEYWORDS, *_COUNT_KEYWORDS, *_BOUND_KEYWORDS, *_ANY_VALUE}


def _plainly_valid(node: Any, depth: int = 0) -> bool:
    """True when ``node`` uses only common keywords, each with a value the 2020-12 metaschema accepts (checked
    here in microseconds); anything else is left to jsonschema's full metaschema check."""
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return False
    for key, value in node.items():
        if key.startswith("x-"):
            continue
        if key not in _PLAIN:
            return False
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or len(set(map(str, kinds))) != len(kinds) or any(k not in JSON_TYPES for k in kinds):
                return False
        elif key == "properties":
            if not isinstance(value, dict) or not all(_plainly_valid(v, depth + 1) for v in value.values()):
                return False
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
                return False
        elif key in ("additionalProperties", "items"):
            if not _plainly_valid(value, depth + 1):
                return False
        elif key in _NODE_LISTS:
            if not isinstance(value, list) or not value or not all(_plainly_valid(v, depth + 1) for v in value):
                return False
        elif key in ("enum", "examples"):
            if not isinstance(value, list):
                return False
        elif key in _TEXT_KEYWORDS:
            if not isinstance(value, str) or key == "pattern" and not _compiles(value):
                return False
        elif key in _FLAG_KEYWORDS:
            if not isinstance(value, bool):
                return False
        elif key in _COUNT_KEYWORDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return False
        elif key in _BOUND_KEYWORDS or key == "multipleOf":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or key == "multipleOf" and value <= 0:
                return False
    return True


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _check(schema: dict, tool: str) -> None:
    if _plainly_valid(schema):
        return
    import jsonschema  # local import: keeps ``import chatgpt_tool_hub`` light

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "parameters" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise ConfigError(f"tool '{tool}': its parameters are not a valid JSON schema at {where}: "
                          f"{exc.message[:200]}", key=tool) from None


def schema_types(node: Any) -> set[str]:
    """The JSON types a (normalised) schema allows; empty when it does not say."""
    if not isinstance(node, dict) or "type" not in node:
        return set()
    kind = node["type"]
    return set(kind) if isinstance(kind, list) else {kind}


_types = schema_types


# ---- the schema of one tool ----------------------------------------------------------------------------


class ParameterSchema:
    """A normalised schema and what a call needs of it; built once per tool."""

    def __init__(self, schema: Any, tool: str = "tool", *, allow_extra: bool = False, compiled: bool = True):
        self.tool = tool
        self.schema = normalize(schema, tool)
        self.properties: dict[str, Any] = self.schema.get("properties") or {}
        self.required: list[str] = list(self.schema.get("required") or [])
        extra = self.schema.get("additionalProperties")
        # unknown arguments are refused unless the schema (or the tool) says they are welcome
        self.allow_extra = allow_extra or extra is True or isinstance(extra, dict) or bool(
            self.schema.get("patternProperties"))
        self._validator: Any = None
        self.source: Any = None  # the dict the tool holds (set by the tool, to notice a replaced schema)
        # ``valid_as_is(arguments)``: True when :meth:`prepare` would return them unchanged, with no notes.
        # It is the schema compiled into one function (:mod:`.checker`), on the first call: the common case
        # in a microsecond; when it says no, or the schema is beyond it, the full route in prepare decides.
        # (``compiled=False``: always the full route, the reference the compiled one is tested against.)
        self.valid_as_is: Checker = self._compile_first if compiled else _never

    @property
    def checker(self) -> Checker | None:
        """The compiled function behind :attr:`valid_as_is` (built now if it is not yet); None when the
        schema is beyond it, or compiling is off."""
        if self.valid_as_is == self._compile_first:
            drops_null = frozenset(name for name, prop in self.properties.items() if isinstance(prop, dict)
                                   and name not in self.required and not _accepts_null(prop))
            self.valid_as_is = compile_checker(self.schema, refuse_unknown=not self.allow_extra,
                                               drops_null=drops_null) or _never
        return None if self.valid_as_is is _never else self.valid_as_is

    def _compile_first(self, arguments: dict) -> bool:
        return (self.checker or _never)(arguments)

    @property
    def validator(self) -> Any:
        if self._validator is None:  # built on first use, once
            import jsonschema

            self._validator = jsonschema.Draft202012Validator(self.schema)
        return self._validator

    @property
    def single(self) -> str | None:
        return next(iter(self.properties)) if len(self.properties) == 1 else None

    def prepare(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``(arguments, notes)``: unknown names refused, safe coercions applied (each one in ``notes``),
        then validated; a problem raises ``ToolInputError`` with a message for the model."""
        if self.valid_as_is(arguments):  # nothing to refuse, coerce or report
            return dict(arguments), []
        if not self.allow_extra:
            unknown = [k for k in arguments if k not in self.properties]
            if unknown:
                raise ToolInputError(
                    f"Invalid input for tool '{self.tool}': unknown argument{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))}. Accepted: {self._accepted()}. "
                    f"Expected a JSON object like {self.example()}")
        arguments, notes = self.coerce(arguments)
        if self.valid_as_is(arguments):  # valid once coerced
            return arguments, notes
        errors = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            problems = "; ".join((f"'{'.'.join(map(str, e.path))}': " if e.path else "") + _short(e.message)
                                 for e in errors[:5])
            raise ToolInputError(f"Invalid input for tool '{self.tool}': {problems}. "
                                 f"Expected a JSON object like {self.example()}")
        return arguments, notes

    def coerce(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Safe conversions of top-level values the schema does not accept as they are."""
        out = dict(arguments)
        notes: list[str] = []
        for name, value in arguments.items():
            prop = self.properties.get(name)
            if not isinstance(prop, dict):
                continue
            kinds = _types(prop)
            if value is None and name not in self.required and not _accepts_null(prop):
                out.pop(name)
                notes.append(f"{name}: null -> omitted")
                continue
            if not kinds or _fits(value, kinds):
                continue
            fixed = _convert(value, kinds)
            if fixed is not _NO:
                out[name] = fixed
                notes.append(f"{name}: {_shown(value)} -> {_shown(fixed)}")
        return out, notes

    def example(self, max_chars: int = 0) -> str:
        """A JSON object the tool takes, at most ``max_chars`` long (0: whole): nested shapes are flattened
        first, then only the required parameters are shown, then as many of them as fit, and what is left
        out is counted after the object."""
        full = json.dumps({k: _sample(v) for k, v in self.properties.items()}, ensure_ascii=False)
        if max_chars <= 0 or len(full) <= max_chars:
            return full
        flat = {k: _sample(v, 2) for k, v in self.properties.items()}
        text = json.dumps(flat, ensure_ascii=False)
        if len(text) <= max_chars:
            return text
        shown: dict[str, Any] = {}
        names = [k for k in flat if k in self.required] or list(flat)[:1]
        for name in names:
            if shown and len(json.dumps({**shown, name: flat[name]}, ensure_ascii=False)) > max_chars:
                break
            shown[name] = flat[name]
        left = len(flat) - len(shown)
        text = json.dumps(shown, ensure_ascii=False)
        return f"{text} (+{left} more parameter{'s' if left != 1 else ''})" if left else text

    def _accepted(self) -> str:
        names = [f"{k} (required)" if k in self.required else k for k in self.properties]
        return ", ".join(names) or "(none: pass {})"


_NO = object()


def _never(arguments: dict) -> bool:
    return False


def _accepts_null(prop: dict, depth: int = 0) -> bool:
    """Whether a property's schema takes ``null`` as a value (then a null is passed on, not omitted): a
    ``null`` type, ``null`` among its enum values or const, a branch of anyOf / oneOf that takes it, or no
    constraint on the type at all."""
    if "null" in _types(prop) or ("enum" in prop and None in (prop["enum"] or ())):
        return True
    if "const" in prop:
        return prop["const"] is None
    branches = [b for key in ("anyOf", "oneOf") for b in (prop.get(key) or ()) if isinstance(b, dict)]
    if branches:
        return depth < 8 and any(_accepts_null(b, depth + 1) for b in branches)
    return not _types(prop) and "enum" not in prop and "$ref" not in prop and "allOf" not in prop


def _fits(value: Any, kinds: set[str]) -> bool:
    for kind in kinds:
        if kind == "string" and isinstance(value, str) or kind == "null" and value is None:
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind == "array" and isinstance(value, list) or kind == "object" and isinstance(value, dict):
            return True
    return False


def _convert(value: Any, kinds: set[str]) -> Any:
    for kind in ("integer", "number", "boolean", "array", "object"):
        if kind not in kinds:
            continue
        if kind == "integer":
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
                return int(value.strip())
            if isinstance(value, str):  # "5.0": an integral number written as text
                try:
                    number = float(value.strip())
                except ValueError:
                    continue
                if math.isfinite(number) and number.is_integer() and abs(number) < 2**53:
                    return int(number)
        elif kind == "number" and isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                continue
            if math.isfinite(number):
                return int(number) if _INTEGER.fullmatch(value.strip()) else number
        elif kind == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        elif kind in ("array", "object") and isinstance(value, str) and value.strip()[:1] in "[{":
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if _fits(parsed, {kind}):
                return parsed
    return _NO


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def _sample(prop: Any, depth: int = 0) -> Any:
    if not isinstance(prop, dict):
        return "..."
    if "enum" in prop and prop["enum"]:
        return prop["enum"][0]
    if "default" in prop:
        return prop["default"]
    raw = prop.get("type")
    kinds = [k for k in (raw if isinstance(raw, list) else [raw]) if k and k != "null"]
    kind = kinds[0] if kinds else None
    if kind == "object" and depth < 2:
        return {k: _sample(v, depth + 1) for k, v in (prop.get("properties") or {}).items()}
    if kind == "array" and depth < 2 and isinstance(prop.get("items"), dict):
        return [_sample(prop["items"], depth + 1)]
    samples: dict[str, Any] = {"string": "...", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    return samples.get(kind, "...") if isinstance(kind, str) else "..."


# ---- the prompt ----------------------------------------------------------------------------------------


def describe_schema(schema: Mapping[str, Any], max_chars: int = 400) -> str:
    """The parameters in one compact line for the text-protocol prompt, at most ``max_chars`` long:
    ``city: string, required - the city; unit: "c"|"f" = "c"; days: integer``."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = [_describe(name, prop, name in required, 0) for name, prop in props.items()]
    text = "; ".join(parts)
    if len(text) <= max_chars:
        return text
    short = "; ".join(_describe(name, prop, name in required, 0, descriptions=False) for name, prop in props.items())
    if len(short) <= max_chars:
        return short
    return short[: max(0, max_chars - 4)].rstrip() + " ..."


def _describe(name: str, prop: Any, required: bool, depth: int, descriptions: bool = True) -> str:
    if not isinstance(prop, dict):
        return name
    head = f"{name}: {_type_text(prop, depth)}"
    if required:
        head += ", required"
    if "default" in prop and not required:
        head += f" = {json.dumps(prop['default'], ensure_ascii=False, default=str)[:30]}"
    description = " ".join(str(prop.get("description") or "").split())
    if descriptions and description:
        head += f" - {description[:80]}{'...' if len(description) > 80 else ''}"
    return head


def _type_text(prop: dict, depth: int) -> str:
    if prop.get("enum"):
        values = [json.dumps(v, ensure_ascii=False) for v in prop["enum"][:8]]
        return "|".join(values) + ("|..." if len(prop["enum"]) > 8 else "")
    for key in ("anyOf", "oneOf"):
        if isinstance(prop.get(key), list) and prop[key]:
            return " or ".join(_type_text(p, depth) for p in prop[key][:3] if isinstance(p, dict)) or "any"
    kinds = prop.get("type")
    kinds = kinds if isinstance(kinds, list) else ([kinds] if kinds else [])
    base = [k for k in kinds if k != "null"]
    text = "/".join(base) or "any"
    if "object" in base and depth < 2 and prop.get("properties"):
        inner = "; ".join(_describe(n, p, n in set(prop.get("required") or []), depth + 1, descriptions=False)
                          for n, p in prop["properties"].items())
        text = f"object {{{inner}}}"
    elif "array" in base and isinstance(prop.get("items"), dict):
        text = f"array of {_type_text(prop['items'], depth + 1)}"
    if "null" in kinds:
        text += " or null"
    return text
