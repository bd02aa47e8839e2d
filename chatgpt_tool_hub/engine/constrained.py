"""Constrained replies in text mode: a JSON schema that only admits a valid action or a final answer.

With ``constrained_decoding`` on (see :mod:`chatgpt_tool_hub.llm.servers`), the
server keeps each reply to :func:`reply_schema`: one JSON object whose
``action`` is one of the registry's tool names, with an ``action_input`` that
follows that tool's argument schema, or ``"Final Answer"`` with the answer as
text. The parser already reads this form (``{"action", "action_input"}``), so
even a model too small to follow any text format never writes an unreadable
action. :func:`final_schema` admits the final answer only (the last call at the
think-depth limit).

Tool schemas are cut down to what grammar-based decoders (llama.cpp, outlines,
xgrammar) all take and decode fast: types, properties, required, items, enum
and const; descriptions, formats, patterns and length bounds stay in the
prompt.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..tools.base import Tool

__all__ = ["FINAL_ACTION", "reply_schema", "final_schema"]

FINAL_ACTION = "Final Answer"
# no length bounds: llama.cpp writes maxLength n as n nested optional characters, a grammar so deep that
# decoding slows to a crawl (and its server can crash); the request's max_tokens bounds a reply instead
_KEPT = ("type", "enum", "const", "required")


def reply_schema(tools: Iterable[Tool]) -> dict[str, Any]:
    """The schema of a reply: one of the tools' actions, or the final answer."""
    return {"anyOf": [*(_option(tool.name, _input_schema(tool)) for tool in tools), _final()]}


def final_schema() -> dict[str, Any]:
    """The schema of a reply that may only be the final answer."""
    return _final()


def _final() -> dict[str, Any]:
    return _option(FINAL_ACTION, {"type": "string"})


def _option(action: str, input_schema: Mapping[str, Any]) -> dict[str, Any]:
    # the action comes first and there is no free-text thought: a small model that is made to choose among
    # the tool names at once chooses; one let loose in a thought writes until the token limit
    return {
        "type": "object",
        "properties": {"action": {"const": action}, "action_input": dict(input_schema)},
        "required": ["action", "action_input"],
        "additionalProperties": False,
    }


def _input_schema(tool: Tool) -> dict[str, Any]:
    """What the tool takes: text for a text tool (or a tool whose one argument is text), else its
    arguments' object schema, cut down to what every grammar decoder takes."""
    if tool.parameters is None:
        return {"type": "string"}
    try:
        parameters = tool.openai_schema()["function"]["parameters"]
    except (KeyError, TypeError):
        return {"type": "string"}
    return _plain(parameters, depth=0)


def _plain(node: Any, depth: int) -> dict[str, Any]:
    """``node`` with only the keywords every decoder takes; anything deeper than a few levels is any JSON."""
    if not isinstance(node, Mapping) or depth > 6:
        return {}
    out: dict[str, Any] = {k: node[k] for k in _KEPT if k in node}
    if isinstance(node.get("properties"), Mapping):
        out["properties"] = {str(k): _plain(v, depth + 1) for k, v in node["properties"].items()}
        if isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r in out["properties"]]
    if isinstance(node.get("items"), Mapping):
        out["items"] = _plain(node["items"], depth + 1)
    variants = node.get("anyOf") or node.get("oneOf")
    if isinstance(variants, list):
        out["anyOf"] = [_plain(v, depth + 1) for v in variants]
    if node.get("additionalProperties") is False:
        out["additionalProperties"] = False
    return out
