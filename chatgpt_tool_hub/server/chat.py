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
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

from ..apps.files import announcement, describe
from ..config import SETTINGS
from ..engine.prompts import detect_language
from ..errors import RunError, UserError
from ..run.external import ExternalTurn, Paused
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
from .client_tools import (
    ROLES,
    ClientTools,
    flatten_exchange,
    parse_calls,
    parse_client_tools,
    split_rounds,
    tool_call_deltas,
    tool_calls_message,
)
from .files import (
    IMAGE_SUFFIXES,
    Attachment,
    ImageBudget,
    ImageError,
    ImagesStopped,
    attachment_of,
    find_files,
    ingest_attachment,
    ingest_image_url,
    signed_path,
)
from .monologue import Monologue

__all__ = ["ChatRequest", "parse_request", "prepare_images", "run_chat", "links_text", "Outcome", "Renderer",
           "ChatRenderer"]

log = logging.getLogger("chatgpt_tool_hub.server")
_IMAGE_PARTS = ("image_url", "input_image", "image")


@dataclass
class ChatRequest:
    model: str
    app_type: str
    question: str
    history: list[dict]
    images: list[tuple[int, Any]]  # (message index, url or Attachment) of every image and file part
    stream: bool = False
    include_usage: bool = False
    llm_options: dict = field(default_factory=dict)
    user: Any = None
    client: ClientTools = field(default_factory=ClientTools)  # the client's own tools, tool choice, answer shape


def _text_of(content: Any, where: str) -> tuple[str, list[Any]]:
    """A message's text, and its images' URLs and its files (:class:`Attachment`: ``file`` and
    ``input_audio`` parts) in order (OpenAI's content parts)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise ApiError(400, f"{where}: content must be a string or a list of content parts")
    texts: list[str] = []
    images: list[Any] = []
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
        elif kind in ("file", "input_audio"):
            images.append(attachment_of(part, where))
        else:
            raise ApiError(400, f"{where}: content parts of type {kind!r} are not supported (text, image_url, file "
                                f"and input_audio are)")
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
    parsed = [_message(message, i) for i, message in enumerate(messages)]
    images = [(i, url) for i, message in enumerate(parsed) for url in message.pop("images")]
    asked = [i for i, message in enumerate(parsed) if message["role"] == "user"]
    if not asked or (asked[-1] != len(parsed) - 1 and parsed[-1]["role"] != "tool"):
        raise ApiError(400, "the last message must be the user's question (role 'user'), or the results of the "
                            "tool calls that followed it (role 'tool')", param="messages")
    at = asked[-1]
    client = parse_client_tools(body)
    client.rounds, client.results = split_rounds(parsed, at)
    history = [flatten_exchange(message) for message in parsed[:at]]
    images = [(i, url) for i, url in images if i <= at]  # what a tool result carries stays with it
    question = parsed[at]["content"]
    if not question.strip():
        if not any(i == at for i, _ in images):
            raise ApiError(400, "the last user message has no text")
        question = "What is in this image?"
    options = sampling_options(body)
    stream_options = body.get("stream_options")
    if not isinstance(stream_options, Mapping):
        stream_options = {}
    if not client.empty and models[model] == "planner":
        raise ApiError(400, f"the model {model!r} plans with the server's tools only: tools, tool_choice and "
                            f"response_format work with the ReAct models", param="tools")
    return ChatRequest(model, models[model], question, history, images, stream=bool(body.get("stream")),
                       include_usage=bool(stream_options.get("include_usage")), llm_options=options,
                       user=body.get("user"), client=client)


def sampling_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's ``temperature`` and ``max_tokens`` (or ``max_completion_tokens``), checked, as LLM options."""
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
    return options


def _message(message: Any, i: int) -> dict:
    """One message of the request: its role, its text, its images' URLs; an assistant's tool calls, the
    call a tool result answers."""
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ApiError(400, f"messages[{i}] must be an object with a role", param="messages")
    role = message["role"]
    if role not in ROLES:
        raise ApiError(400, f"messages[{i}]: the role {role!r} is not one of {', '.join(ROLES)}", param="messages")
    text, urls = _text_of(message.get("content"), f"messages[{i}]")
    entry: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text, "images": urls}
    if role == "assistant" and message.get("tool_calls"):
        entry["tool_calls"] = parse_calls(message["tool_calls"], f"messages[{i}]")
    if role == "tool":
        entry["tool_call_id"] = message.get("tool_call_id")
    return entry


