"""``POST /v1/chat/completions``: an OpenAI chat request in, a run of the user's app, OpenAI's answer out.

The request's ``messages`` are the conversation (the server keeps none): the
last user message is the question, the others the history. ``model`` picks the
app (``serve_models``), ``temperature`` and ``max_tokens`` (or
``max_completion_tokens``) set the LLM's sampling for the run. The answer comes
as ``content``, the inner monologue as ``reasoning_content``, the run's token
usage as ``usage``; files the run named come back as links, appended to the
answer and listed under ``tool_hub.files``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from ..apps.files import announcement, describe
from ..config import SETTINGS
from ..engine.prompts import detect_language
from ..errors import RunError, UserError
from ..runtime.contained import Cancellation
from .asgi import (
    ApiError,
    StreamBody,
    run_error,
    send_json,
    sse,
    timeout_error,
    with_deadline,
)
from .files import IMAGE_SUFFIXES, ImageBudget, ImageError, ImagesStopped, find_files, ingest_image_url, signed_path
from .monologue import Monologue

__all__ = ["ChatRequest", "parse_request", "prepare_images", "run_chat", "links_text"]

log = logging.getLogger("chatgpt_tool_hub.server")
_IMAGE_PARTS = ("image_url", "input_image", "image")


@dataclass
class ChatRequest:
    model: str
    app_type: str
    question: str
    history: list[dict]
    images: list[tuple[int, str]]  # (message index, url) of every image part
    stream: bool = False
    include_usage: bool = False
    llm_options: dict = field(default_factory=dict)
    user: Any = None


def _text_of(content: Any, where: str) -> tuple[str, list[str]]:
    """A message's text and the URLs of its images (OpenAI's content parts)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise ApiError(400, f"{where}: content must be a string or a list of content parts")
    texts, images = [], []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise ApiError(400, f"{where}: a content part must be an object")
        kind = part.get("type")
        if kind == "text" or (kind is None and isinstance(part.get("text"), str)):
            texts.append(str(part.get("text") or ""))
        elif kind in _IMAGE_PARTS:
            image = part.get("image_url", part.get("image"))
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str) or not url:
                raise ApiError(400, f"{where}: an image_url part needs image_url.url")
            images.append(url)
        else:
            raise ApiError(400, f"{where}: content parts of type {kind!r} are not supported (text and image_url are)")
    return "\n".join(t for t in texts if t), images


