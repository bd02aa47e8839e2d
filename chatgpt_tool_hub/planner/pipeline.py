"""One request, HuggingGPT's four stages: plan → select models → execute the DAG → respond.

``iter_request`` is a generator of typed events whose return value is the
:class:`PlanResult`; all per-request state lives in ``Request``, so one app
serves many requests at once. LLM calls: planning 1 (+1 for a re-plan),
selection 1 per task with two or more candidates in ``"llm"`` mode (none in
the other modes), 1 per ``conversational`` / ``text-generation`` task (the
app's LLM answers them, :mod:`.llmtask`), response 1 (none when the planning
reply already answered a request that needs no tool). Every request ends in an
answer, never in an exception from a bad plan: a planning reply in prose, with
no JSON at all, is the answer (``stopped_by="no_tools"``, as an empty plan);
a plan still invalid after the re-plan is answered by one more call without
tools (``stopped_by="plan_failed"``; when that reply is empty, a message says
planning failed and why). So a request makes at most 3 calls before any task
runs. The planning prompt's demonstrations name only the app's own tools
(:mod:`.demos`). The planner's own calls
go through the engine's LLM drivers (:mod:`chatgpt_tool_hub.engine.drivers`):
the request's :class:`~chatgpt_tool_hub.run.control.RunBudget` ``cancel()``
ends the wait for any of them at once, as it stops the DAG, and the request
ends with ``stopped_by="cancelled"``. Files the request names are checked and
copied into the workspace while the plan is validated (:mod:`.inputs`); with
``planner_request_files="workspace"`` (``tool-hub serve``) only files already in
the workspace are used.

The planner's own text is redacted like the ReAct engine's: the configured
secrets are hidden in the answer, in its streamed tokens (the drivers' hold-back
redaction, :class:`~chatgpt_tool_hub.engine.drivers.StreamRedactor`), in the
plan and in the selection reasons shown as events; task results reach the
response prompt fenced as data when they are untrusted (:mod:`.respond`).
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping, NamedTuple, Sequence

from ..config import SETTINGS
from ..engine.drivers import complete, control_of, llm_reply
from ..engine.egress import redact_value
from ..engine.prompts import PromptSet, detect_language, load_prompts
from ..events import AnswerEvent, ErrorEvent, Event, TokenEvent
from ..llm.base import LLM, LLMResponse, Message, Usage
from ..redact import Redactor
from ..run.budget import Budget
from ..run.control import RunBudget, RunCancelled
from ..run.steps import RunUsage
from ..tools.base import Tool, ToolContext
from .binding import describe_inputs, workspace_roots
from .demos import planning_demos
from .events import PlanEvent, SelectionEvent
from .execute import DagRun
from .inputs import RequestFiles
from .llmtask import DEFAULT_SYSTEM, with_llm_tasks
from .plan import PlanFeedback, Task, parse_plan, problem_reason, prose_answer, validate_plan
from .prompts import planner_prompts
from .respond import cancelled_answer, direct_messages, plan_failed_messages, response_messages
from .results import Assignment, PlanResult, TaskResult
from .select import ModelSelector
from .workers import DaemonPool

__all__ = ["PlannerSettings", "Request", "iter_request"]

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
    request_files: str = _default("planner_request_files")  # files a request names: "local" or "workspace"


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
    approve: Callable[[str, Any], bool] | None = None
    pool: DaemonPool | None = None  # the app's warm task threads; None: the run starts its own
    # tool calls (and subtrees' LLM calls), shared by the whole request; a RunBudget (made when None)
    # is also the request's cancel: its cancel() stops the LLM call in flight and the DAG
    budget: Budget | None = None
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
            self.files = RequestFiles.of_request(self.query, self.history, mode=self.settings.request_files,
                                                 roots=workspace_roots(self.tools.values()))
        if self.budget is None:
            self.budget = RunBudget()

    @property
    def control(self) -> RunBudget | None:
        """The request's cancel (None when it was given a plain ``Budget``, which cannot be cancelled)."""
        return control_of(self.budget)

    def check(self) -> None:
        """Raise :class:`RunCancelled` when the request was cancelled."""
        if self.control is not None:
            self.control.check()

    def complete(self, messages: list[Message]) -> LLMResponse:
        """One LLM call, recorded (thread-safe: selection calls run in parallel); ``cancel()`` ends it."""
        response = complete(self.llm, messages, control=self.control)
        self.record(response)
        return response

    def redacted(self, value: Any) -> Any:
        """``value`` (text, or JSON: dicts, lists) as it may be shown: the configured secrets hidden."""
        return redact_value(value, self.redactor)

    def record(self, response: LLMResponse) -> None:
        if response.text is None:
            response.text = ""
        with self._usage_lock:
            self.usage.calls.append(response.usage if isinstance(response.usage, Usage) else Usage())