def prepare_images(request: ChatRequest, workspace: Path, *, max_bytes: int, allow_private: bool,
                   max_pixels: int = SETTINGS["serve_max_image_pixels"].default,
                   cancellation: Cancellation | None = None,
                   deadline: float | None = None) -> list[tuple[str, str]]:
    """Copy every image and file of the conversation into the workspace (blocking: run it in a thread).
    Those of earlier messages are named in their message's text; those of the question are returned as
    ``(kind, name)`` (they are announced to the app like files handed to it). A document (a ``file`` part)
    is kept as ``document/<hash><suffix>``, audio (``input_audio``, WAV) is checked like a handed WAV file.

    Each image is decoded in a contained child process; all of them together
    may decode at most ``max_pixels`` pixels (``serve_max_image_pixels``; an
    image already in the workspace costs nothing), else HTTP 400 before the
    image past it is decoded. ``cancellation`` (the client went away) and
    ``deadline`` (a ``time.monotonic()`` value: the request's time) stop the
    work at once, killing a decode in progress: HTTP 499 or 504.
    """
    last = len(request.history)  # the question's index in the original messages
    names: dict[int, list[tuple[str, str]]] = {}
    budget = ImageBudget(max_pixels, cancellation=cancellation, deadline=deadline)
    for index, url in request.images:
        try:
            if isinstance(url, Attachment):
                names.setdefault(index, []).append(ingest_attachment(url, workspace, budget=budget))
                continue
            names.setdefault(index, []).append(("image", ingest_image_url(
                url, workspace, max_bytes=max_bytes, allow_private=allow_private, budget=budget)))
        except ImagesStopped as exc:
            if exc.reason == "deadline":
                raise ApiError(504, str(exc), kind="timeout", code="timeout") from None
            raise ApiError(499, str(exc), code="cancelled") from None
        except ImageError as exc:
            raise ApiError(400, str(exc), code="invalid_image") from None
    for index, message in enumerate(request.history):
        for kind, name in names.get(index, ()):
            message["content"] = f"{message['content']}\n[{kind}: {name}]".strip()
    return names.get(last, [])


def announce(app: Any, names: Sequence[Any], question: str) -> list[dict]:
    """The messages that hand the question's images and files (``(kind, name)``, or an image's name) to the app
    (an image with a caption when it has a captioner)."""
    language = detect_language(question, getattr(app, "prompt_language", "auto"))
    tools = {tool.name: tool for tool in app.tools}
    messages: list[dict] = []
    for item in names:
        kind, name = item if isinstance(item, tuple) else ("image", item)
        messages.extend(announcement(kind, name, describe(kind, name, tools), language))
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


def _files_of(result: Any, workspace: Path, started: float, handed: frozenset[str] = frozenset()) -> list[str]:
    """The files to link: those the answer names, and those the run's tools made (named in observations, new
    since the run started; not the files the request itself brought)."""
    steps = getattr(result, "steps", None) or []
    named = find_files([result.output], workspace)
    made = find_files([s.observation for s in steps], workspace, since=started)
    return named + [n for n in made if n not in named and n not in handed]


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
    external: ExternalTurn | None = None  # the client's own tools (and the pause its results answer)
    keep_pause: Callable[[Paused], None] | None = None  # keeps a run that paused on the client's tools
    handed: frozenset[str] = frozenset()  # the files the request itself brought: never linked back to it

    def paused(self, result: Any) -> Paused | None:
        """The run's pause on the client's tools (kept for its resumption), or None when it answered."""
        paused = getattr(result, "paused", None)
        if getattr(result, "stopped_by", "") != "tool_calls" or not isinstance(paused, Paused):
            return None
        if self.keep_pause is not None:
            self.keep_pause(paused)
        return paused


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


def _external(ctx: RunContext) -> dict[str, Any]:
    return {"external": ctx.external} if ctx.external is not None else {}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Outcome:
    """A finished run as every wire format tells it: the result, the answer with the links to the files it
    named appended, those files, the pause on the client's tools (None: it answered), the monologue."""

    result: Any
    answer: str
    links: str
    files: list[dict]
    paused: Paused | None
    reasoning: str

    @property
    def finish(self) -> str:
        """Chat's ``finish_reason``: ``"tool_calls"`` (paused), ``"length"`` (out of budget) or ``"stop"``."""
        return "tool_calls" if self.paused is not None else _finish_reason(self.result)


class Renderer(Protocol):
    """A wire format of a run's answer: the whole reply as JSON, or server-sent events as the run goes."""

    def reply(self, outcome: Outcome) -> dict:
        """The JSON body of a run that finished (not streamed)."""

    def opening(self) -> bytes:
        """The first events of a stream, before the run starts."""

    def deltas(self, deltas: Sequence[tuple[str, str]]) -> bytes:
        """The events of the monologue's ``(field, text)`` deltas (may be empty bytes: held)."""

    def closing(self, outcome: Outcome) -> bytes:
        """The last events of a stream whose run finished."""

    def failure(self, error: ApiError) -> bytes:
        """The last events of a stream whose run failed or ran out of time."""


