"""ASGI pieces of the server: reading a bounded body, OpenAI-style errors, the run slots, and the
response that runs a question while it watches the client (a client that goes away cancels the run)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from ..errors import LLMError, RunError, UserError

__all__ = ["ApiError", "read_json", "is_json_type", "error_response", "Slots", "RunResponse", "StreamBody", "sse"]

log = logging.getLogger("chatgpt_tool_hub.server")
Send = Callable[[dict], Awaitable[None]]


class ApiError(Exception):
    """An error the client gets as OpenAI's ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.headers = status, message, kind, code, headers or {}
        self.param = param  # the request parameter at fault, when one is

    def payload(self) -> dict:
        """OpenAI's error body. Its message is :func:`public_text` of this one: no address of a server behind
        this one, no name of a setting (the operator's business: the full text goes to the log)."""
        message = public_text(self.message)
        if message != self.message:
            log.info("HTTP %d: %s", self.status, self.message)
        return {"error": {"message": message, "type": self.kind, "param": self.param, "code": self.code}}


_ADDRESS = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>()\[\]]+", re.IGNORECASE)
_PARENTHESIS = re.compile(r"\s*\(([^()]*)\)")
_SETTINGS_PHRASE = "the server's settings"


@functools.lru_cache(maxsize=1)
def _setting_names() -> re.Pattern:
    """The settings' names as they are written in messages: ``serve_api_keys``, ``SERVE_API_KEYS``, with a
    value (``serve_jarvis_keyless=true``) and joined by `` / `` (``llm_api_base_url / LLM_API_BASE_URL``)."""
    from ..config import SETTINGS

    names = sorted({form for name in SETTINGS if "_" in name for form in (name, name.upper())}, key=len, reverse=True)
    one = r"(?:%s)(?:=[^\s,;)]*)?" % "|".join(map(re.escape, names))
    return re.compile(r"\b%s(?:\s*/\s*%s)*\b" % (one, one))


def public_text(text: str) -> str:
    """``text`` as a client may read it: addresses of servers behind this one hidden, a parenthesis that names
    a setting dropped, other names of settings said as "the server's settings"."""
    text = _ADDRESS.sub("(address hidden)", text)
    names = _setting_names()
    text = _PARENTHESIS.sub(lambda m: "" if names.search(m.group(1)) else m.group(0), text)
    return names.sub(_SETTINGS_PHRASE, text)


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.payload(), status_code=error.status, headers=error.headers)


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; HTTP 415 unless it is declared ``application/json`` (a cross-site form or a
    ``text/plain`` beacon, which browsers send without asking, is never read), 413 past ``limit`` bytes
    (announced or sent), 400 when it is not JSON."""
    if not is_json_type(request.headers.get("content-type", "")):
        raise ApiError(415, "the request body must be JSON: send Content-Type: application/json",
                       code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is {int(declared)} bytes; this server takes at most {limit} "
                            f"(serve_max_body_bytes)", code="request_too_large")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise ApiError(413, f"the request body is larger than {limit} bytes (serve_max_body_bytes)",
                           code="request_too_large")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    except RecursionError:
        raise ApiError(400, "the request body's JSON is nested too deeply") from None


def is_json_type(content_type: str) -> bool:
    """``application/json`` or ``application/<something>+json``, with any parameters."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


class BodyLimit:
    """ASGI middleware: a request body past ``limit`` bytes gets HTTP 413 before the app sees it (the body is
    read first, announced or chunked); paths starting with one of ``skip`` read their bodies themselves."""

    def __init__(self, app: Any, limit: int, skip: tuple[str, ...] = ()):
        self.app, self.limit, self.skip = app, limit, tuple(skip)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS") or \
                str(scope.get("path", "")).startswith(self.skip):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.strip().isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                return await self._refuse(send)
            if not message.get("more_body", False):
                break
        replay = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replayed() -> dict:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send: Callable) -> None:
        error = ApiError(413, f"the request body is larger than {self.limit} bytes (serve_max_body_bytes)",
                         code="request_too_large")
        await send_json(send, error.status, error.payload())