def iter_request(req: Request) -> Gen:
    """Plan, select, execute, respond; yields events, returns the :class:`PlanResult`. Cancelled at any
    stage, it returns at once with ``stopped_by="cancelled"`` and the task results so far."""
    started = time.perf_counter()
    result = PlanResult("", usage=req.usage)
    try:
        return (yield from _stages(req, result, started))
    except RunCancelled:
        return (yield from _finish(req, result, cancelled_answer(req.prompts, result.tasks), "cancelled", started))


def _stages(req: Request, result: PlanResult, started: float) -> Gen:
    tasks, answer, failed = yield from _plan(req, result)
    result.plan = [req.redacted(t.as_dict()) for t in tasks]
    req.check()
    if failed:
        output = yield from _answer_without_plan(req, result.plan_problems)
        return (yield from _finish(req, result, output, "plan_failed", started))
    if not tasks:
        if not answer:
            messages = direct_messages(req.prompts, req.query, req.history, req.settings.bot_name)
            answer = (yield from _call(req, messages, req.stream)).text.strip()
        elif req.stream:
            yield TokenEvent(req.redacted(answer))  # written inside the planning reply: one token event
        return (yield from _finish(req, result, answer, "no_tools", started))
    result.assignments = yield from _select(req, tasks)
    result.tasks = yield from _execute(req, tasks, result.assignments)
    req.check()
    messages = response_messages(req.prompts, req.query, req.history, tasks, result.assignments, result.tasks,
                                 workspace_roots(req.tools.values()), req.files.copies if req.files else None)
    output = (yield from _call(req, messages, req.stream)).text.strip()
    return (yield from _finish(req, result, output, "answer", started))


def _finish(req: Request, result: PlanResult, output: str, stopped_by: str, started: float) -> Gen:
    output = req.redacted(output)  # the LLM may write a configured secret into its answer
    result.output = output
    result.stopped_by = stopped_by  # type: ignore[assignment]
    result.seconds = time.perf_counter() - started
    yield AnswerEvent(output, stopped_by)
    return result


# ---- stage 1: planning ---------------------------------------------------------------


class Planning(NamedTuple):
    """What the planning stage ends with: the tasks to run, an answer written instead of a plan, or ``failed``
    (the plan was still invalid after the re-plan; ``PlanResult.plan_problems`` says why)."""

    tasks: list[Task]
    answer: str = ""
    failed: bool = False


