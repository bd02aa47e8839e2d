"""JARVIS's (HuggingGPT's) server API over the planner app: ``POST /hugginggpt``, ``/tasks``, ``/results``.

The body is ``{"messages": [{"role", "content"}, ...]}`` (the last message is
the request; ``api_key`` and the like are ignored: the server's LLM answers),
as JARVIS's ``awesome_chat.py --mode server`` takes it:

* ``/hugginggpt``: the whole run, ``{"message": "<answer>"}``;
* ``/tasks``: stage 1, the plan as a JSON list of ``{"task", "id", "dep", "args"}``
  (``{"message": ...}`` when the request needs no task);
* ``/results``: stages 1-3, ``{"<id>": {"task": ..., "inference result": ...,
  "choose model result": {"id", "reason"}}}``, without the response stage.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request

from ..errors import RunError, UserError
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

__all__ = ["add_jarvis_routes"]

log = logging.getLogger("chatgpt_tool_hub.server")


def _conversation(body: Any) -> tuple[str, list[dict]]:
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, 'the body must be {"messages": [{"role": "user", "content": "..."}]}')
    last = messages[-1]
    if last.get("role") != "user" or not isinstance(last.get("content"), str) or not last["content"].strip():
        raise ApiError(400, "the last message must be the user's request (role 'user', text content)")
    history = [{"role": m.get("role"), "content": m.get("content")} for m in messages[:-1]]
    return last["content"], history


def add_jarvis_routes(app: Any, state: Any) -> None:
    async def run(request: Request, stage: str):
        authorization = request.headers.get("authorization")
        state.user_of(authorization)
        body = await read_json(request, state.settings.max_body_bytes)
        question, history = _conversation(body)
        user = state.user_of(authorization, body.get("user"))
        state.take_slot()
        try:
            planner = await state.blocking(state.apps.acquire, user, "planner")
        except BaseException:
            state.slots.give()
            raise

        def done() -> None:
            state.apps.release(user, "planner")
            state.slots.give()

        async def job(send: Any) -> None:
            seconds = state.settings.request_timeout_s
            try:
                timed_out, payload = await with_deadline(
                    _stage(planner, question, history, f"user-{user.folder}", stage), seconds)
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


async def _stage(planner: Any, question: str, history: list[dict], session_id: str, stage: str) -> Any:
    """Run the planner up to ``stage`` ("tasks", "results" or "response"); stopping early cancels the rest."""
    plan: list[dict] | None = None
    chosen: dict[int, dict] = {}
    arguments: dict[int, Any] = {}
    ended: dict[int, dict] = {}
    run = planner.astream(question, history, session_id=session_id)
    try:
        async for event in run:
            if isinstance(event, PlanEvent):
                plan = [dict(task) for task in event.tasks]
                if stage == "tasks":
                    return plan
            elif isinstance(event, SelectionEvent):
                chosen[event.task_id] = {"id": event.model, "reason": event.reason}
            elif isinstance(event, TaskStartEvent):
                arguments[event.task_id] = event.tool_input
            elif isinstance(event, TaskEndEvent):
                ended[event.task_id] = {"status": event.status, "output": event.observation}
                if stage == "results" and plan is not None and len(ended) >= len(plan):
                    break
    finally:
        await run.aclose()
    if stage == "results" and plan is not None:
        return {str(task["id"]): {"task": {**task, "args": arguments.get(task["id"], task.get("args"))},
                                  "inference result": ended.get(task["id"], {"status": "not run"}),
                                  "choose model result": chosen.get(task["id"], {"id": None, "reason": ""})}
                for task in plan}
    result = run.result
    return {"message": result.output if result is not None else ""}
