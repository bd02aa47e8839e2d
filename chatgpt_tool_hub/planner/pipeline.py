"""One request, HuggingGPT's four stages: plan → select models → execute the DAG → respond.

``iter_request`` is a generator of typed events whose return value is the
:class:`PlanResult`; all per-request state lives in ``Request``, so one app
serves many requests at once. LLM calls: planning 1 (+1 for a re-plan),
selection 1 per task with two or more candidates in ``"llm"`` mode (none in
the other modes), 1 per ``conversational`` / ``text-generation`` task (the
app's LLM answers them, :mod:`.llmtask`), response 1 (none when the planning
reply already answered a request that needs no tool). Files the request names
are checked and copied into the workspace while the plan is validated
(:mod:`.inputs`).
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping, Sequence

from ..config import SETTINGS
from ..engine.prompts import PromptSet, detect_language, load_prompts
from ..events import AnswerEvent, ErrorEvent, Event, TokenEvent
from ..llm.base import LLM, LLMResponse, Message, Usage, call_llm, collect_stream, stream_llm
from ..redact import Redactor
from ..run.budget import Budget
from ..run.steps import RunUsage
from ..tools.base import Tool, ToolContext
from .binding import describe_inputs, workspace_roots
from .events import PlanEvent, SelectionEvent
from .execute import DagRun
from .inputs import RequestFiles
from .llmtask import DEFAULT_SYSTEM, with_llm_tasks
from .plan import PlanError, PlanFeedback, Task, parse_plan, validate_plan
from .prompts import demonstrations, planner_prompts
from .respond import cancelled_answer, direct_messages, response_messages
from .results import Assignment, PlanResult, TaskResult
from .select import ModelSelector
from .workers import DaemonPool

__all__ = ["PlannerSettings", "RunControl", "Request", "iter_request"]

Gen = Generator[Event, None, Any]


def _default(key: str) -> Any:
    return SETTINGS[key].default


@dataclass(frozen=True)
class PlannerSettings:
    """How the planner runs; the defaults are the configuration table's (``planner_*`` settings)."""

    max_tasks: int = _default("planner_max_tasks")
    max_workers: int = _default("planner_max_workers")
    task_timeout: float | None = _default("planner_task_timeout")
    bot_name: str = "LLM-OS"
    model_selection: str = _default("planner_model_selection")
    top_k: int = _default("planner_top_k")


class RunControl:
    """Cancels one request from another thread: stages not begun never begin, waiting tasks never start."""

    def __init__(self, session_id: str = "default"):
        self.session_id = session_id
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._dag: DagRun | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()
            dag = self._dag
        if dag is not None:
            dag.cancel()

    def attach(self, dag: DagRun) -> None:
        with self._lock:
            self._dag = dag
            cancelled = self.cancelled
        if cancelled:
            dag.cancel()


@dataclass
class Request:
    """Everything one request needs and changes."""

    llm: LLM
    tools: Mapping[str, Tool]
    selector: ModelSelector
    settings: PlannerSettings
    query: str
    history: Sequence[Message] = ()
    session_id: str = "default"
    stream: bool = False
    control: RunControl = field(default_factory=RunControl)
    approve: Callable[[str, Any], bool] | None = None
    pool: DaemonPool | None = None  # the app's warm task threads; None: the run starts its own
    budget: Budget | None = None  # tool calls (and subtrees' LLM calls), shared by the whole request
    redactor: Redactor | None = None  # the app's configured secrets, hidden in every task result
    usage: RunUsage = field(default_factory=RunUsage)
    prompts: PromptSet = field(default_factory=planner_prompts)
    llm_tasks: bool = True  # add the conversational / text-generation tasks the app's LLM answers
    files: RequestFiles | None = None  # the files the request names; None: read from query and history
    _usage_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.llm_tasks:
            system = (self.prompts.render("llm_task_system", bot_name=self.settings.bot_name)
                      if "llm_task_system" in self.prompts.sections else DEFAULT_SYSTEM)
            self.tools = with_llm_tasks(self.tools, system)
        if self.files is None:
            self.files = RequestFiles.of_request(self.query, self.history)

    def complete(self, messages: list[Message]) -> LLMResponse:
        """One LLM call, recorded (thread-safe: selection calls run in parallel)."""
        response = call_llm(self.llm, messages)
        self.record(response)
        return response

    def record(self, response: LLMResponse) -> None:
        if response.text is None:
            response.text = ""
        with self._usage_lock:
            self.usage.calls.append(response.usage if isinstance(response.usage, Usage) else Usage())