def _plan(req: Request, result: PlanResult) -> Gen:
    """A :class:`Planning`; ``result`` gets the replans and the problems of the last rejected plan. An invalid
    plan goes back once with its problems; a reply with no JSON at all is the answer (the model chose to
    answer the request itself, as an empty plan does; JARVIS answers such requests by chit-chat too)."""
    messages = _planning_messages(req)
    for attempt in (1, 2):
        result.replans = attempt - 1
        reply = yield from _call(req, messages, stream=False)
        try:
            parsed = parse_plan(reply.text, finish_reason=reply.finish_reason)
            tasks, problems = validate_plan(parsed.items, req.tools, max_tasks=req.settings.max_tasks,
                                            files=req.files)
        except PlanFeedback as feedback:
            answer = prose_answer(reply.text) if feedback.prose else ""
            if answer:
                return Planning([], answer)
            parsed, tasks, problems = None, [], feedback.problems
        if not problems:
            if tasks:
                yield PlanEvent(req.redacted(_summary(tasks)), tasks=tuple(req.redacted(t.as_dict()) for t in tasks),
                                attempt=attempt,
                                written=tuple(req.redacted(dict(i)) for i in (parsed.items if parsed else ())))
            return Planning(tasks, parsed.answer if parsed else "")
        result.plan_problems = problems
        if attempt == 2:
            yield ErrorEvent("planning failed: the plan was invalid twice: " + "; ".join(problems), "PlanError")
            return Planning([], failed=True)
        yield ErrorEvent("the plan was sent back: " + "; ".join(problems), "PlanFeedback")
        messages = [*messages, {"role": "assistant", "content": reply.text or "(empty reply)"},
                    {"role": "user", "content": req.prompts.render(
                        "plan_feedback", problems="\n".join(f"- {p}" for p in problems))}]
    raise AssertionError("unreachable")  # pragma: no cover


def _planning_messages(req: Request) -> list[Message]:
    available = "\n".join(_describe(tool) for tool in req.tools.values()) or "(none)"
    system = req.prompts.render("plan_system", bot_name=req.settings.bot_name, date=_dt.date.today().isoformat(),
                                max_tasks=req.settings.max_tasks, available_tasks=available)
    return [{"role": "system", "content": system}, *planning_demos(req.prompts, req.tools), *req.history,
            {"role": "user", "content": req.query}]


def _answer_without_plan(req: Request, problems: Sequence[str]) -> Gen:
    """The answer when planning failed: the LLM answers without tools, told why; an empty reply gets a message
    that says planning failed and why (streamed as one token event, as the LLM's answer would be)."""
    reason = problem_reason(problems)
    messages = plan_failed_messages(req.prompts, req.query, req.history, req.settings.bot_name, reason)
    answer = (yield from _call(req, messages, req.stream)).text.strip()
    if not answer:
        answer = req.prompts.render("plan_failed", reason=reason)
        if req.stream:
            yield TokenEvent(req.redacted(answer))
    return answer


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
            reason = req.redacted(chosen.reason)
            yield SelectionEvent(f"task {task.id} ({task.task}): model {chosen.model}: {reason}",
                                 task_id=task.id, model=chosen.model, reason=reason)
    return assignments


# ---- stage 3: execution -------------------------------------------------------------------


def _execute(req: Request, tasks: Sequence[Task], assignments: Mapping[int, Assignment]) -> Gen:
    context = ToolContext(session_id=req.session_id, llm=req.llm, approve=req.approve, budget=req.budget,
                          usage=req.usage, redactor=req.redactor)
    dag = DagRun(tasks, req.tools, assignments=assignments, max_workers=req.settings.max_workers,
                 timeout=req.settings.task_timeout, context=context, pool=req.pool,
                 prompts=load_prompts(detect_language(req.query)))
    remove = req.control.on_cancel(dag.cancel) if req.control is not None else None  # cancel() stops the DAG
    try:
        yield from dag.events()
    finally:
        if remove is not None:
            remove()
    results: dict[int, TaskResult] = dag.results
    return results


# ---- LLM calls ------------------------------------------------------------------------------


def _call(req: Request, messages: list[Message], stream: bool) -> Gen:
    """One of the planner's own LLM calls (planning, a direct answer, the response), through the engine's
    driver: streamed as token events when asked (the configured secrets hidden), recorded, ended at once by
    ``cancel()``."""
    response = yield from llm_reply(req.llm, messages, control=req.control, stream=stream, redactor=req.redactor)
    req.record(response)
    return response
