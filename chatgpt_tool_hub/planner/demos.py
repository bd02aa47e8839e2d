"""Planning demonstrations that name only the app's own tools.

Small models copy the demonstrations of the planning prompt word for word, so
a demo that names a tool the app lacks becomes a plan that cannot run. The
prompt file's demos (HuggingGPT's image examples) are sent only when the app
has every tool they name, by its exact name; demos that name no tool (the
``[]`` then ``Answer:`` one) always are. When no file demo with tasks fits,
two short ones are built from the app's tools: one task, and two tasks chained
by ``<resource>-0``. An app with no tool of its own (the ``conversational`` /
``text-generation`` tasks aside) gets no task demo.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Mapping, Sequence

from ..engine.prompts import PromptSet
from ..llm.base import Message
from ..tools.base import Tool
from .binding import FILE_KINDS, required_parameters
from .plan import PlanFeedback, parse_plan
from .prompts import demo_pairs

__all__ = ["planning_demos", "built_demos"]

SAMPLES = {"text": "hello world", "image": "example.jpg", "audio": "example.wav", "video": "example.mp4"}


def planning_demos(prompts: PromptSet, tools: Mapping[str, Tool]) -> list[Message]:
    """The demonstration messages of the planning prompt for an app with ``tools``."""
    own = {name: tool for name, tool in tools.items() if not getattr(tool, "runs_on_app_llm", False)}
    kept: list[tuple[str, str]] = []
    with_tasks = False
    for user, assistant in demo_pairs(prompts):
        names = _task_names(assistant)
        if names is None or not set(names) <= set(own):
            continue
        with_tasks = with_tasks or bool(names)
        kept.append((user, assistant))
    if not with_tasks:
        kept = [*built_demos(list(own.values())), *kept]
    messages: list[Message] = []
    for user, assistant in kept:
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": assistant})
    return messages


def built_demos(tools: Sequence[Tool]) -> list[tuple[str, str]]:
    """``(user, assistant)`` demos over ``tools``: one task, then two chained ones if two tools fit together.
    The one-task demo uses a tool the chain does not (else the chain's second one), so the demos show as many
    of the app's tools as they can."""
    if not tools:
        return []
    chain = _chain(tools)
    in_chain = chain[:2] if chain is not None else ()
    single = next((t for t in tools if t not in in_chain), in_chain[1] if in_chain else tools[0])
    args = _arguments(single)
    demos = [(f"Please use {single.name}{_on(args.values())}.", _plan_text([_task(0, single, args)]))]
    if chain is not None:
        source, target, param = chain
        start = _arguments(source)
        linked = _arguments(target, {param: "<resource>-0"})
        others = [v for v in linked.values() if v != "<resource>-0"]
        rest = f" and {_spoken(others)}" if others else ""
        demos.append((f"Please use {source.name}{_on(start.values())}, then {target.name} on its result{rest}.",
                      _plan_text([_task(0, source, start), _task(1, target, linked, [0])])))
    return demos


def _task_names(assistant: str) -> list[Any] | None:
    """The task names a demo's plan uses (``[]`` for a demo without tasks); None when it is not a plan."""
    try:
        items = parse_plan(assistant).items
    except PlanFeedback:
        return None
    return [item.get("task") for item in items if isinstance(item, Mapping)]


def _chain(tools: Sequence[Tool]) -> tuple[Tool, Tool, str] | None:
    """``(source, target, parameter)``: two tools where ``target`` takes what ``source`` produces; a link by a
    file kind (an image handed on) is preferred, as it shows best how a produced file is passed."""
    links = []
    for source in tools:
        produced = getattr(source, "output_kind", "text") or "text"
        for target in tools:
            if target is source:
                continue
            kinds = target.input_kinds()
            params = [p for p in _demo_parameters(target) if kinds.get(p, "text") == produced]
            if params:
                links.append((produced not in FILE_KINDS, source, target, params[0]))
    if not links:
        return None
    links.sort(key=lambda link: link[0])  # stable: file links first, then the tools' order
    _, source, target, param = links[0]
    return source, target, param


def _demo_parameters(tool: Tool) -> list[str]:
    """The parameters a demo fills: the required ones, else the first one (none for a tool without inputs)."""
    kinds = tool.input_kinds()
    return [p for p in required_parameters(tool) if p in kinds] or list(kinds)[:1]


def _arguments(tool: Tool, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """A task's ``args``: keyed by kind (``text``, ``image`` ...), or by parameter name when two share a kind."""
    kinds = tool.input_kinds()
    counts = Counter(kinds.values())
    args: dict[str, str] = {}
    for param in _demo_parameters(tool):
        kind = kinds.get(param, "text")
        key = kind if counts[kind] == 1 else param
        args[key] = (given or {}).get(param) or SAMPLES.get(kind, SAMPLES["text"])
    return args


def _task(task_id: int, tool: Tool, args: Mapping[str, str], dep: Sequence[int] = (-1,)) -> dict[str, Any]:
    return {"task": tool.name, "id": task_id, "dep": list(dep), "args": dict(args)}


def _plan_text(tasks: list[dict[str, Any]]) -> str:
    return json.dumps(tasks, ensure_ascii=False)


def _on(values: Any) -> str:
    spoken = _spoken(values)
    return f" on {spoken}" if spoken else ""


def _spoken(values: Any) -> str:
    """Argument values as a request names them: files bare, text in quotes."""
    files = set(SAMPLES.values()) - {SAMPLES["text"]}
    words = [v if v in files else f'"{v}"' for v in values]
    return " and ".join(words)
