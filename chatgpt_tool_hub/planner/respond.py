"""Response generation: the HuggingGPT response prompt over the plan, models and results.

The messages are built, not sent: the pipeline makes the one LLM call. The
user's request and chat history are their own messages, never template text.
A result that is content nobody here controls (``TaskResult.untrusted``) is
shown between the engine's untrusted-content delimiters
(:func:`chatgpt_tool_hub.engine.egress.fence`), as the ReAct engine shows such
an observation, and the response prompt says it is data, not instructions.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Mapping, Sequence

from ..engine.egress import fence
from ..engine.prompts import PromptSet
from ..llm.base import Message
from .binding import full_paths
from .plan import Task
from .results import Assignment, TaskResult

__all__ = ["response_messages", "direct_messages", "plan_failed_messages", "processes", "cancelled_answer"]

OUTPUT_MAX_CHARS = 3000


def processes(tasks: Sequence[Task], assignments: Mapping[int, Assignment], results: Mapping[int, TaskResult],
              roots: Sequence[str] = (), copies: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The workflow as HuggingGPT shows it to the LLM: task, model and reason, result; full file paths.

    ``roots`` are the folders tools resolve relative file names in (expert tools' workspaces); ``copies``
    maps a path the user wrote to the workspace copy a task read (shown as the task's "files from the request").
    """
    originals = {copy: named for named, copy in (copies or {}).items()}
    out = []
    for task in tasks:
        result = results.get(task.id)
        args = result.args if result and result.args else task.args
        entry: dict[str, Any] = {"task": {**task.as_dict(), "args": _shown_args(task, args, results, roots)}}
        named = {key: originals[value] for key, value in task.args.items()
                 if isinstance(value, str) and value in originals}
        if named:
            entry["files from the request"] = named
        assignment = assignments.get(task.id)
        if assignment is not None and assignment.model:
            entry["model"] = {"id": assignment.model, "reason": assignment.reason}
        if result is not None:
            entry["status"] = result.status
            if result.status == "ok":
                shown = _clip(full_paths(result.output or "", roots))
                entry["inference result"] = fence(result.tool, shown) if result.untrusted else shown
                if result.file:
                    entry["file"] = result.file
            else:
                entry["error"] = result.error or result.reason or result.status
        out.append(entry)
    return out


def response_messages(prompts: PromptSet, query: str, history: Sequence[Message], tasks: Sequence[Task],
                      assignments: Mapping[int, Assignment], results: Mapping[int, TaskResult],
                      roots: Sequence[str] = (), copies: Mapping[str, str] | None = None) -> list[Message]:
    workflow = json.dumps(processes(tasks, assignments, results, roots, copies), ensure_ascii=False)
    return [
        {"role": "system", "content": prompts.render("response_system", date=_today())},
        *history,
        {"role": "user", "content": query},
        {"role": "assistant", "content": prompts.render("response_workflow", processes=workflow)},
        {"role": "user", "content": prompts.render("response_request")},
    ]


def direct_messages(prompts: PromptSet, query: str, history: Sequence[Message], bot_name: str) -> list[Message]:
    """An empty plan: answer the request without tools."""
    system = prompts.render("direct_system", bot_name=bot_name, date=_today())
    return [{"role": "system", "content": system}, *history, {"role": "user", "content": query}]


def plan_failed_messages(prompts: PromptSet, query: str, history: Sequence[Message], bot_name: str,
                         reason: str) -> list[Message]:
    """No plan could be made: answer the request without tools, knowing why (the broken plans are not shown)."""
    system = prompts.render("plan_failed_system", bot_name=bot_name, date=_today(), reason=reason)
    return [{"role": "system", "content": system}, *history, {"role": "user", "content": query}]


def cancelled_answer(prompts: PromptSet, results: Mapping[int, TaskResult]) -> str:
    done = [r for r in results.values() if r.status == "ok"]
    lines = [f"{len(done)} of {len(results)} tasks finished."]
    for result in sorted(done, key=lambda r: r.id):
        lines.append(f"- task {result.id} ({result.tool}): {_clip(full_paths(result.output or ''), 300)}")
    return prompts.render("cancelled", summary="\n".join(lines))


def _full(args: Mapping[str, Any], roots: Sequence[str]) -> dict[str, Any]:
    return {k: (full_paths(v, roots) if isinstance(v, str) else v) for k, v in args.items()}


def _shown_args(task: Task, args: Mapping[str, Any], results: Mapping[int, TaskResult],
                roots: Sequence[str]) -> dict[str, Any]:
    """A task's arguments after substitution, full paths; a value that took in an untrusted result of a task
    it depends on is fenced like that result."""
    shown = _full(args, roots)
    sources = [results[dep].tool for dep in task.dep if dep in results and results[dep].untrusted]
    if not sources:
        return shown
    origin = ", ".join(dict.fromkeys(sources))
    return {k: (fence(origin, v) if isinstance(v, str) and args.get(k) != task.args.get(k) else v)
            for k, v in shown.items()}


def _clip(text: str, limit: int = OUTPUT_MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} ... [{len(text) - limit} more characters]"


def _today() -> str:
    return _dt.date.today().isoformat()