class ChatRenderer:
    """OpenAI's chat completions: a ``chat.completion`` object, or ``chat.completion.chunk`` events."""

    def __init__(self, request: ChatRequest):
        self.request = request
        self.cid, self.created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())
        self._events = DeltaEvents(self.cid, self.created, request.model)
        # an answer in a JSON shape is sent once checked (the model's reply may be fenced, or asked again)
        self._hold = request.client.answer_schema is not None

    def _chunk(self, delta: dict, finish: str | None = None) -> dict:
        return {"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.request.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def reply(self, outcome: Outcome) -> dict:
        result = outcome.result
        message = tool_calls_message(outcome.paused) if outcome.paused is not None else {
            "role": "assistant", "content": outcome.answer}
        if outcome.reasoning:
            message["reasoning_content"] = outcome.reasoning
        return {"id": self.cid, "object": "chat.completion", "created": self.created, "model": self.request.model,
                "choices": [{"index": 0, "message": message, "finish_reason": outcome.finish, "logprobs": None}],
                "usage": _usage(result),
                "tool_hub": {"stopped_by": result.stopped_by, "steps": len(getattr(result, "steps", []) or []),
                             "files": outcome.files}}

    def opening(self) -> bytes:
        return sse(self._chunk({"role": "assistant", "content": ""}))

    def deltas(self, deltas: Sequence[tuple[str, str]]) -> bytes:
        if self._hold:
            deltas = [(where, text) for where, text in deltas if where != "content"]
        return self._events.encode(deltas)

    def closing(self, outcome: Outcome) -> bytes:
        events = []
        if outcome.paused is not None:
            events += [self._chunk(delta) for delta in tool_call_deltas(outcome.paused)]
        elif self._hold:
            events.append(self._chunk({"content": outcome.answer}))
        elif outcome.links:
            events.append(self._chunk({"content": outcome.links}))
        final = self._chunk({}, outcome.finish)
        final["tool_hub"] = {"stopped_by": outcome.result.stopped_by, "files": outcome.files}
        events.append(final)
        if self.request.include_usage:
            events.append({"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
                           "model": self.request.model, "choices": [], "usage": _usage(outcome.result)})
        return b"".join(sse(event) for event in events) + sse("[DONE]")

    def failure(self, error: ApiError) -> bytes:
        return sse(error.payload()) + sse("[DONE]")


def _outcome(ctx: RunContext, result: Any, mono: Monologue, started: float) -> Outcome:
    names = _files_of(result, ctx.workspace, started, ctx.handed)
    links, files = links_text(names, ctx.base_url, ctx.secret, ctx.folder, ctx.link_ttl_s)
    if ctx.request.client.answer_schema is not None:
        links = ""  # the answer is JSON in the asked shape: the files are listed under tool_hub.files only
    paused = ctx.paused(result)
    return Outcome(result, result.output + links, links, files, paused, mono.reasoning_text)


async def run_chat(ctx: RunContext, send: Callable[[dict], Awaitable[None]],
                   renderer: Renderer | None = None) -> None:
    """Run the question and send the whole HTTP response (JSON, or server-sent events) in the wire format
    of ``renderer`` (default: chat completions)."""
    renderer = renderer if renderer is not None else ChatRenderer(ctx.request)
    started = time.time()
    mono = Monologue(_mode(ctx.app))
    request = ctx.request

    if not request.stream:
        async def collect() -> Any:
            run = ctx.app.astream(request.question, ctx.history, session_id=ctx.session_id,
                                  llm_options=request.llm_options, **_external(ctx))
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
        return await send_json(send, 200, renderer.reply(_outcome(ctx, result, mono, started)))

    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]})

    body = StreamBody(send)  # what the run makes in one go goes out in one write
    try:
        await _stream_events(ctx, body, mono, renderer, started)
    finally:
        body.abort()  # nothing is left queued when the run was cancelled


async def _stream_events(ctx: RunContext, body: StreamBody, mono: Monologue, renderer: Renderer,
                         started: float) -> None:
    request = ctx.request
    await body.write(renderer.opening())

    async def produce() -> Any:
        run = ctx.app.astream(request.question, ctx.history, session_id=ctx.session_id,
                              llm_options=request.llm_options, **_external(ctx))
        try:
            async for event in run:
                deltas = mono.feed(event)
                if deltas:
                    events = renderer.deltas(deltas)
                    if events:
                        await body.write(events)
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
        await body.write(renderer.failure(error))
    else:
        await body.write(renderer.closing(_outcome(ctx, result, mono, started)))
    await body.close()
