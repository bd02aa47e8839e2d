"""The LLM protocol: messages in, text + finish reason + token usage out.

With native tool calling (opt-in), ``complete`` also takes ``tools`` (OpenAI
function schemas) and the response may carry :class:`ToolCall` objects.

The async path is optional: an LLM object may have ``acomplete`` and
``astream`` (coroutine / async iterator, same arguments); :func:`acall_llm`
and :func:`astream_llm` use them, and run ``complete`` / ``stream`` in a
thread for objects without them. ``with_options(temperature=..., max_tokens=...)``
(optional too) returns a copy with other sampling settings for one request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from ..runtime.bridge import aiter_in_thread

__all__ = ["Message", "Usage", "ToolCall", "LLMResponse", "StreamChunk", "LLM", "BaseLLM", "collect_stream",
           "call_llm", "stream_llm", "acall_llm", "astream_llm", "with_options", "as_response", "as_tool_calls"]

# {"role": "system" | "user" | "assistant", "content": str}; with native tool calls also an assistant
# message with "tool_calls" and {"role": "tool", "tool_call_id": ..., "content": ...}
Message = dict[str, Any]


@dataclass
class Usage:
    """Token usage of one call (or a sum of calls)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # True when counted locally rather than reported by the server

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
        )


@dataclass
class ToolCall:
    """A native tool call the model asked for: ``arguments`` is the JSON text (or an already parsed dict)."""

    id: str
    name: str
    arguments: str | dict[str, Any] = ""

    def to_message(self) -> dict[str, Any]:
        """The call as it appears in an assistant message's ``tool_calls`` (OpenAI's format)."""
        arguments = self.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass
class LLMResponse:
    text: str
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)  # native tool calls; empty in the text protocol


