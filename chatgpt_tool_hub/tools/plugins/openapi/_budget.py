"""How much of a request one plugin's tools may take.

Every request with native tool calls carries every tool's definition (name,
description, parameter schema); a large API's document can make that
megabytes. ``max_tools`` (default 64) warns past that many tools;
``max_schema_bytes`` (default 256 KiB, the definitions as JSON) first shortens
the definitions -- examples, titles, ``x-*`` and other annotations, then nested
descriptions, then schemas nested deeper than four levels keep only their
type -- and refuses the plugin (``ConfigError``) when even that does not fit.
Both messages suggest the ``operations`` option; ``0`` turns a limit off.
"""

from __future__ import annotations

import json
from typing import Any

from ....config import SETTINGS
from ._common import bad, log

DEFAULT_MAX_TOOLS = SETTINGS["openapi_max_tools"].default
DEFAULT_MAX_SCHEMA_BYTES = SETTINGS["openapi_max_schema_bytes"].default
_ANNOTATIONS = {"example", "examples", "title", "$comment", "deprecated", "readOnly", "writeOnly", "externalDocs",
                "xml", "discriminator", "$schema", "$id", "contentMediaType", "contentEncoding"}
_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SINGLE = ("additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else",
           "unevaluatedProperties", "unevaluatedItems")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_KEEP_SHALLOW = ("type", "enum", "const", "description")


def tool_bytes(tool: Any) -> int:
    return len(json.dumps(tool.openai_schema(), ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _size(text: int) -> str:
    return f"{text / (1024 * 1024):.1f} MB" if text >= 1024 * 1024 else f"{text / 1024:.0f} KB"


def _shorten(node: Any, level: int, depth: int) -> Any:
    """A shortened copy of a schema. Level 1: annotations dropped, long descriptions cut; level 2: nested
    descriptions dropped too; level 3: below depth 4 only the type (and enum / const) is kept."""
    if not isinstance(node, dict):
        return node
    if level >= 3 and depth > 4:
        return {k: node[k] for k in _KEEP_SHALLOW if k in node and k != "description"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ANNOTATIONS or key.startswith("x-"):
            continue
        if key == "description":
            if level >= 2 and depth > 1 or not isinstance(value, str):
                continue
            out[key] = value if len(value) <= 160 else value[:157] + "..."
        elif key in _MAPS and isinstance(value, dict):
            out[key] = {k: _shorten(v, level, depth + 1) for k, v in value.items()}
        elif key in _SINGLE:
            out[key] = _shorten(value, level, depth + 1)
        elif key in _LISTS and isinstance(value, list):
            out[key] = [_shorten(v, level, depth + 1) for v in value]
        else:
            out[key] = value
    return out


def _limit(value: Any, name: str, default: int, label: str) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise bad(label, f"'{name}' must be a whole number (0: no limit); got {str(value)[:40]!r}")
    return number


_HINT = ("pick the operations you need with the entry's 'operations' option (operationIds, tool names or "
         "\"METHOD /path\")")


class Tally:
    """Counts, while the tools are made, what their definitions take at the least (fully shortened), so that
    a document far past ``max_schema_bytes`` is refused before all its tools are built."""

    def __init__(self, label: str, max_tools: Any, max_schema_bytes: Any):
        self.label = label
        self.max_tools = _limit(max_tools, "max_tools", DEFAULT_MAX_TOOLS, label)
        self.max_bytes = _limit(max_schema_bytes, "max_schema_bytes", DEFAULT_MAX_SCHEMA_BYTES, label)
        self.floor = 0
        self.count = 0

    def add(self, tool: Any, operations: int) -> None:
        self.count += 1
        if not self.max_bytes:
            return
        short = {"type": "function", "function": {"name": tool.name, "description": tool.description[:300],
                                                  "parameters": _shorten(tool.parameters, 3, 0)}}
        self.floor += len(json.dumps(short, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        if self.floor > self.max_bytes * 1.1:  # a margin: the final check (after normalising) decides near the limit
            raise bad(self.label, f"its tool definitions take more than {_size(self.floor)} even shortened (counted "
                                  f"{self.count} of {operations} operations), over max_schema_bytes "
                                  f"({_size(self.max_bytes)}): every native tool-call request would carry them; "
                                  f"{_HINT}, or raise max_schema_bytes (0: no limit)")


def apply(tools: list, label: str, max_tools: Any, max_schema_bytes: Any) -> None:
    """Warn past ``max_tools``; shorten definitions past ``max_schema_bytes``, refuse when they still do not fit."""
    most_tools = _limit(max_tools, "max_tools", DEFAULT_MAX_TOOLS, label)
    most_bytes = _limit(max_schema_bytes, "max_schema_bytes", DEFAULT_MAX_SCHEMA_BYTES, label)
    hint = _HINT
    if most_tools and len(tools) > most_tools:
        log.warning("OpenAPI source %s gives %d tools, more than max_tools (%d): every tool costs prompt space and "
                    "the model chooses worse among many; %s, or raise max_tools (openapi_max_tools for every "
                    "entry)", label, len(tools), most_tools, hint)
    if not most_bytes:
        return
    total = sum(tool_bytes(t) for t in tools)
    if total <= most_bytes:
        return
    before = total
    for level in (1, 2, 3):
        for tool in tools:
            tool.parameters = _shorten(tool.parameters, level, 0)
            if level >= 2 and len(tool.description) > 300:
                tool.description = tool.description[:297] + "..."
        total = sum(tool_bytes(t) for t in tools)
        if total <= most_bytes:
            log.warning("OpenAPI source %s: its %d tool definitions take %s, over max_schema_bytes (%s), the part "
                        "of every native tool-call request they may take; they were shortened to %s (%s). To "
                        "keep them whole, %s, or raise max_schema_bytes (openapi_max_schema_bytes for every "
                        "entry)", label, len(tools), _size(before), _size(most_bytes), _size(total),
                        ("examples and annotations dropped", "nested descriptions dropped too",
                         "schemas below four levels keep only their type")[level - 1], hint)
            return
    raise bad(label, f"its {len(tools)} tool definitions take {_size(before)} ({_size(total)} even shortened), over "
                     f"max_schema_bytes ({_size(most_bytes)}): every native tool-call request would carry them; "
                     f"{hint}, or raise max_schema_bytes (0: no limit)")