def iter_request(req: Request) -> Gen:
    """Plan, select, execute, respond; yields events, returns the :class:`PlanResult`."""
    started = time.perf_counter()
    tasks, answer, replans, first_problems = yield from _plan(req)
    result = PlanResult("", [t.as_dict() for t in tasks], usage=req.usage, replans=replans,
                        plan_problems=first_problems)
    if req.control.cancelled:
        return (yield from _finish(req, result, cancelled_answer(req.prompts, {}), "cancelled", started))
    if not tasks:
        if not answer:
            messages = direct_messages(req.prompts, req.query, req.history, req.settings.bot_name)
            answer = (yield from _call(req, messages, req.stream)).text.strip()
        elif req.stream:
            yield TokenEvent(answer)  # written inside the planning reply: one token event, as streamed
        return (yield from _finish(req, result, answer, "no_tools", started))
    result.assignments = yield from _select(req, tasks)
    result.tasks = yield from _execute(req, tasks, result.assignments)
    if req.control.cancelled:
        return (yield from _finish(req, result, cancelled_answer(req.prompts, result.tasks), "cancelled", started))
    messages = response_messages(req.prompts, req.query, req.history, tasks, result.assignments, result.tasks,
                                 workspace_roots(req.tools.values()), req.files.copies if req.files else None)
    output = (yield from _call(req, messages, req.stream)).text.strip()
    return (yield from _finish(req, result, output, "answer", started))


def _finish(req: Request, result: PlanResult, output: str, stopped_by: str, started: float) -> Gen:
    result.output = output
    result.stopped_by = stopped_by  # type: ignore[assignment]
    result.seconds = time.perf_counter() - started
    yield AnswerEvent(output, stopped_by)
    return result


# ---- stage 1: planning ---------------------------------------------------------------


def _plan(req: Request) -> Gen:
    """``(tasks, answer, replans, problems of the first plan)``; a second invalid plan raises PlanError."""
    messages = _planning_messages(req)
    first_problems: list[str] = []
    for attempt in (1, 2):
        reply = yield from _call(req, messages, stream=False)
        if req.control.cancelled:
            return [], "", attempt - 1, first_problems
        try:
            parsed = parse_plan(reply.text, finish_reason=reply.finish_reason)
            tasks, problems = validate_plan(parsed.items, req.tools, max_tasks=req.settings.max_tasks,
                                            files=req.files)
        except PlanFeedback as feedback:
            if attempt == 2 and feedback.prose and (reply.text or "").strip():
                # told to plan and still only talking: the request needs no task, and this is the answer
                # (JARVIS answers such requests by chit-chat too)
                return [], reply.text.strip(), attempt - 1, first_problems
            parsed, tasks, problems = None, [], feedback.problems
        if not problems:
            if tasks:
                yield PlanEvent(_summary(tasks), tasks=tuple(t.as_dict() for t in tasks), attempt=attempt)
            return tasks, (parsed.answer if parsed else ""), attempt - 1, first_problems
        if attempt == 2:
            raise PlanError("the LLM's plan was invalid twice; problems with the last one:\n- "
                            + "\n- ".join(problems), problems=problems, llm_output=reply.text)
        first_problems = problems
        yield ErrorEvent("the plan was sent back: " + "; ".join(problems), "PlanFeedback")
        messages = [*messages, {"role": "assistant", "content": reply.text or "(empty reply)"},
                    {"role": "user", "content": req.prompts.render(
                        "plan_feedback", problems="\n".join(f"- {p}" for p in problems))}]
    raise AssertionError("unreachable")  # pragma: no cover