def parse_request(body: Any, models: Mapping[str, str]) -> ChatRequest:
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in models:
        raise ApiError(404, f"the model {model!r} does not exist; this server has: {', '.join(models)} "
                            f"(serve_models)", code="model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects")
    history: list[dict] = []
    images: list[tuple[int, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a role")
        text, urls = _text_of(message.get("content"), f"messages[{i}]")
        images.extend((i, url) for url in urls)
        history.append({"role": message["role"], "content": text})
    if history[-1]["role"] != "user":
        raise ApiError(400, "the last message must be the user's question (role 'user')")
    question = history.pop()["content"]
    if not question.strip():
        if not any(i == len(messages) - 1 for i, _ in images):
            raise ApiError(400, "the last user message has no text")
        question = "What is in this image?"
    options: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ApiError(400, "temperature must be a number from 0 to 2")
        options["temperature"] = float(temperature)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ApiError(400, "max_tokens must be a whole number >= 1")
        options["max_tokens"] = max_tokens
    stream_options = body.get("stream_options")
    if not isinstance(stream_options, Mapping):
        stream_options = {}
    return ChatRequest(model, models[model], question, history, images, stream=bool(body.get("stream")),
                       include_usage=bool(stream_options.get("include_usage")), llm_options=options,
                       user=body.get("user"))


def prepare_images(request: ChatRequest, workspace: Path, *, max_bytes: int, allow_private: bool,
                   max_pixels: int = SETTINGS["serve_max_image_pixels"].default,
                   cancellation: Cancellation | None = None, deadline: float | None = None) -> list[str]:
    """Copy every image of the conversation into the workspace (blocking: run it in a thread). Images of
    earlier messages are named in their message's text; those of the question are returned (they are
    announced to the app like files handed to it).

    Each image is decoded in a contained child process; all of them together
    may decode at most ``max_pixels`` pixels (``serve_max_image_pixels``; an
    image already in the workspace costs nothing), else HTTP 400 before the
    image past it is decoded. ``cancellation`` (the client went away) and
    ``deadline`` (a ``time.monotonic()`` value: the request's time) stop the
    work at once, killing a decode in progress: HTTP 499 or 504.
    """
    last = len(request.history)  # the question's index in the original messages
    names: dict[int, list[str]] = {}
    budget = ImageBudget(max_pixels, cancellation=cancellation, deadline=deadline)
    for index, url in request.images:
        try:
            names.setdefault(index, []).append(ingest_image_url(url, workspace, max_bytes=max_bytes,
                                                                allow_private=allow_private, budget=budget))
        except ImagesStopped as exc:
            if exc.reason == "deadline":
                raise ApiError(504, str(exc), kind="timeout", code="timeout") from None
            raise ApiError(499, str(exc), code="cancelled") from None
        except ImageError as exc:
            raise ApiError(400, str(exc), code="invalid_image") from None
    for index, message in enumerate(request.history):
        for name in names.get(index, ()):
            message["content"] = f"{message['content']}\n[image: {name}]".strip()
    return names.get(last, [])


def announce(app: Any, names: Sequence[str], question: str) -> list[dict]:
    """The messages that hand the question's images to the app (with a caption when it has a captioner)."""
    language = detect_language(question, getattr(app, "prompt_language", "auto"))
    tools = {tool.name: tool for tool in app.tools}
    messages: list[dict] = []
    for name in names:
        messages.extend(announcement("image", name, describe("image", name, tools), language))
    return messages


def _mode(app: Any) -> str:
    if getattr(app, "app_type", "") == "planner":
        return "planner"
    settings = getattr(app, "settings", None)
    return "native" if str(getattr(settings, "tool_calling", "text")).lower() == "native" else "react"


def links_text(names: Sequence[str], base_url: str, secret: bytes, folder: str,
               ttl_s: float = 0.0) -> tuple[str, list[dict]]:
    """Markdown links to ``names`` (images shown inline; valid for ``ttl_s`` seconds, 0: for ever) and their
    list for ``tool_hub.files``."""
    lines, files = [], []
    for name in names:
        url = base_url.rstrip("/") + signed_path(secret, folder, name, ttl_s)
        image = Path(name).suffix.lower() in IMAGE_SUFFIXES
        lines.append(f"![{name}]({url})" if image else f"[{name}]({url})")
        files.append({"name": name, "url": url})
    return ("\n\n" + "\n".join(lines)) if lines else "", files


def _usage(result: Any) -> dict:
    total = result.usage.total
    return {"prompt_tokens": total.prompt_tokens, "completion_tokens": total.completion_tokens,
            "total_tokens": total.total_tokens}


def _finish_reason(result: Any) -> str:
    return "length" if getattr(result, "stopped_by", "") == "budget" else "stop"


def _files_of(result: Any, workspace: Path, started: float) -> list[str]:
    steps = getattr(result, "steps", None) or []
    named = find_files([result.output], workspace)
    made = find_files([s.observation for s in steps], workspace, since=started)
    return named + [n for n in made if n not in named]


@dataclass
class RunContext:
    app: Any
    request: ChatRequest
    history: list[dict]
    session_id: str
    workspace: Path
    folder: str
    base_url: str
    secret: bytes
    timeout_s: float
    link_ttl_s: float = 0.0


class DeltaEvents:
    """The server-sent events of one streamed answer's deltas: the chunk's fixed part is encoded once, each
    delta adds its field and text (the bytes ``sse(chunk)`` would make, at a fraction of the work)."""

    __slots__ = ("_head",)
    _TAIL = b',"finish_reason":null}]}\n\n'

    def __init__(self, cid: str, created: int, model: str):
        self._head = ('data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,"choices":'
                      '[{"index":0,"delta":{' % (_dumps(cid), created, _dumps(model))).encode()

    def encode(self, deltas: Sequence[tuple[str, str]]) -> bytes:
        """One event per ``(field, text)`` delta (``field``: ``"reasoning"`` or ``"content"``), joined."""
        return b"".join(self._head + (b'"reasoning_content":' if where == "reasoning" else b'"content":')
                        + _dumps(text).encode() + b"}" + self._TAIL for where, text in deltas)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def run_chat(ctx: RunContext, send: Callable[[dict], Awaitable[None]]) -> None:
    """Run the question and send the whole HTTP response (JSON, or server-sent events)."""
    cid, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())
    started = time.time()
    mono = Monologue(_mode(ctx.app))
    request = ctx.request

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": request.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if not request.stream:
        async def collect() -> Any:
            run = ctx.app.astream(request.question, ctx.history, session_id=ctx.session_id,
                                  llm_options=request.llm_options)
            try:
                async for event in run:
                    mono.feed(event)
            finally:
                await run.aclose()
            return run.result

        try:
            timed_out, result = await with_deadline(collect(), ctx.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the client gets it as an error, never a traceback
            log.warning("a run failed: %s", exc, exc_info=not isinstance(exc, (RunError, UserError)))
            return await send_json(send, run_error(exc).status, run_error(exc).payload())
        if timed_out:
            error = timeout_error(ctx.timeout_s)
            return await send_json(send, error.status, error.payload())
        names = _files_of(result, ctx.workspace, started)
        extra, files = links_text(names, ctx.base_url, ctx.secret, ctx.folder, ctx.link_ttl_s)
        message = {"role": "assistant", "content": result.output + extra}
        if mono.reasoning_text:
            message["reasoning_content"] = mono.reasoning_text
        reply = {"id": cid, "object": "chat.completion", "created": created, "model": request.model,
                 "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(result),
                              "logprobs": None}],
                 "usage": _usage(result),
                 "tool_hub": {"stopped_by": result.stopped_by, "steps": len(getattr(result, "steps", []) or []),
                              "files": files}}
        return await send_json(send, 200, reply)

    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]})

    body = StreamBody(send)  # what the run makes in one go goes out in one write
    try:
        await _stream_events(ctx, body, mono, cid, created, chunk, started)
    finally:
        body.abort()  # nothing is left queued when the run was cancelled


