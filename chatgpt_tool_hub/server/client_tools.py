"""A chat client's own tools: OpenAI's ``tools``, ``tool_choice``, ``response_format`` and ``n`` in, standard
``tool_calls`` answers out, ``role: "tool"`` results back in.

The client's functions become external tools of the run
(:mod:`chatgpt_tool_hub.run.external`), offered beside the server's own. When
the model calls one, the run pauses and the client gets a ``tool_calls``
answer (``finish_reason: "tool_calls"``); it runs the calls and sends the
conversation again with its ``tool`` messages, and the run goes on where it
paused. What the run did before the pause (the server's own tool calls) is
kept in :class:`Pauses` for an hour, by user and call id; when it is gone (a
restart, another replica) the run is rebuilt from the calls and results the
conversation holds.

Everything here is honoured or refused with an OpenAI-shaped 400 that names
the parameter: ``n`` other than 1, an unknown ``tool_choice`` or
``response_format``, a forced function that is not among the tools.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from ..run.external import ANY_TOOL, ExternalCall, ExternalTurn, Paused
from ..tools.external import ExternalTool
from .asgi import ApiError

__all__ = ["ClientTools", "parse_client_tools", "split_rounds", "flatten_exchange", "parse_calls", "Pauses",
           "tool_calls_message", "tool_call_deltas", "ROLES"]

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class ClientTools:
    """What one chat request asks of the run beyond the question: the client's tools, the tool choice,
    the answer's shape; and, when it answers a paused run, the rounds of calls and their results."""

    tools: list[ExternalTool] = field(default_factory=list)
    must_call: str | None = None
    answer_schema: dict | None = None
    rounds: list[list[ExternalCall]] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.tools and self.must_call is None and self.answer_schema is None and not self.rounds

    def turn(self, paused: Paused | None) -> ExternalTurn:
        """The run's :class:`ExternalTurn`: resuming ``paused`` (kept by the server) when it is the pause
        these results answer, else the pause rebuilt from the conversation."""
        resume = None
        if self.rounds:
            resume = paused if paused is not None else Paused.rebuilt(self.rounds)
        return ExternalTurn(tools=list(self.tools), must_call=self.must_call, resume=resume,
                            results=dict(self.results), answer_schema=self.answer_schema)


def parse_client_tools(body: Mapping[str, Any]) -> ClientTools:
    """The request's ``tools``, ``tool_choice``, ``response_format`` and ``n``; HTTP 400 naming the parameter
    for what cannot be honoured (the older ``functions`` / ``function_call`` included: send ``tools``)."""
    for legacy in ("functions", "function_call"):
        if body.get(legacy) is not None:
            raise _bad(legacy, f"'{legacy}' is OpenAI's older form: send 'tools' and 'tool_choice'")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise _bad("n", "n must be 1: this server makes one answer per request (send the request n times)")
    tools = _tools(body)
    names = {t.name for t in tools}
    choice = body.get("tool_choice")
    must_call: str | None = None
    if choice is None or choice == "auto":
        pass
    elif choice == "none":
        tools = []  # the model answers (the server's own tools stay at hand)
    elif choice in ("required", "any"):
        if not tools:
            raise _bad("tool_choice", "tool_choice 'required' needs tools: send them in 'tools'")
        must_call = ANY_TOOL
    elif isinstance(choice, Mapping) and choice.get("type") in ("function", None):
        function = choice.get("function") if isinstance(choice.get("function"), Mapping) else choice
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or name not in names:
            raise _bad("tool_choice", f"tool_choice names the function {name!r}, which is not in 'tools' "
                                      f"({', '.join(sorted(names)) or 'none sent'})")
        must_call = name
    else:
        raise _bad("tool_choice", "tool_choice must be 'auto', 'none', 'required' or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}")
    return ClientTools(tools=tools, must_call=must_call, answer_schema=_answer_schema(body.get("response_format")))


def split_rounds(messages: list[dict], question_at: int) -> tuple[list[list[ExternalCall]], dict[str, str]]:
    """The rounds of client tool calls after the question (``messages[question_at]``) and their results
    by call id: what a client sends back to resume a paused run. Each message is a parsed one (see
    ``chat.parse_request``: ``tool_calls`` as :class:`ExternalCall` lists, ``tool_call_id`` kept)."""
    rounds: list[list[ExternalCall]] = []
    results: dict[str, str] = {}
    for offset, message in enumerate(messages[question_at + 1:], question_at + 1):
        role = message["role"]
        if role == "assistant" and message.get("tool_calls"):
            thought = message.get("content") or ""
            rounds.append([ExternalCall(c.id, c.tool, c.arguments, thought) for c in message["tool_calls"]])
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not call_id:
                raise _bad("messages", f"messages[{offset}]: a tool message needs the tool_call_id it answers")
            results[call_id] = message.get("content") or ""
        else:
            raise _bad("messages", f"messages[{offset}]: after the last user message only the assistant's "
                                   f"tool calls and their tool results may come (the last message must be "
                                   f"the user's question or a tool result)")
    known = {c.id for r in rounds for c in r}
    unknown = [i for i in results if i not in known]
    if unknown:
        raise _bad("messages", f"a tool message answers the call {unknown[0]!r}, which no assistant message made")
    return rounds, results


