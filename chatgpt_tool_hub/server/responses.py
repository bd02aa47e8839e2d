"""``POST /v1/responses``: OpenAI's Responses request in, the same run as a chat request.

A Responses request is turned into the chat request it means
(:func:`chat_body`) and read by :func:`~chatgpt_tool_hub.server.chat.parse_request`,
so both APIs share one run: the app, images, the client's own tools, their
pause and resumption. ``instructions`` become the first system message;
``input`` (a string, or message / ``function_call`` / ``function_call_output``
items) the messages, a run of ``function_call`` items one assistant message
with ``tool_calls``, a ``function_call_output`` a ``role: "tool"`` message;
``reasoning`` items are left out (the reasoning was the server's own).
``tools`` (functions, flat), ``tool_choice``, ``text.format``, ``temperature``,
``max_output_tokens`` and ``user`` map onto their chat names.

The server keeps no responses: ``previous_response_id``, ``conversation``,
``store: true``, ``background: true``, a stored ``prompt`` and
``item_reference`` items are refused with an OpenAI-shaped 400 naming the
parameter. Parameters about OpenAI's own serving (``include``,
``parallel_tool_calls``, ``reasoning``, ``truncation``, ``metadata``,
``top_p``, ``service_tier``, prompt-cache keys …) are accepted and change
nothing. The answer is rendered by :mod:`chatgpt_tool_hub.server.responses_render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .asgi import ApiError
from .chat import ChatRequest, parse_request

__all__ = ["ResponsesRequest", "parse_responses_request", "chat_body", "NOT_KEPT"]

NOT_KEPT = "this server keeps no responses: send the whole input (the conversation so far) with every request"
_STATEFUL = ("previous_response_id", "conversation")
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_ROLES = ("user", "system", "developer", "assistant")
_CHAT_PARAMS = {"messages": "input", "response_format": "text", "max_tokens": "max_output_tokens"}


@dataclass
class ResponsesRequest:
    """A Responses request as the chat request it means, and what the response object echoes back."""

    chat: ChatRequest
    echo: dict[str, Any] = field(default_factory=dict)


def parse_responses_request(body: Any, models: Mapping[str, str]) -> ResponsesRequest:
    """The request read (HTTP 400 naming the parameter for what this server cannot do), as a chat request."""
    converted = chat_body(body)
    try:
        chat = parse_request(converted, models)
    except ApiError as exc:
        raise _in_responses_terms(exc) from None
    return ResponsesRequest(chat, _echo(body))


def chat_body(body: Any) -> dict[str, Any]:
    """The chat completions request a Responses request means (pure: no model lookup, no run)."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object")
    _refuse_state(body)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": _messages(body)}
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise _bad("max_output_tokens", "max_output_tokens must be a whole number >= 1")
        chat["max_tokens"] = max_tokens
    for name in ("temperature", "user", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    return chat


def _refuse_state(body: Mapping[str, Any]) -> None:
    for name in _STATEFUL:
        if body.get(name):
            raise _bad(name, f"{name} is not supported: {NOT_KEPT}")
    if body.get("store") is True:
        raise _bad("store", f"store must be false or left out: {NOT_KEPT}")
    if body.get("background") is True:
        raise _bad("background", "background responses are not supported: this server keeps no responses to "
                                 "poll; send the request without background (stream it to see it progress)")
    if body.get("prompt") is not None:
        raise _bad("prompt", "stored prompts are not supported: send the prompt as instructions and input")


def _messages(body: Mapping[str, Any]) -> list[dict]:
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions", "instructions must be a string")
        if instructions.strip():
            messages.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        return messages + [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _bad("input", "input must be a string or a non-empty list of input items "
                            "(messages, function_call and function_call_output items)")
    for i, item in enumerate(raw):
        _add_item(messages, item, i)
    return messages


def _add_item(messages: list[dict], item: Any, i: int) -> None:
    """One input item onto the chat messages (a function call joins the assistant message before it)."""
    if not isinstance(item, Mapping):
        raise _bad("input", f"input[{i}] must be an object")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
            raise _bad("input", f"input[{i}]: the role {role!r} is not one of {', '.join(_ROLES)}")
        messages.append({"role": role, "content": _content(item.get("content"), f"input[{i}]")})
    elif kind == "function_call":
        call = _function_call(item, i)
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # the calls of the reply that said it
            last["tool_calls"] = [*(last.get("tool_calls") or []), call]
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _bad("input", f"input[{i}]: a function_call_output needs the call_id it answers")
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": _content(item.get("output"), f"input[{i}].output")})
    elif kind == "reasoning":
        return  # the server's own reasoning, sent back: the conversation does not need it
    elif kind == "item_reference":
        raise _bad("input", f"input[{i}]: item references are not supported: {NOT_KEPT}")
    else:
        raise _bad("input", f"input[{i}]: items of type {kind!r} are not supported (message, function_call, "
                            f"function_call_output and reasoning are)")


def _function_call(item: Mapping[str, Any], i: int) -> dict:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise _bad("input", f"input[{i}]: a function_call needs call_id and name")
    arguments = item.get("arguments")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else "{}"}}