class SecurityHeaders:
    """ASGI middleware: ``headers`` added to every response whose path does not start with one of ``skip``
    (kept when the app set them itself)."""

    def __init__(self, app: Any, headers: dict[str, str], skip: tuple[str, ...] = ()):
        self.app, self.skip = app, tuple(skip)
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or str(scope.get("path", "")).startswith(self.skip):
            return await self.app(scope, receive, send)

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers") or []}
                extra = [(k, v) for k, v in self.headers if k not in present]
                message = {**message, "headers": [*(message.get("headers") or []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


class Slots:
    """At most ``limit`` runs at once; ``take()`` is False past it (the client gets HTTP 429)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.used = max(0, self.used - 1)


def sse(payload: Any) -> bytes:
    """One server-sent event: ``data: <json>`` (or ``data: [DONE]``)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class StreamBody:
    """The body of a streamed response, in as few sends as the stream allows: ``write`` queues bytes, and
    what is queued goes out in one send as soon as the event loop gets to it, that is once the writer waits
    (for the next tokens). So what a run makes in one go (the tokens of one network read) is one write,
    and nothing waits longer than that. Past ``limit`` queued bytes ``write`` waits until the client took
    them. ``close`` sends the rest with the end of the body; ``abort`` drops what is queued."""

    def __init__(self, send: Send, limit: int = 1 << 16):
        self._send, self._limit = send, limit
        self._parts: list[bytes] = []
        self._size = 0
        self._task: asyncio.Future | None = None
        self._sending = False

    async def write(self, data: bytes) -> None:
        task = self._task
        if task is not None and task.done():
            self._task = None
            if not task.cancelled():
                task.result()  # a send that failed raises here
        self._parts.append(data)
        self._size += len(data)
        if self._task is None:
            self._task = asyncio.ensure_future(self._flush())
        if self._size > self._limit:  # bytes not sent yet, the ones being sent included
            await asyncio.shield(self._task)  # a writer cancelled meanwhile leaves the send under way alone

    async def _flush(self) -> None:
        while self._parts:
            body, self._parts = b"".join(self._parts), []
            self._sending = True
            try:
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
            finally:
                self._sending = False
            self._size -= len(body)  # counted until the client took it

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            if self._sending or task.done():
                await task  # a send under way finishes first (and one that failed raises)
            else:
                task.cancel()  # not started: what it would send goes with the end
        body, self._parts, self._size = b"".join(self._parts), [], 0
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    def abort(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task, self._parts, self._size = None, [], 0


async def _disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


class RunResponse(Response):
    """Runs ``job(send)`` (which sends the whole response) while it listens for the client going away:
    then the job is cancelled, so the run is cancelled and its tools' processes killed. ``done()`` runs
    at the end in every case (the run's slot is given back)."""

    def __init__(self, job: Callable[[Send], Awaitable[None]], done: Callable[[], None]):
        super().__init__()
        self.job = job
        self.done = done

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        task = asyncio.ensure_future(self.job(send))
        watcher = asyncio.ensure_future(_disconnected(receive))
        try:
            finished, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if task in finished:
                task.result()
                return
            log.info("the client went away; the run is cancelled")
            await _cancel(task)
        except asyncio.CancelledError:  # the server is stopping this request
            await _cancel(task)
            raise
        finally:
            watcher.cancel()
            self.done()


async def _cancel(task: asyncio.Future) -> None:
    """Cancel ``task`` and wait until it has ended (its run stopped what it started)."""
    task.cancel()
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            continue
    if not task.cancelled() and task.exception() is not None:
        log.debug("a cancelled run ended with an error", exc_info=task.exception())


async def with_deadline(work: Awaitable[Any], seconds: float) -> tuple[bool, Any]:
    """``(timed_out, result)``; past ``seconds`` the work is cancelled (its run stops what it started)."""
    if seconds <= 0:
        return False, await work
    try:
        return False, await asyncio.wait_for(work, seconds)
    except asyncio.TimeoutError:
        return True, None


def timeout_error(seconds: float) -> ApiError:
    return ApiError(504, f"the run took longer than {seconds:g} s and was stopped (serve_request_timeout_s)",
                    kind="timeout", code="timeout")


def run_error(exc: Exception) -> ApiError:
    """The client's error for a run that raised: the LLM failed or its output was unusable (a plan invalid
    twice): 502; the request's fault: 400; anything else: 500. Never a traceback."""
    if isinstance(exc, LLMError):  # what failed, without the hint for the operator after " -- " (it is logged)
        return ApiError(502, f"the LLM behind this server failed: {str(exc).split(' -- ')[0]}", kind="server_error",
                        code="llm_error")
    if isinstance(exc, UserError):
        return ApiError(400, str(exc))
    if isinstance(exc, RunError):
        return ApiError(502, f"the LLM's output could not be used: {exc}", kind="server_error",
                        code="unusable_llm_output")
    return ApiError(500, f"the run failed: {type(exc).__name__}: {exc}", kind="server_error")


async def send_json(send: Callable[[dict], Awaitable[None]], status: int, payload: Any) -> None:
    body = json.dumps(payload, ensure_ascii=False, default=str).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