def flatten_exchange(message: dict) -> dict:
    """A message of an earlier question's tool exchange as plain text (the history goes to the LLM
    without the calls' structure): an assistant's calls and a tool's result, written out."""
    if message["role"] == "assistant" and message.get("tool_calls"):
        calls = "; ".join(f"{c.tool}({_compact(c.arguments)})" for c in message["tool_calls"])
        text = (message.get("content") or "").strip()
        return {"role": "assistant", "content": f"{text}\n(called {calls})".strip()}
    if message["role"] == "tool":
        return {"role": "user", "content": f"(tool result for {message.get('tool_call_id') or 'a call'}: "
                                           f"{message.get('content') or ''})"}
    return message


def parse_calls(raw: Any, where: str) -> list[ExternalCall]:
    """An assistant message's ``tool_calls`` as calls."""
    if not isinstance(raw, list):
        raise _bad("messages", f"{where}: tool_calls must be a list")
    calls = []
    for j, item in enumerate(raw):
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise _bad("messages", f"{where}.tool_calls[{j}] needs function.name")
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _bad("messages", f"{where}.tool_calls[{j}] needs an id")
        calls.append(ExternalCall(call_id, function["name"], _arguments(function.get("arguments"))))
    return calls


class Pauses:
    """Paused runs kept for their resumption: by (user, first call id), at most ``size``, for ``ttl_s``."""

    def __init__(self, size: int = 1024, ttl_s: float = 3600.0):
        self.size, self.ttl_s = size, ttl_s
        self._kept: OrderedDict[tuple[str, str], tuple[float, Paused]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, user: str, paused: Paused) -> None:
        ids = paused.call_ids
        if not ids:
            return
        with self._lock:
            self._kept[(user, ids[0])] = (time.monotonic(), paused)
            self._kept.move_to_end((user, ids[0]))
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def take(self, user: str, rounds: Sequence[Sequence[ExternalCall]]) -> Paused | None:
        """The kept pause whose calls are the conversation's last round (taken out), else None."""
        if not rounds or not rounds[-1]:
            return None
        key = (user, rounds[-1][0].id)
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is None or time.monotonic() - kept[0] > self.ttl_s:
            return None
        paused = kept[1]
        if paused.call_ids != [c.id for c in rounds[-1]]:
            return None
        return paused


def tool_calls_message(paused: Paused) -> dict:
    """The assistant message of a paused run: OpenAI's ``tool_calls`` answer."""
    return {"role": "assistant", "content": None,
            "tool_calls": [_wire_call(call) for call in paused.calls]}


def tool_call_deltas(paused: Paused) -> list[dict]:
    """The stream deltas of a paused run's calls: one per call, whole (``index``, ``id``, name, arguments)."""
    return [{"tool_calls": [{"index": i, **_wire_call(call)}]} for i, call in enumerate(paused.calls)]


def _wire_call(call: ExternalCall) -> dict:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
    return {"id": call.id, "type": "function", "function": {"name": call.tool, "arguments": arguments}}


def _tools(body: Mapping[str, Any]) -> list[ExternalTool]:
    raw = body.get("tools")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}}")
    tools: dict[str, ExternalTool] = {}
    for i, definition in enumerate(raw):
        if isinstance(definition, Mapping) and definition.get("type", "function") != "function":
            raise _bad("tools", f"tools[{i}]: only tools of type 'function' are supported, not "
                                f"{definition.get('type')!r}")
        try:
            made = ExternalTool.from_openai(definition)
        except ConfigError as exc:
            raise _bad("tools", f"tools[{i}]: {exc}") from None
        if made.name in tools:
            raise _bad("tools", f"tools[{i}]: the function name {made.name!r} is given twice")
        tools[made.name] = made
    return list(tools.values())


def _answer_schema(response_format: Any) -> dict | None:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise _bad("response_format", "response_format json_schema needs json_schema.schema, a JSON schema object")
        return dict(schema)
    raise _bad("response_format", "response_format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                                  "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}")


def _arguments(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return dict(raw)
    text = raw if isinstance(raw, str) else ""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _compact(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="unsupported_value" if param in ("n", "tool_choice",
                                                                                      "response_format") else None)