def _content(content: Any, where: str) -> Any:
    """A message's (or a function output's) content as chat content: text, or text and image_url parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad("input", f"{where}: content must be a string or a list of content parts")
    parts: list[dict] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise _bad("input", f"{where}.content[{j}] must be an object")
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise _bad("input", f"{where}.content[{j}]: an input_image needs image_url (a data: or http(s) "
                                    f"URL); file_id is not supported: this server keeps no files")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_file":  # chat's file part: the document lands in the workspace
            parts.append({"type": "file", "file": {k: part[k] for k in ("file_data", "filename", "file_id")
                                                    if k in part}})
        elif kind == "input_audio":
            parts.append({"type": "input_audio", "input_audio": part.get("input_audio")})
        else:
            raise _bad("input", f"{where}.content[{j}]: content parts of type {kind!r} are not supported "
                                f"(input_text, output_text, input_image, input_file and input_audio are)")
    return parts


def _tools(raw: Any) -> list[dict]:
    if not isinstance(raw, list):
        raise _bad("tools", "tools must be a list of {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else None
            raise _bad("tools", f"tools[{i}]: only tools of type 'function' are supported, not {kind!r} (the "
                                f"server's own tools stand in for OpenAI's hosted ones)")
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("tool_choice", "tool_choice must be 'auto', 'none', 'required' or "
                              "{\"type\": \"function\", \"name\": ...}")


def _response_format(text: Any) -> dict | None:
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise _bad("text", "text must be an object such as {\"format\": {\"type\": \"json_schema\", ...}}")
    spec = text.get("format")
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(spec, Mapping)
        if not isinstance(spec.get("schema"), Mapping):
            raise _bad("text", "text.format json_schema needs schema, a JSON schema object")
        return {"type": "json_schema", "json_schema": {"name": spec.get("name") or "answer",
                                                       "schema": dict(spec["schema"]),
                                                       "strict": spec.get("strict")}}
    raise _bad("text", "text.format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                       "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}")


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the response object repeats of the request."""
    text = body.get("text") if isinstance(body.get("text"), Mapping) else {}
    return {"instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "tool_choice": body.get("tool_choice") or "auto", "tools": list(body.get("tools") or []),
            "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
            "text": {"format": (text or {}).get("format") or {"type": "text"}},
            "metadata": body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {},
            "user": body.get("user")}


def _in_responses_terms(exc: ApiError) -> ApiError:
    """A chat request's error with the Responses API's names for the parameters."""
    param = _CHAT_PARAMS.get(exc.param or "", exc.param)
    message = exc.message.replace("messages[", "input messages[")
    for chat_name, name in _CHAT_PARAMS.items():
        message = message.replace(f"'{chat_name}'", f"'{name}'")
    return ApiError(exc.status, message, kind=exc.kind, code=exc.code, headers=exc.headers, param=param)


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="unsupported_value" if param in _STATEFUL or param in (
        "store", "background", "tool_choice", "text") else None)