@dataclass
class StreamChunk:
    """A piece of a streamed completion. The last chunk carries finish reason, usage and any tool calls."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@runtime_checkable
class LLM(Protocol):
    """What the engine needs from a language model.

    ``complete`` is required. ``stream`` is optional: without it the engine
    falls back to ``complete`` and emits the whole text as one token event.
    For ``tool_calling="native"`` both also take ``tools=[...]`` (OpenAI
    function schemas) and return the calls in ``LLMResponse.tool_calls``
    (``StreamChunk.tool_calls`` of the last chunk).
    """

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        ...


class BaseLLM:
    """Convenience base: implement ``complete``; ``stream`` defaults to one chunk."""

    model_name: str = "unknown"

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        raise NotImplementedError

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StreamChunk]:
        if tools:  # through call_llm: a complete() without ``tools`` gets a clear error
            response = call_llm(self, messages, stop, tools)
        else:
            response = self.complete(messages, stop=stop)
        yield StreamChunk(text=response.text, finish_reason=response.finish_reason, usage=response.usage,
                          tool_calls=list(response.tool_calls))


def collect_stream(chunks: Iterator[StreamChunk]) -> LLMResponse:
    """Fold a stream into one :class:`LLMResponse`."""
    parts: list[str] = []
    finish: str | None = None
    usage = Usage()
    calls: list[ToolCall] = []
    for chunk in chunks:
        parts.append(chunk.text or "")
        if chunk.finish_reason:
            finish = chunk.finish_reason
        if chunk.usage is not None:
            usage = chunk.usage
        calls.extend(as_tool_calls(getattr(chunk, "tool_calls", None)))
    return LLMResponse(text="".join(parts), finish_reason=finish, usage=usage, tool_calls=calls)


# ---- calling any LLM-like object -------------------------------------------------------------


def as_tool_calls(raw: Any) -> list[ToolCall]:
    """:class:`ToolCall` objects from what an LLM object gave: ToolCalls, or dicts in OpenAI's format
    (``{"id", "function": {"name", "arguments"}}``) or flat (``{"id", "name", "arguments"}``)."""
    calls: list[ToolCall] = []
    for item in raw or ():
        if isinstance(item, ToolCall):
            calls.append(item)
            continue
        if not isinstance(item, Mapping):
            item = {"id": getattr(item, "id", None), "function": getattr(item, "function", None),
                    "name": getattr(item, "name", None), "arguments": getattr(item, "arguments", None)}
        function = item.get("function")
        if function is not None and not isinstance(function, Mapping):
            function = {"name": getattr(function, "name", None), "arguments": getattr(function, "arguments", None)}
        source = function if isinstance(function, Mapping) else item
        name = source.get("name")
        if not name:
            continue
        arguments = source.get("arguments")
        calls.append(ToolCall(id=str(item.get("id") or ""), name=str(name),
                              arguments=arguments if isinstance(arguments, (str, dict)) else
                              ("" if arguments is None else json.dumps(arguments, default=str))))
    return calls


def as_response(raw: object) -> LLMResponse:
    """An :class:`LLMResponse` from what an LLM object returned (a response, a string, or None)."""
    if isinstance(raw, LLMResponse):
        if raw.text is None:
            raw.text = ""
        if not isinstance(raw.usage, Usage):
            raw.usage = Usage()
        if raw.tool_calls and not all(isinstance(c, ToolCall) for c in raw.tool_calls):
            raw.tool_calls = as_tool_calls(raw.tool_calls)
        elif raw.tool_calls is None:
            raw.tool_calls = []
        return raw
    if raw is None:
        return LLMResponse(text="", finish_reason="empty")
    if isinstance(raw, str):
        return LLMResponse(text=raw)
    text = getattr(raw, "text", None)
    if isinstance(text, str):
        usage = getattr(raw, "usage", None)
        return LLMResponse(text=text, finish_reason=getattr(raw, "finish_reason", None),
                           usage=usage if isinstance(usage, Usage) else Usage(),
                           tool_calls=as_tool_calls(getattr(raw, "tool_calls", None)))
    return LLMResponse(text=str(raw))


def _accepts_stop(exc: TypeError) -> bool:
    return "stop" not in str(exc)


def _rejects_tools(exc: TypeError) -> bool:  # "complete() got an unexpected keyword argument 'tools'"
    return "'tools'" in str(exc)


def _no_native_tools(llm: object) -> Exception:
    from ..errors import UserError

    return UserError(f"the LLM {type(llm).__name__} does not support native tool calls (its complete() takes "
                     f"no 'tools' keyword): set tool_calling=\"text\" (TOOL_CALLING=text), or give the LLM a "
                     f"'tools' keyword that returns LLMResponse.tool_calls")


def call_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None,
             tools: Sequence[dict[str, Any]] | None = None) -> LLMResponse:
    """``llm.complete`` on a copy of ``messages``, tolerant of LLM objects written loosely.

    A ``complete`` without a ``stop`` keyword is called without it, and a
    plain-string reply is wrapped; stop sequences are then applied here.
    ``tools`` (OpenAI function schemas) is passed only when given; a
    ``complete`` that does not take it raises a :class:`~chatgpt_tool_hub.errors.UserError`.
    """
    from .stops import cut_at_stop

    extra: dict[str, Any] = {"tools": list(tools)} if tools else {}
    try:
        return as_response(llm.complete(list(messages), stop=list(stop) if stop else None, **extra))
    except TypeError as exc:
        if extra and _rejects_tools(exc):
            raise _no_native_tools(llm) from None
        if _accepts_stop(exc):
            raise
    try:
        response = as_response(llm.complete(list(messages), **extra))
    except TypeError as exc:
        if extra and _rejects_tools(exc):
            raise _no_native_tools(llm) from None
        raise
    response.text = cut_at_stop(response.text, stop)[0]
    return response


def stream_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None,
               tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StreamChunk]:
    """``llm.stream`` when the object has one (string pieces are wrapped), else one chunk from ``complete``.

    With ``tools``, a ``stream`` that does not take them is replaced by one chunk from ``complete``.
    """
    streamer = getattr(llm, "stream", None)
    chunks = None if streamer is None else _open_stream(streamer, messages, stop, tools)
    if chunks is None:
        response = call_llm(llm, messages, stop, tools)
        yield StreamChunk(text=response.text, finish_reason=response.finish_reason, usage=response.usage,
                          tool_calls=list(response.tool_calls))
        return
    for chunk in chunks:
        yield StreamChunk(text=chunk) if isinstance(chunk, str) else chunk


def _open_stream(streamer: Any, messages: Sequence[Message], stop: Sequence[str] | None,
                 tools: Sequence[dict[str, Any]] | None) -> Any:
    """``streamer(...)``; a stream() without a stop keyword is called without it (the caller cuts at
    stop sequences); None when ``tools`` are given and it does not take them."""
    extra = {"tools": list(tools)} if tools else {}
    try:
        return streamer(list(messages), stop=list(stop) if stop else None, **extra)
    except TypeError as exc:
        if extra and _rejects_tools(exc):
            return None
        if _accepts_stop(exc):
            raise
    try:
        return streamer(list(messages), **extra)
    except TypeError as exc:
        if extra and _rejects_tools(exc):
            return None
        raise


# ---- the async path -------------------------------------------------------------------------


def with_options(llm: Any, **options: Any) -> Any:
    """``llm.with_options(**options)`` (unset options dropped) when the object has it, else ``llm`` itself."""
    options = {k: v for k, v in options.items() if v is not None}
    method = getattr(llm, "with_options", None)
    if not options or not callable(method):
        return llm
    return method(**options)


async def acall_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None,
                    tools: Sequence[dict[str, Any]] | None = None, *, executor: Any = None) -> LLMResponse:
    """:func:`call_llm` for asyncio: ``llm.acomplete`` awaited when the object has one, else ``complete``
    in ``executor`` (None: the event loop's default)."""
    from .stops import cut_at_stop

    acomplete = getattr(llm, "acomplete", None)
    if acomplete is None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, lambda: call_llm(llm, messages, stop, tools))
    extra = {"tools": list(tools)} if tools else {}
    try:
        response = as_response(await acomplete(list(messages), stop=list(stop) if stop else None, **extra))
    except TypeError as exc:
        if extra and _rejects_tools(exc):
            raise _no_native_tools(llm) from None
        raise
    response.text = cut_at_stop(response.text, stop)[0]
    return response


async def astream_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None,
                      tools: Sequence[dict[str, Any]] | None = None, *, executor: Any = None) -> AsyncIterator[StreamChunk]:
    """:func:`stream_llm` for asyncio: ``llm.astream`` when the object has one, else one chunk from
    ``acomplete``, else ``stream`` read in a thread of ``executor`` (chunks arrive as they are made)."""
    astream = getattr(llm, "astream", None)
    if astream is not None:
        extra = {"tools": list(tools)} if tools else {}
        source = astream(list(messages), stop=list(stop) if stop else None, **extra)
        try:
            async for chunk in source:
                yield StreamChunk(text=chunk) if isinstance(chunk, str) else chunk
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
        return
    if getattr(llm, "acomplete", None) is not None:
        response = await acall_llm(llm, messages, stop, tools, executor=executor)
        yield StreamChunk(text=response.text, finish_reason=response.finish_reason, usage=response.usage,
                          tool_calls=list(response.tool_calls))
        return
    async for chunk in aiter_in_thread(lambda: stream_llm(llm, messages, stop, tools), executor):
        yield chunk
