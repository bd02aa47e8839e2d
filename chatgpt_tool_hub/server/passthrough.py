"""Chat requests the LLM answers alone: the direct model, and a chat UI's own task prompts.

``serve_direct_model`` (``tool-hub-direct``) is a model whose requests go to
the server's LLM as they are: the messages (system messages and content parts
included), ``temperature``, ``max_tokens`` / ``max_completion_tokens``,
``stop``, streamed or not; the answer comes back in OpenAI's format with the
LLM's token usage. A chat UI's "task model" points at it. With
``serve_auxiliary_passthrough`` (on by default) a request to any model that
is a chat UI's task prompt (:func:`~chatgpt_tool_hub.server.auxiliary.task_kind`)
is answered the same way. Either takes a run slot (``serve_max_concurrent_runs``)
and the run's time limit (``serve_request_timeout_s``), and a client that goes
away cancels the LLM call.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from ..errors import RunError, UserError
from ..llm.base import Usage, acall_llm, astream_llm, with_options
from .asgi import ApiError, StreamBody, run_error, send_json, sse, timeout_error, with_deadline
from .auxiliary import task_kind
from .chat import sampling_options

__all__ = ["DirectRequest", "direct_request", "parse_direct", "direct_job"]

log = logging.getLogger("chatgpt_tool_hub.server")
Send = Callable[[dict], Awaitable[None]]
_KEPT = ("role", "content", "name", "tool_calls", "tool_call_id")  # what of a message goes to the LLM
_FINISH = frozenset({"stop", "length", "content_filter", "tool_calls"})


@dataclass
class DirectRequest:
    model: str  # as the client named it: the answer names it too
    kind: str  # "direct" (the direct model) or the task's kind ("title", "tags" ...)
    messages: list[dict]
    stream: bool = False
    include_usage: bool = False
    options: dict = field(default_factory=dict)  # temperature, max_tokens
    stop: list[str] | None = None


def direct_request(body: Any, settings: Any) -> DirectRequest | None:
    """The request as one the LLM answers alone, or None when it is for the tools: it names the direct model
    (``settings.direct_model``), or it names a model of ``settings.models`` and is a chat UI's task prompt
    (with ``settings.auxiliary_passthrough``)."""
    if not isinstance(body, Mapping):
        return None
    model = body.get("model")
    if settings.direct_model and model == settings.direct_model:
        return parse_direct(body, "direct")
    if settings.auxiliary_passthrough and isinstance(model, str) and model in settings.models:
        kind = task_kind(body)
        if kind is not None:
            return parse_direct(body, kind)
    return None


def _message(message: Any, i: int) -> dict:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ApiError(400, f"messages[{i}] must be an object with a role")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise ApiError(400, f"messages[{i}]: content must be a string or a list of content parts")
    return {key: message[key] for key in _KEPT if key in message}


def _stop(value: Any) -> list[str] | None:
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise ApiError(400, "stop must be a string or a list of at most 4 strings")
    return [s for s in stops if s] or None


def parse_direct(body: Mapping[str, Any], kind: str) -> DirectRequest:
    """The parts of an OpenAI chat request the LLM gets (HTTP 400 for a malformed one)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects")
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, Mapping) and bool(stream_options.get("include_usage"))
    return DirectRequest(str(body.get("model")), kind, [_message(m, i) for i, m in enumerate(messages)],
                         stream=bool(body.get("stream")), include_usage=include_usage, options=sampling_options(body),
                         stop=_stop(body.get("stop")))


def _usage(usage: Usage | None) -> dict:
    usage = usage or Usage()
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def _finish(reason: str | None) -> str:
    return reason if reason in _FINISH else "stop"


def direct_job(state: Any, request: DirectRequest, llm: Any) -> tuple[Callable[[Send], Awaitable[None]],
                                                                     Callable[[], None]]:
    """The job of a request the LLM answers alone, and its ``done`` (the run slot is given back), for
    :class:`~chatgpt_tool_hub.server.asgi.RunResponse`. ``state``: the server's
    :class:`~chatgpt_tool_hub.server.app.ServerState` (its slots, executor and time limit)."""
    sampled = with_options(llm, **request.options)
    limit = float(state.settings.request_timeout_s)
    log.info("a %s request goes to the LLM without tools", request.kind)

    async def job(send: Send) -> None:
        if request.stream:
            await _streamed(send, request, sampled, state.executor, limit)
        else:
            await _whole(send, request, sampled, state.executor, limit)

    return job, state.slots.give


def _failed(exc: Exception) -> ApiError:
    log.warning("a direct LLM call failed: %s", exc, exc_info=not isinstance(exc, (RunError, UserError)))
    return run_error(exc)


async def _whole(send: Send, request: DirectRequest, llm: Any, executor: Any, limit: float) -> None:
    try:
        timed_out, response = await with_deadline(acall_llm(llm, request.messages, request.stop,
                                                            executor=executor), limit)
    except Exception as exc:  # noqa: BLE001 - the client gets it as an error, never a traceback
        error = _failed(exc)
        return await send_json(send, error.status, error.payload())
    if timed_out:
        error = timeout_error(limit)
        return await send_json(send, error.status, error.payload())
    reply = {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
             "model": request.model,
             "choices": [{"index": 0, "message": {"role": "assistant", "content": response.text},
                          "finish_reason": _finish(response.finish_reason), "logprobs": None}],
             "usage": _usage(response.usage)}
    await send_json(send, 200, reply)


async def _streamed(send: Send, request: DirectRequest, llm: Any, executor: Any, limit: float) -> None:
    cid, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": request.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]})
    body = StreamBody(send)
    ended: dict[str, Any] = {"finish": None, "usage": None}

    async def relay() -> None:
        await body.write(sse(chunk({"role": "assistant", "content": ""})))
        chunks = astream_llm(llm, request.messages, request.stop, executor=executor)
        try:
            async for piece in chunks:
                if piece.text:
                    await body.write(sse(chunk({"content": piece.text})))
                ended["finish"] = piece.finish_reason or ended["finish"]
                ended["usage"] = piece.usage or ended["usage"]
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    try:
        try:
            timed_out, _ = await with_deadline(relay(), limit)
            error = timeout_error(limit) if timed_out else None
        except Exception as exc:  # noqa: BLE001 - sent as an error event, never a traceback
            error = _failed(exc)
        if error is not None:
            await body.write(sse(error.payload()))
        else:
            await body.write(sse(chunk({}, _finish(ended["finish"]))))
            if request.include_usage:
                await body.write(sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                                      "model": request.model, "choices": [], "usage": _usage(ended["usage"])}))
        await body.write(sse("[DONE]"))
        await body.close()
    finally:
        body.abort()  # nothing is left queued when the request was cancelled
