"""JARVIS's (HuggingGPT's) server API over the planner app: ``POST /hugginggpt``, ``/tasks``, ``/results``.

The body is ``{"messages": [{"role", "content"}, ...]}`` (the last message is
the request; ``model``, ``api_key``, ``api_type`` and ``api_endpoint`` are
ignored: the server's LLM answers, and a key in the body is never a key of this
server), as JARVIS's ``awesome_chat.py --mode server`` takes it:

* ``/hugginggpt``: the whole run, ``{"message": "<answer>"}``; the media files
  the run made are named as JARVIS names them (``/images/...``, ``/audios/...``,
  ``/videos/...``: see :mod:`.jarvis_files`), and those the answer does not name
  are listed after it;
* ``/tasks``: stage 1, the plan as a JSON list of ``{"task", "id", "dep", "args"}``
  with the task names and arguments as the LLM wrote them (``openpose-control``,
  ``/examples/d.jpg``), ``{"message": ...}`` when the request needs no task;
* ``/results``: stages 1-3, ``{"<id>": {"task": ..., "inference result": ...,
  "choose model result": {"id", "reason"}}}``, without the response stage; the
  inference result has JARVIS's keys (:func:`inference_result`).

With ``serve_jarvis_keyless`` a request without a key of this server is the
one user ``jarvis`` (JARVIS's web client sends none); CORS for the client's
origin (``serve_jarvis_origins``) is answered by the boundary
(:mod:`.guard`).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from fastapi import Request

from ..errors import RunError, UserError
from ..planner.catalog import llm_tasks
from ..planner.events import PlanEvent, SelectionEvent, TaskEndEvent, TaskStartEvent
from .asgi import (
    ApiError,
    RunResponse,
    read_json,
    run_error,
    send_json,
    timeout_error,
    with_deadline,
)
from .jarvis_files import Links, add_media_routes, media_kind
from .users import User

__all__ = ["add_jarvis_routes", "inference_result", "as_written", "JARVIS_USER"]

log = logging.getLogger("chatgpt_tool_hub.server")
JARVIS_USER = User("jarvis", "jarvis")  # every keyless request of JARVIS's routes (serve_jarvis_keyless)


def _conversation(body: Any) -> tuple[str, list[dict]]:
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, 'the body must be {"messages": [{"role": "user", "content": "..."}]}')
    last = messages[-1]
    if last.get("role") != "user" or not isinstance(last.get("content"), str) or not last["content"].strip():
        raise ApiError(400, "the last message must be the user's request (role 'user', text content)")
    history = [{"role": m.get("role"), "content": m.get("content")} for m in messages[:-1]]
    return last["content"], history


def _user_of(state: Any, authorization: str | None, user: Any = None) -> User:
    """The request's user: its key's, else (``serve_jarvis_keyless``) :data:`JARVIS_USER`; else a 401 that
    says which setting lets a keyless client in."""
    try:
        return state.user_of(authorization, user)
    except ApiError as exc:
        if exc.status != 401:
            raise
        if state.settings.jarvis_keyless:
            return JARVIS_USER
        raise ApiError(401, f"{exc.message}. JARVIS's web client sends no key: the operator can let it in on a "
                            f"trusted LAN (serve_jarvis_keyless=true, with its origin in serve_jarvis_origins)",
                       code=exc.code, headers=exc.headers) from None


def add_jarvis_routes(app: Any, state: Any) -> None:
    async def run(request: Request, stage: str):
        authorization = request.headers.get("authorization")
        _user_of(state, authorization)
        body = await read_json(request, state.settings.max_body_bytes)
        question, history = _conversation(body)
        user = _user_of(state, authorization, body.get("user"))
        state.take_slot()
        try:
            planner = await state.blocking(state.apps.acquire, user, "planner")
        except BaseException:
            state.slots.give()
            raise
        settings = state.settings
        links = Links(state.apps.workspace(user), user.folder, settings.link_secret, settings.link_ttl_s)

        def done() -> None:
            state.apps.release(user, "planner")
            state.slots.give()

        async def job(send: Any) -> None:
            seconds = settings.request_timeout_s
            try:
                timed_out, payload = await with_deadline(
                    _stage(planner, question, history, f"user-{user.folder}", stage, links), seconds)
            except Exception as exc:  # noqa: BLE001 - the client gets it as an error, never a traceback
                log.warning("a planner run failed: %s", exc, exc_info=not isinstance(exc, (RunError, UserError)))
                error = run_error(exc)
                return await send_json(send, error.status, error.payload())
            if timed_out:
                error = timeout_error(seconds)
                return await send_json(send, error.status, error.payload())
            await send_json(send, 200, payload)

        return RunResponse(job, done)

    @app.post("/hugginggpt")
    async def hugginggpt(request: Request):
        return await run(request, "response")

    @app.post("/tasks")
    async def tasks(request: Request):
        return await run(request, "tasks")

    @app.post("/results")
    async def results(request: Request):
        return await run(request, "results")

    add_media_routes(app, state)


def as_written(tasks: Sequence[dict], written: Sequence[Any]) -> list[dict]:
    """The validated plan with the task names and arguments as the LLM wrote them (JARVIS answers /tasks
    with its plan as written): ``openpose-control`` stays ``openpose-control`` (not the tool it runs),
    ``/examples/d.jpg`` stays ``/examples/d.jpg`` (not the workspace copy made of it)."""
    shown = []
    for position, task in enumerate(tasks):
        raw = written[position] if position < len(written) and isinstance(written[position], dict) else {}
        name = raw.get("task") if isinstance(raw.get("task"), str) else task["task"]
        args = raw.get("args") if isinstance(raw.get("args"), dict) else task.get("args", {})
        shown.append({"task": name, "id": task["id"], "dep": list(task.get("dep") or [-1]), "args": args})
    return shown


def inference_result(task: str, status: str, output: str, links: Links, since: float | None = None) -> Any:
    """A task's result with the keys of JARVIS's experts: ``{"generated image": "/images/..."}`` (and
    ``"generated audio"``, ``"generated video"``) for the media files it made, ``{"response": ...}`` for a
    task the app's own LLM answered, ``{"generated text": ...}`` for any other text, and
    ``{"error": {"message": ...}}`` for a task that did not succeed."""
    if status != "ok":
        return {"error": {"message": links.rewrite(output or status)}}
    made: dict[str, str] = {}
    for name in links.files([output], since=since):
        path = links.path(name)
        kind = media_kind(name)
        if path is not None and kind is not None:
            made.setdefault(f"generated {kind}", path)
    if made:
        return made
    if task in llm_tasks():
        return {"response": output}
    return {"generated text": links.rewrite(output)}


def _message(answer: str, outputs: Sequence[str], links: Links, since: float) -> dict:
    """``{"message": ...}``: the answer with its media files as the client's paths, then the paths of the
    media the tasks made that the answer does not name."""
    named = set(links.files([answer]))
    unnamed = [links.path(name) for name in links.files(outputs, since=since) if name not in named]
    extra = " ".join(path for path in dict.fromkeys(unnamed) if path)
    text = links.rewrite(answer)
    return {"message": f"{text}\n\n{extra}" if extra else text}


async def _stage(planner: Any, question: str, history: list[dict], session_id: str, stage: str,
                 links: Links) -> Any:
    """Run the planner up to ``stage`` ("tasks", "results" or "response"); stopping early cancels the rest."""
    started = time.time()
    plan: list[dict] | None = None
    shown: list[dict] = []
    chosen: dict[int, dict] = {}
    arguments: dict[int, Any] = {}
    ended: dict[int, tuple[str, str]] = {}
    run = planner.astream(question, history, session_id=session_id)
    try:
        async for event in run:
            if isinstance(event, PlanEvent):
                plan = [dict(task) for task in event.tasks]
                shown = as_written(plan, event.written)
                if stage == "tasks":
                    return shown
            elif isinstance(event, SelectionEvent):
                chosen[event.task_id] = {"id": event.model, "reason": event.reason}
            elif isinstance(event, TaskStartEvent):
                arguments[event.task_id] = event.tool_input
            elif isinstance(event, TaskEndEvent):
                ended[event.task_id] = (event.status, event.observation)
                if stage == "results" and plan is not None and len(ended) >= len(plan):
                    break
    finally:
        await run.aclose()
    if stage == "results" and plan is not None:
        return {str(task["id"]): {
            "task": {**written, "args": links.value(arguments.get(task["id"], written["args"]))},
            "inference result": inference_result(task["task"], *ended.get(task["id"], ("not run", "")), links,
                                                 since=started),
            "choose model result": chosen.get(task["id"], {"id": None, "reason": ""})}
            for task, written in zip(plan, shown, strict=True)}
    result = run.result
    return _message(result.output if result is not None else "", [output for _, output in ended.values()], links,
                    started)
