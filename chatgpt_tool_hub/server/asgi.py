"""ASGI pieces of the server: reading a bounded body, OpenAI-style errors, the run slots, and the
response that runs a question while it watches the client (a client that goes away cancels the run)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["ApiError", "read_json", "error_response", "Slots", "RunResponse", "sse"]

log = logging.getLogger("chatgpt_tool_hub.server")
Send = Callable[[dict], Awaitable[None]]


class ApiError(Exception):
    """An error the client gets as OpenAI's ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.headers = status, message, kind, code, headers or {}

    def payload(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.code}}


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.payload(), status_code=error.status, headers=error.headers)


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; HTTP 413 past ``limit`` bytes (announced or sent), 400 when it is not JSON."""
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

    async def __call__(self, scope: dict, receive: Any, send: Send) -> None:
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
