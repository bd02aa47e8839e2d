"""Pieces of the OpenAI-compatible client that hold no connection: the secret holder, URLs,
``Retry-After``, reading completions and streamed chunks, the request's arguments, closing responses
(shared by the sync and async paths)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Sequence
from urllib.parse import urlsplit

from .base import StreamChunk, ToolCall, Usage
from .stops import StopCutter

logger = logging.getLogger("chatgpt_tool_hub.llm")

OPENAI_BASE_URL = "https://api.openai.com/v1"


class _Secret:
    """Holds the API key; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"

    __str__ = __repr__


def _blank_to_none(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _safe_url(url: str | None) -> str:
    """``url`` without user-info or query (which may carry credentials)."""
    if not url:
        return OPENAI_BASE_URL
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else url.split("?")[0]
    except ValueError:
        return "<invalid url>"


def _is_openai_url(url: str | None) -> bool:
    if not url:
        return True
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return host == "openai.com" or host.endswith(".openai.com")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    if not headers:
        return None
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return max(0.0, float(value) / 1000.0)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _as_dict(obj: Any) -> Any:
    """A parsed openai object (pydantic model, str, dict…) as plain JSON data."""
    if obj is None or isinstance(obj, (dict, list, int, float, bool)):
        return obj
    if isinstance(obj, (str, bytes)):
        try:
            return json.loads(obj)
        except ValueError:
            return None
    for method in ("to_dict", "model_dump"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                return fn()
            except Exception:
                continue
    return None


def _usage_from(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return None
    try:
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), False)
    except (TypeError, ValueError):
        return None


def _tool_calls_from(message: Any) -> list[ToolCall]:
    """The tool calls of a completion's ``message`` (OpenAI's format); entries that are no call at all are
    skipped, a call without a name is kept (the engine answers it as an unknown tool, never drops it)."""
    raw = message.get("tool_calls") if isinstance(message, Mapping) else None
    calls: list[ToolCall] = []
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, (str, dict)):
            arguments = "" if arguments is None else json.dumps(arguments)
        calls.append(ToolCall(id=str(item.get("id") or f"call_{i}"), name=str(function.get("name") or ""),
                              arguments=arguments))
    return calls


class _ToolCallDeltas:
    """Puts streamed tool-call deltas together by their ``index``."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def feed(self, deltas: Any) -> None:
        for position, delta in enumerate(deltas if isinstance(deltas, list) else []):
            if not isinstance(delta, Mapping):
                continue
            index = delta.get("index")
            part = self._parts.setdefault(index if isinstance(index, int) else position,
                                          {"id": "", "name": "", "arguments": ""})
            if delta.get("id"):
                part["id"] = str(delta["id"])
            function = delta.get("function")
            if not isinstance(function, Mapping):
                continue
            name = function.get("name")
            if isinstance(name, str) and name and name != part["name"]:
                part["name"] += name  # servers send the name once; a repeat of the same name is not news
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                part["arguments"] += arguments
            elif isinstance(arguments, dict):
                part["arguments"] += json.dumps(arguments)

    def calls(self) -> list[ToolCall]:
        return [ToolCall(id=part["id"] or f"call_{index}", name=part["name"], arguments=part["arguments"])
                for index, part in sorted(self._parts.items()) if part["name"] or part["arguments"]]


class _Attempt(Exception):
    """Internal: a failed attempt that may be retried."""

    def __init__(self, what: str, retry_after: float | None = None, server_said: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after
        self.server_said = server_said  # the server answered with this error message (a 5xx, a 429...)
        self.error: Exception | None = None  # the exception of the attempt


def _chain_mentions(exc: BaseException, secret: str) -> bool:
    """True when ``secret`` appears in any exception of the ``__cause__``/``__context__`` chain."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts = (str(current), repr(current.args), repr(getattr(current, "body", "")))
        if any(secret in text for text in texts):
            return True
        stack.extend((current.__cause__, current.__context__))
    return False


class StreamState:
    """One streamed completion read chunk by chunk: text cut at the stop sequences, tool-call deltas put
    together, usage and finish reason kept. ``feed`` returns the chunks to yield; ``last`` the final one."""

    def __init__(self, stops: Sequence[str]):
        self.cutter = StopCutter(list(stops))
        self.deltas = _ToolCallDeltas()
        self.parts: list[str] = []
        self.finish: str | None = None
        self.usage: Usage | None = None

    @property
    def stopped(self) -> bool:
        return self.cutter.stopped

    def feed(self, chunk: Any) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        data = _as_dict(chunk)
        if not isinstance(data, Mapping):
            return out
        self.usage = _usage_from(data) or self.usage
        for choice in data.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = delta.get("content") if isinstance(delta, Mapping) else None
            if isinstance(piece, str) and piece:
                text = self.cutter.feed(piece)
                if text:
                    self.parts.append(text)
                    out.append(StreamChunk(text=text))
            if isinstance(delta, Mapping) and delta.get("tool_calls"):
                self.deltas.feed(delta["tool_calls"])
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        if self.cutter.stopped:
            self.finish = "stop"
        return out

    def last(self, endpoint: str, estimate: Any) -> StreamChunk:
        """The final chunk: the held-back tail, the finish reason, usage (``estimate(text, calls)`` when the
        server sent none) and the tool calls."""
        tail = self.cutter.flush()
        text = "".join(self.parts) + tail
        calls = self.deltas.calls()
        finish = self.finish
        if calls:
            finish = finish or "tool_calls"
        elif not text and finish not in ("content_filter", "length"):
            logger.warning("LLM endpoint %s streamed no text (finish_reason=%s)", endpoint, finish)
            finish = "empty"
        elif finish is None:
            logger.warning("LLM stream from %s ended without a finish reason", endpoint)
            finish = "stop"
        usage = self.usage if self.usage is not None else estimate(text, calls)
        return StreamChunk(text=tail, finish_reason=finish, usage=usage, tool_calls=calls)


# --- requests and responses of the client ------------------------------------------------------


def _request(params: dict[str, Any]) -> dict[str, Any]:
    """``create()``'s arguments for ``params``: the body goes as ``extra_body`` (the same JSON is sent),
    so the client does not walk every message through its type transforms (a third of the CPU time of
    a request with a long conversation)."""
    body = {k: v for k, v in params.items() if k not in ("model", "stream")}
    request: dict[str, Any] = {"model": params["model"], "messages": [], "extra_body": body}
    if params.get("stream"):
        request["stream"] = True
    return request


def _json_body(raw: Any) -> Any:
    """A completion's body as plain JSON data (no typed object is built); JSON errors go to the caller."""
    return json.loads(raw.http_response.content)


def _close(stream_obj: Any) -> None:
    close = getattr(stream_obj, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass


async def _aclose(stream_obj: Any) -> None:
    close = getattr(stream_obj, "close", None)
    if callable(close):
        try:
            result = close()
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            pass
