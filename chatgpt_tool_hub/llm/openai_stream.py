"""A streamed chat completion read from the raw response: the server-sent events' ``data:`` payloads parsed
as JSON, with no typed object built per chunk (the ``openai`` package's ``Stream`` builds one for every
chunk, most of a streamed request's CPU time).

``iter_payloads`` / ``aiter_payloads`` take the response of
``client.chat.completions.with_streaming_response.create(...)`` and yield each
payload (a dict) up to ``data: [DONE]``. They behave as the package's stream
does: a payload with an ``error`` raises ``openai.APIError`` (its message and
body the server's), timeouts and transport failures while reading raise
``openai.APITimeoutError`` / ``openai.APIConnectionError``, and a payload that
is not JSON raises ``json.JSONDecodeError``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Mapping
from typing import Any, AsyncIterator, Iterator, TypeGuard

__all__ = ["SSEPayloads", "iter_payloads", "aiter_payloads"]

DRAIN_S = 0.1  # after [DONE], how long the rest of the body may take (read to reuse the connection)


class SSEPayloads:
    """Server-sent events fed as raw bytes; ``feed`` returns the ``data`` of the events they complete, as
    JSON, until ``data: [DONE]`` (then ``done`` is True and the rest is ignored). Lines may end in LF, CRLF
    or CR; a line may be split across feeds; comments and the other fields (``event``, ``id``, ``retry``)
    carry nothing a chat completion needs. An event the stream ends in without its blank line is dropped,
    as the ``openai`` package's reader drops it."""

    __slots__ = ("_rest", "_data", "_skip_lf", "done")

    def __init__(self) -> None:
        self._rest = b""
        self._data: list[bytes] = []
        self._skip_lf = False
        self.done = False

    def feed(self, raw: bytes) -> list[Any]:
        if self.done or not raw:
            return []
        if self._skip_lf:  # the CR that ended the last feed and this LF are one line end
            self._skip_lf = False
            if raw[:1] == b"\n":
                raw = raw[1:]
        text = self._rest + raw if self._rest else raw
        if b"\r" in text:
            self._skip_lf = text.endswith(b"\r")
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self._rest = lines.pop()
        out: list[Any] = []
        for line in lines:
            if not line:
                if self._data:
                    data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                    self._data = []
                    if data.startswith(b"[DONE]"):
                        self.done = True
                        self._rest = b""
                        return out
                    out.append(json.loads(data))
            elif line.startswith(b"data"):
                field, colon, value = line.partition(b":")
                if field == b"data":
                    self._data.append(value[1:] if value[:1] == b" " else value)
        return out


def _checked(payload: Any, response: Any) -> Any:
    """The payload, or ``openai.APIError`` when the server sent an error in the stream."""
    if isinstance(payload, Mapping) and payload.get("error"):
        import openai

        error = payload["error"]
        message = error.get("message") if isinstance(error, Mapping) else None
        if not message or not isinstance(message, str):
            message = "An error occurred during streaming"
        raise openai.APIError(message, _request_of(response), body=error)
    return payload


def _request_of(response: Any) -> Any:
    try:
        return response.http_response.request
    except Exception:  # noqa: BLE001 - a response without its request (tests' fakes)
        return None


_Errors = tuple[type[BaseException], ...]
_ERRORS: dict[str, tuple[_Errors, _Errors]] = {}


def _is_error(t: Any) -> TypeGuard[type[BaseException]]:
    return isinstance(t, type) and issubclass(t, BaseException)


def _transport_errors(response: Any) -> tuple[_Errors, _Errors]:
    """(timeouts, other transport errors) of the HTTP package under the response (httpx2, or httpx)."""
    name = type(getattr(response, "http_response", response)).__module__.partition(".")[0]
    found = _ERRORS.get(name)
    if found is None:
        module = sys.modules.get(name)
        timeouts: _Errors = tuple(t for t in (getattr(module, "TimeoutException", None),) if _is_error(t))
        others: _Errors = (ssl.SSLError,)
        others += tuple(t for t in (getattr(module, "RequestError", None),) if _is_error(t))
        anyio = sys.modules.get("anyio")
        if anyio is not None and _is_error(getattr(anyio, "EndOfStream", None)):
            others += (anyio.EndOfStream,)
        found = _ERRORS[name] = (timeouts, others)
    return found


def _openai_error(err: BaseException, response: Any, timeouts: _Errors) -> Exception:
    import openai

    if timeouts and isinstance(err, timeouts):
        return openai.APITimeoutError(request=_request_of(response))
    return openai.APIConnectionError(request=_request_of(response))


def iter_payloads(response: Any) -> Iterator[Any]:
    """The payloads of a streamed response (``openai``'s ``APIResponse``), up to ``[DONE]``."""
    timeouts, others = _transport_errors(response)
    events = SSEPayloads()
    try:
        for raw in response.iter_bytes():
            for payload in events.feed(raw):
                yield _checked(payload, response)
            if events.done:
                return
    except timeouts + others as err:
        raise _openai_error(err, response, timeouts) from err


async def aiter_payloads(response: Any) -> AsyncIterator[Any]:
    """The payloads of a streamed response (``openai``'s ``AsyncAPIResponse``), up to ``[DONE]``; then the
    rest of the body is read (for at most ``DRAIN_S``), so the connection goes back to the pool."""
    timeouts, others = _transport_errors(response)
    events = SSEPayloads()
    chunks = response.iter_bytes().__aiter__()
    try:
        async for raw in chunks:
            for payload in events.feed(raw):
                yield _checked(payload, response)
            if events.done:
                break
    except timeouts + others as err:
        raise _openai_error(err, response, timeouts) from err
    finally:
        if not events.done:  # left early (a stop string, an error): the body's reader is closed now
            await _aclose_quietly(chunks)
    if events.done:
        if _timeout is not None:  # Python 3.10 has no asyncio.timeout: there the connection is closed instead
            try:
                async with _timeout(DRAIN_S):  # in this task: the body's reader may hold its cancel scopes
                    async for _ in chunks:
                        pass
            except (TimeoutError,) + timeouts + others:
                pass  # the answer is complete; the connection is closed instead of reused
        await _aclose_quietly(chunks)


async def _aclose_quietly(chunks: Any) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # noqa: BLE001 - closing a body that is done with
            pass


_timeout = getattr(asyncio, "timeout", None)
