"""The plan: parse the LLM's JSON task list and validate it before anything runs.

A plan is ``[{"task": <tool>, "id": 0, "dep": [-1], "args": {...}}]``.
``parse_plan`` reads it out of free text; ``validate_plan`` checks it against
the app's tools and returns either the tasks or the exact list of problems,
which go back to the LLM once (``PlanFeedback``, a model-feedback error). A
reply with no JSON at all is an answer, not a plan (:func:`prose_answer`); a
second invalid plan ends the request without tools (``stopped_by="plan_failed"``,
see :mod:`.pipeline`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Mapping, Sequence

from ..errors import ModelFeedbackError, RunError
from ..tools.base import Tool
from .binding import FILE_KINDS, bind, placeholders, whole_placeholder
from .catalog import task_names, unavailable_tasks
from .inputs import RequestFiles
from .jsonish import BadJSON, CutOffJSON, NoJSON, extract_json

__all__ = ["Task", "ParsedPlan", "PlanFeedback", "PlanError", "parse_plan", "validate_plan", "resolve_tool",
           "unknown_task_problem", "prose_answer", "problem_reason"]

_ANSWER = re.compile(r"^\s*(?:answer|ai|final answer)\s*[:：]\s*", re.I | re.M)
_MAX_PROBLEMS = 15
_INSTRUCTION = re.compile(r"\.\s+(?:Reply|Plan)\b")  # where a problem's advice to the LLM starts


class PlanFeedback(ModelFeedbackError):
    """A plan the LLM must fix: ``problems`` are sent back to it word for word."""

    def __init__(self, problems: Sequence[str], *, llm_output: str = "", prose: bool = False):
        self.problems = list(problems)
        self.llm_output = llm_output
        self.prose = prose  # the reply holds no JSON at all: it talks (chit-chat) instead of planning
        super().__init__("; ".join(self.problems))


class PlanError(RunError):
    """The LLM gave an invalid plan twice (the second after being told the exact problems).

    A run failure, not a developer mistake: the request and the configuration
    were fine, the model's output was unusable. ``problems`` lists what was
    wrong with the last plan; ``llm_output`` is its raw text. The planner
    pipeline does not raise it (such a request ends with
    ``stopped_by="plan_failed"`` and an answer); it names the failure for code
    that plans and validates on its own.
    """

    def __init__(self, message: str, *, problems: Sequence[str] = (), llm_output: str = ""):
        super().__init__(message)
        self.problems = list(problems)
        self.llm_output = llm_output


@dataclass(frozen=True)
class Task:
    """One validated task; ``task`` is the canonical tool name."""

    id: int
    task: str
    dep: tuple[int, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "id": self.id, "dep": list(self.dep) or [-1], "args": dict(self.args)}


@dataclass
class ParsedPlan:
    """The raw task list and, for an empty plan, an answer written after it (``[]`` then ``Answer: ...``)."""

    items: list[Any]
    answer: str = ""


# ---- parsing -------------------------------------------------------------------------


def parse_plan(text: str, *, finish_reason: str | None = None) -> ParsedPlan:
    """Read the task list out of ``text`` or raise :class:`PlanFeedback` saying what to fix."""
    try:
        value, _, end = extract_json(text, "list")
    except CutOffJSON as cut:
        hint = " (the reply hit the token limit)" if finish_reason == "length" else ""
        raise PlanFeedback([f"the JSON plan is cut off{hint}: {cut}. Reply with the complete JSON list, "
                            f"as few tasks as needed"], llm_output=text) from None
    except BadJSON as bad:
        raise PlanFeedback([f"{bad}. Reply with only the corrected JSON list of tasks (as few as needed)"],
                           llm_output=text) from None
    except NoJSON:
        obj = _single_object(text)
        if obj is None:
            raise PlanFeedback(["no JSON list of tasks was found. Reply with only the JSON list, e.g. "
                                '[{"task": "<task>", "id": 0, "dep": [-1], "args": {"text": "..."}}], '
                                "or [] when no task is needed"], llm_output=text, prose=True) from None
        return ParsedPlan(obj)
    answer = ""
    if value == []:
        match = _ANSWER.search(text, end)
        if match:
            answer = text[match.end():].strip()
    return ParsedPlan(value, answer)


def prose_answer(text: str) -> str:
    """A planning reply that holds no JSON, as the answer it is: trimmed, a leading ``Answer:`` marker dropped."""
    text = (text or "").strip()
    match = _ANSWER.match(text)
    return text[match.end():].strip() if match else text


def problem_reason(problems: Sequence[str], limit: int = 300) -> str:
    """Why a plan was refused, in short, for the user and a direct answer: the first problem without its advice
    to the LLM ("Reply with ..."), clipped, and how many more there were."""
    if not problems:
        return "the plan was invalid"
    reason = _INSTRUCTION.split(problems[0], maxsplit=1)[0].strip()
    if len(reason) > limit:
        reason = reason[:limit].rstrip() + " ..."
    more = len(problems) - 1
    return reason + (f" (and {more} more problem{'s' if more != 1 else ''})" if more else "")


def _single_object(text: str) -> list[Any] | None:
    """``{"task": ...}`` alone, or ``{"tasks": [...]}``, as a list."""
    try:
        value, _, _ = extract_json(text, "object")
    except (NoJSON, CutOffJSON):
        return None
    for key in ("tasks", "plan"):
        if isinstance(value.get(key), list):
            return value[key]
    return [value] if "task" in value else None


# ---- validation ----------------------------------------------------------------------


def resolve_tool(name: Any, tools: Mapping[str, Tool]) -> Tool | None:
    """The tool a plan's ``task`` names: its name (any case, ``_`` or spaces for ``-``), a HuggingFace task id
    or JARVIS name of the bundled table (``image-to-text`` → image-captioning, ``canny-control`` →
    image-to-canny), or a ``task`` / ``hub_task`` attribute that one tool alone has."""
    if not isinstance(name, str):
        return None
    if name in tools:
        return tools[name]
    key = _normal(name)
    if not key:
        return None
    for known, tool in tools.items():
        if _normal(known) == key:
            return tool
    target = _table().get(key)
    if target is not None:
        for known, tool in tools.items():
            if _normal(known) == target:
                return tool
    by_task = [t for t in tools.values()
               if key in {_normal(str(getattr(t, attr, "") or "")) for attr in ("task", "hub_task")}]
    return by_task[0] if len(by_task) == 1 else None


def unknown_task_problem(where: str, name: Any, tools: Mapping[str, Tool]) -> str:
    """What to tell the LLM about a task name no tool answers to."""
    available = ", ".join(tools) or "(none)"
    key = _normal(name) if isinstance(name, str) else ""
    reason = {_normal(k): v for k, v in unavailable_tasks().items()}.get(key)
    if reason:
        return (f"{where}: the task {name!r} cannot run here: {reason}. Plan only with the available tasks: "
                f"{available}")
    target = _table().get(key)
    means = f" (it means the {target} tool, which this app does not have)" if target and target != key else (
        f" (this app has no {target} tool)" if target else "")
    return f"{where}: unknown task {name!r}{means}; the available tasks are: {available}"


def _normal(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    return {_normal(k): _normal(v) for k, v in task_names().items()}


def validate_plan(items: Sequence[Any], tools: Mapping[str, Tool], *, max_tasks: int,
                  files: RequestFiles | None = None) -> tuple[list[Task], list[str]]:
    """``(tasks, problems)``; the plan may run only when ``problems`` is empty.

    With ``files`` (the request's :class:`~.inputs.RequestFiles`), literal image/audio/video paths are checked
    too: a file the user named is copied into the tool's workspace and the task's argument names the copy.
    """
    if len(items) > max_tasks:
        return [], [f"the plan has {len(items)} tasks; at most {max_tasks} are allowed. "
                    f"Plan as few tasks as the request needs"]
    problems: list[str] = []
    tasks: list[Task] = []
    seen: set[int] = set()
    for position, item in enumerate(items):
        task = _read_task(position, item, tools, problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(f"task id {task.id} is used more than once; ids must be unique")
            continue
        seen.add(task.id)
        tasks.append(task)
    by_id = {t.id: t for t in tasks}
    checked = []
    for task in tasks:
        checked.append(_check_links(task, by_id, tools, problems, files))
    tasks = checked
    problems.extend(_cycles(tasks, by_id))
    if len(problems) > _MAX_PROBLEMS:
        problems = problems[:_MAX_PROBLEMS] + [f"... and {len(problems) - _MAX_PROBLEMS} more problems"]
    return (tasks if not problems else []), problems


def _read_task(position: int, item: Any, tools: Mapping[str, Tool], problems: list[str]) -> Task | None:
    where = f"item {position}"
    if not isinstance(item, Mapping):
        problems.append(f"{where} is not a JSON object with task, id, dep and args")
        return None
    task_id = _as_int(item.get("id"))
    if task_id is None or task_id < 0:
        problems.append(f"{where} needs a whole-number id >= 0, got {item.get('id')!r}")
        return None
    where = f"task {task_id}"
    name = item.get("task")
    tool = resolve_tool(name, tools)
    if tool is None:
        problems.append(unknown_task_problem(where, name, tools))
        return None
    deps = _read_deps(item.get("dep", [-1]))
    if deps is None:
        problems.append(f"{where}: dep must be a list of task ids ([-1] for none), got {item.get('dep')!r}")
        return None
    args = item.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        problems.append(f"{where}: args must be an object like {{\"text\": ...}}, got {type(args).__name__}")
        return None
    return Task(task_id, tool.name, deps, dict(args))


def _read_deps(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return ()
    values = raw if isinstance(raw, (list, tuple)) else [raw]
    deps: list[int] = []
    for value in values:
        number = _as_int(value)
        if number is None:
            return None
        if number != -1 and number not in deps:
            deps.append(number)
    return tuple(deps)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _check_links(task: Task, by_id: Mapping[int, Task], tools: Mapping[str, Tool], problems: list[str],
                 files: RequestFiles | None) -> Task:
    """Check a task's dependencies and arguments; returns it with user-named files replaced by their copies."""
    where = f"task {task.id} ({task.task})"
    rewritten: dict[str, Any] = {}
    for dep in task.dep:
        if dep == task.id:
            problems.append(f"{where} depends on itself")
        elif dep not in by_id:
            problems.append(f"{where} depends on task {dep}, which is not in the plan")
    tool = tools[task.task]
    implied = [ref for value in task.args.values() for ref in placeholders(value)
               if ref in by_id and ref != task.id and ref not in task.dep]
    if implied:  # a reference the dep list forgot (JARVIS's fix_dep): the task depends on it, plainly
        task = replace(task, dep=tuple(dict.fromkeys((*task.dep, *implied))))
    mapping, binding_problems = bind(tool, task.args)
    problems.extend(f"{where}: {p}" for p in binding_problems)
    kinds = tool.input_kinds()
    for param, key in mapping.items():
        value = task.args[key]
        for ref in placeholders(value):
            if ref not in by_id:
                problems.append(f"{where}: its {key} argument uses <resource>-{ref}, but there is no task {ref}")
            elif ref == task.id:
                problems.append(f"{where}: its {key} argument uses its own result (<resource>-{ref})")
        kind = kinds.get(param, "text")
        whole = whole_placeholder(value)
        if kind in FILE_KINDS and whole is not None and whole in by_id:
            produced = getattr(tools[by_id[whole].task], "output_kind", "text")
            if produced != kind:
                problems.append(f"{where}: its {key} argument expects {kind}, but task {whole} "
                                f"({by_id[whole].task}) produces {produced}")
        elif kind in FILE_KINDS and whole is None and not isinstance(value, str):
            problems.append(f"{where}: its {key} argument must be a file path or URL string, "
                            f"got {type(value).__name__}")
        elif kind in FILE_KINDS and files is not None and isinstance(value, str) and not placeholders(value):
            new, problem = files.check(value, kind, tool)
            if problem:
                problems.append(f"{where}: {problem}")
            elif new != value:
                rewritten[key] = new
    return replace(task, args={**task.args, **rewritten}) if rewritten else task


def _cycles(tasks: Sequence[Task], by_id: Mapping[int, Task]) -> list[str]:
    """Kahn's algorithm; what cannot be ordered lies on or behind a cycle."""
    pending = {t.id: sum(1 for d in t.dep if d in by_id and d != t.id) for t in tasks}
    children: dict[int, list[int]] = {t.id: [] for t in tasks}
    for t in tasks:
        for d in t.dep:
            if d in by_id and d != t.id:
                children[d].append(t.id)
    ready = [i for i, n in pending.items() if n == 0]
    done = 0
    while ready:
        current = ready.pop()
        done += 1
        for child in children[current]:
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    if done == len(tasks):
        return []
    stuck = sorted(i for i, n in pending.items() if n > 0)
    return [f"the dependencies of tasks {', '.join(map(str, stuck))} form a cycle; a task may only depend on "
            f"tasks that do not depend on it"]