async def _stream_events(ctx: RunContext, body: StreamBody, mono: Monologue, cid: str, created: int,
                         chunk: Callable[..., dict], started: float) -> None:
    request = ctx.request

    async def write(payload: Any) -> None:
        await body.write(sse(payload))

    await write(chunk({"role": "assistant", "content": ""}))
    events = DeltaEvents(cid, created, request.model)

    async def produce() -> Any:
        run = ctx.app.astream(request.question, ctx.history, session_id=ctx.session_id,
                              llm_options=request.llm_options)
        try:
            async for event in run:
                deltas = mono.feed(event)
                if deltas:
                    await body.write(events.encode(deltas))
        finally:
            await run.aclose()
        return run.result

    try:
        timed_out, result = await with_deadline(produce(), ctx.timeout_s)
        error = timeout_error(ctx.timeout_s) if timed_out else None
    except Exception as exc:  # noqa: BLE001 - sent as an error event, never a traceback
        log.warning("a run failed: %s", exc, exc_info=not isinstance(exc, (RunError, UserError)))
        result, error = None, run_error(exc)
    if error is not None:
        await write(error.payload())
    else:
        names = _files_of(result, ctx.workspace, started)
        extra, files = links_text(names, ctx.base_url, ctx.secret, ctx.folder, ctx.link_ttl_s)
        if extra:
            await write(chunk({"content": extra}))
        final = chunk({}, _finish_reason(result))
        final["tool_hub"] = {"stopped_by": result.stopped_by, "files": files}
        await write(final)
        if request.include_usage:
            await write({"id": cid, "object": "chat.completion.chunk", "created": created, "model": request.model,
                         "choices": [], "usage": _usage(result)})
    await write("[DONE]")
    await body.close()


