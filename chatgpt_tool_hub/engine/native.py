"""Native tool calls (``tool_calling="native"``): schemas out, calls in, messages in OpenAI's format.

The loop sends ``tools=[...]`` built here; a reply's :class:`ToolCall` objects
become :class:`Action` objects that the engine dispatches like any other, and
each result goes back as a ``tool`` message that answers its call's id. A reply
without tool calls is the answer -- unless it is written in the text protocol
(a model that ignores native tools), which the text parser then reads.
"""

from __future__ import annotations

import ast
import html
import json
import re
import uuid
from typing import Any, Iterable, Mapping, Sequence

from ..errors import OutputParserError
from ..llm.base import Message, ToolCall
from ..tools.base import MalformedArguments, Tool
from .parser import Action, Finish, parse_output

__all__ = ["tool_schemas", "new_call_id", "written_action", "with_ids", "assistant_message", "describe", "tool_message", "tool_input", "decide",
           "looks_like_text_protocol"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # OpenAI's function names: ^[a-zA-Z0-9_-]{1,64}$
# the start of a text-protocol reply (after spaces, markdown bold / headers): a marker or a JSON action
_PROTOCOL_START = re.compile(r"\A[\s*#_>`]*(?:thoughts?|action|final[ _]?answer|ai)\s*(?:\*\*)?\s*[:：]"
                             r"|\A\s*\{\s*\"(?:action|tool|thoughts?|name)\"\s*:", re.IGNORECASE)
# a call the server did not take apart: chat templates' own call markup, left in the reply's text
_CALL_MARKUP = re.compile(r"<tool_call>|<\|tool_call\|>|\[TOOL_CALLS\]|<\|python_tag\|>|<function[=>]|"
                          r"<start_function_call>", re.IGNORECASE)
_ACTION_INPUT = re.compile(r"^[\s*#_]*action[ _]?input\s*(?:\*\*)?\s*[:：]", re.IGNORECASE | re.MULTILINE)
_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>\s*", re.IGNORECASE | re.DOTALL)


def tool_schemas(tools: Iterable[Tool]) -> tuple[list[dict], dict[str, str]]:
    """OpenAI function schemas of ``tools``, and a map from the names sent to the tools' own names.

    A name that is not a valid function name (spaces, dots, > 64 characters) is
    sent with the bad characters replaced by ``_`` (and a number when two collide).
    """
    schemas: list[dict] = []
    names: dict[str, str] = {}
    for tool in tools:
        schema = tool.openai_schema()
        sent = _UNSAFE.sub("_", tool.name)[:64] or "tool"
        base, n = sent, 1
        while sent in names:
            n += 1
            sent = f"{base[:60]}_{n}"
        names[sent] = tool.name
        schemas.append({**schema, "function": {**schema["function"], "name": sent}})
    return schemas, names


def new_call_id() -> str:
    """A tool call id like OpenAI's (``call_`` and 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def written_action(tool: str, arguments: Any, thought: str = "") -> str:
    """A call as the text protocol writes it (a call made elsewhere, put back into a text-mode run)."""
    value = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    head = f"Thought: {thought.strip()}\n" if thought and thought.strip() else ""
    return f"{head}Action: {tool}\nAction Input: {value}"


def with_ids(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """``calls`` with an id each, unique within the reply (servers that send none get generated ones)."""
    seen: set[str] = set()
    out: list[ToolCall] = []
    for call in calls:
        call_id = call.id or ""
        if not call_id or call_id in seen:
            call_id = f"call_{uuid.uuid4().hex[:12]}"
        seen.add(call_id)
        out.append(ToolCall(call_id, call.name, call.arguments))
    return out


def assistant_message(text: str, calls: Sequence[ToolCall]) -> Message:
    """The model's reply with its tool calls, as it goes back into the conversation."""
    return {"role": "assistant", "content": text or None, "tool_calls": [c.to_message() for c in calls]}


def describe(call: ToolCall, text: str = "") -> str:
    """The call as one line of text, after the reply's own text (``ToolStep.llm_output``)."""
    line = f"{call.name}({call.to_message()['function']['arguments']})"
    return f"{text.strip()}\n{line}" if text and text.strip() else line


def tool_message(call_id: str, content: str) -> Message:
    """A tool's observation, answering the call ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _arguments(raw: str | Mapping[str, Any] | None) -> dict | str:
    """The call's arguments: a dict when they are a JSON object; text that opens an object but is not valid
    JSON (a reply cut off mid-object) is :class:`MalformedArguments`, which no tool runs on; other text
    is kept as sent."""
    if isinstance(raw, Mapping):
        return dict(raw)
    text = (raw or "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:  # a JSONDecodeError, or int() refusing a number with too many digits
        if text.startswith("{"):
            return MalformedArguments(text, f"the call's arguments are not valid JSON ({_json_problem(exc, text)})")
        return text
    if value is None:  # "null": no arguments, as an empty string or a JSON null on the wire
        return {}
    return value if isinstance(value, dict) else text


def _json_problem(exc: ValueError, text: str) -> str:
    """What is wrong with ``text`` and where, as :func:`json.loads` reported it."""
    if not isinstance(exc, json.JSONDecodeError):
        return str(exc)
    where = "it ends before the object is closed" if exc.pos >= len(text) - 1 else f"at character {exc.pos}"
    return f"{exc.msg}; {where}"


def tool_input(call: ToolCall, tool: Tool | None) -> str | dict:
    """What the tool gets: a dict for JSON-object tools; for string tools the text under ``"input"``
    (the one property :meth:`Tool.openai_schema` gives them), or under a lone other key."""
    arguments = _arguments(call.arguments)
    if tool is None or tool.parameters is not None or isinstance(arguments, str):
        return arguments  # MalformedArguments is a str: the tool refuses it with its problem
    if "input" in arguments:
        value = arguments["input"]
    elif len(arguments) == 1:
        value = next(iter(arguments.values()))
    elif not arguments:
        return ""
    else:
        return json.dumps(arguments, ensure_ascii=False)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def looks_like_text_protocol(text: str) -> bool:
    """True when a reply is written in the text protocol: it starts with a marker (``Thought:``,
    ``Action:``, ``AI:``, ``Final Answer:``) or a JSON action, or has an ``Action Input:`` line."""
    body = _THINK.sub("", text or "")
    return bool(_PROTOCOL_START.match(body) or _ACTION_INPUT.search(body))


def decide(text: str, tool_names: Sequence[str], empty_feedback: str) -> Action | Finish:
    """A reply without tool calls: the answer, or what the text parser reads in a text-protocol reply, or
    the call it writes out as text (call markup the server did not take apart, ``name(arg=value)``).

    An empty reply raises :class:`OutputParserError` with ``empty_feedback``.
    """
    if looks_like_text_protocol(text) or "think>" in (text or "").lower() or _CALL_MARKUP.search(text or ""):
        return parse_output(text, list(tool_names))
    written = written_call(text, tool_names)
    if written is not None:
        return written
    output = (text or "").strip()
    if not output:
        raise OutputParserError("could not parse the LLM output (empty): the reply was empty",
                                feedback=empty_feedback, llm_output=text or "")
    return Finish(output, log=text)


_WRITTEN_CALL = re.compile(r"\A\s*`{0,3}(?:python\s*)?(?:functions\.)?([A-Za-z_][\w.-]*)\s*\((.*)\)\s*`{0,3}\s*\Z", re.DOTALL)


_FUNCTIONS_PREFIX = re.compile(r"\A\s*functions\.([A-Za-z_][\w.-]*)\s*:\s*(\{.*\})\s*\Z", re.DOTALL)


def written_call(text: str, tool_names: Sequence[str]) -> Action | None:
    """A reply that is nothing but a call of a known tool written as code, ``multiply(a=37, b=41)`` or
    ``functions.search("x")``, or in llama-cpp-python's function-calling format, ``functions.multiply:``
    then a JSON object: the call (keyword arguments as a dict, one positional argument as the input), else
    None. Only literals are read (:func:`ast.literal_eval`, :func:`json.loads`), nothing is run."""
    names = {n.lower(): n for n in tool_names}
    prefixed = _FUNCTIONS_PREFIX.match(text or "")
    if prefixed is not None and prefixed.group(1).lower() in names:
        try:
            arguments = json.loads(html.unescape(prefixed.group(2)))  # its template escapes quotes as &#34;
        except ValueError:
            arguments = None
        if isinstance(arguments, dict):
            return Action(names[prefixed.group(1).lower()], arguments, thought="", log=text)
    match = _WRITTEN_CALL.match(text or "")
    if match is None:
        return None
    name = names.get(match.group(1).lower())
    if name is None:
        return None
    try:
        call = ast.parse(f"f({match.group(2)})", mode="eval").body
        assert isinstance(call, ast.Call)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        args = [ast.literal_eval(a) for a in call.args]
    except (SyntaxError, ValueError, AssertionError, TypeError, RecursionError, MemoryError):
        return None
    if args and kwargs or len(args) > 1:
        return None
    if args:
        value = args[0]
        tool_input: str | dict = value if isinstance(value, (str, dict)) else json.dumps(value)
    else:
        tool_input = kwargs
    return Action(name, tool_input, thought="", log=text)