def _planning_messages(req: Request) -> list[Message]:
    available = "\n".join(_describe(tool) for tool in req.tools.values()) or "(none)"
    system = req.prompts.render("plan_system", bot_name=req.settings.bot_name, date=_dt.date.today().isoformat(),
                                max_tasks=req.settings.max_tasks, available_tasks=available)
    return [{"role": "system", "content": system}, *demonstrations(req.prompts), *req.history,
            {"role": "user", "content": req.query}]


def _describe(tool: Tool) -> str:
    description = " ".join((tool.description or "").split())
    return f"- {tool.name}: {description} ({describe_inputs(tool)} -> {getattr(tool, 'output_kind', 'text')})"


def _summary(tasks: Sequence[Task]) -> str:
    lines = [f"Plan ({len(tasks)} task{'s' if len(tasks) != 1 else ''}):"]
    for t in tasks:
        after = f" after {', '.join(map(str, t.dep))}" if t.dep else ""
        lines.append(f"{t.id}. {t.task} {json.dumps(t.args, ensure_ascii=False)}{after}")
    return "\n".join(lines)


# ---- stage 2: model selection -----------------------------------------------------------


def _select(req: Request, tasks: Sequence[Task]) -> Gen:
    assignments: dict[int, Assignment] = {}

    def ask(messages: list[Message]) -> str:
        return req.complete(messages).text

    def assign(task: Task) -> Assignment:
        return req.selector.assign(task, req.tools[task.task], req.query, req.prompts, ask)

    by_llm = [t for t in tasks if req.selector.needs_llm(req.tools[t.task])]
    for task in tasks:
        if task not in by_llm:
            assignments[task.id] = assign(task)
    if len(by_llm) == 1:
        assignments[by_llm[0].id] = assign(by_llm[0])
    elif by_llm:  # one call per task, in parallel (HuggingGPT makes them one after another)
        with ThreadPoolExecutor(max_workers=min(len(by_llm), req.settings.max_workers),
                                thread_name_prefix="planner-select") as pool:
            futures = {pool.submit(assign, task): task for task in by_llm}
            for future in as_completed(futures):
                assignments[futures[future].id] = future.result()
    for task in tasks:
        chosen = assignments[task.id]
        if chosen.model:
            yield SelectionEvent(f"task {task.id} ({task.task}): model {chosen.model}: {chosen.reason}",
                                 task_id=task.id, model=chosen.model, reason=chosen.reason)
    return assignments


# ---- stage 3: execution -------------------------------------------------------------------


def _execute(req: Request, tasks: Sequence[Task], assignments: Mapping[int, Assignment]) -> Gen:
    context = ToolContext(session_id=req.session_id, llm=req.llm, approve=req.approve, budget=req.budget,
                          usage=req.usage, redactor=req.redactor)
    dag = DagRun(tasks, req.tools, assignments=assignments, max_workers=req.settings.max_workers,
                 timeout=req.settings.task_timeout, context=context, pool=req.pool,
                 prompts=load_prompts(detect_language(req.query)))
    req.control.attach(dag)
    yield from dag.events()
    results: dict[int, TaskResult] = dag.results
    return results


# ---- LLM calls ------------------------------------------------------------------------------


def _call(req: Request, messages: list[Message], stream: bool) -> Gen:
    if not stream:
        return req.complete(messages)
    chunks = []
    for chunk in stream_llm(req.llm, messages):
        chunks.append(chunk)
        if chunk.text:
            yield TokenEvent(chunk.text)
    response = collect_stream(iter(chunks))
    req.record(response)
    return response
