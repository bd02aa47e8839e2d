"""Event-driven DAG execution: a task starts the moment its dependencies finish.

No polling. Every state change (a task ends, fails, times out, the run is
cancelled) happens under one lock in the thread that caused it, and starts
whatever became ready right there. Events go into a queue that the caller's
thread reads (``DagRun.events()`` blocks on it, it never sleeps in a loop).

Ready tasks wait in a priority queue: when more tasks are ready than workers
are free, the one with the longest remaining path starts first (critical-path
priority: the sum of expected durations along the longest chain of tasks that
wait on it, itself included; without duration estimates every task counts 1;
ties by id). ``order="fifo"`` starts them in the order they became ready.

Tasks run on an elastic pool of daemon threads (``workers.DaemonPool``), at
most ``max_workers`` at a time. A worker whose task ends runs the first task
that became ready itself (no queue hop, no thread wake-up); the pool gets only
the others. One watchdog per run (only when there is a timeout), itself a pool
job, sleeps on the lock's condition until the nearest deadline, and is woken
only when a task starts that is due before that. A
task past ``timeout`` is reported as ``timeout`` and its dependents are
skipped; its thread may linger, but it no longer holds a worker slot, cannot
block the answer, and cannot keep the interpreter from exiting.

A task's result is ``untrusted`` when its tool reads content nobody here
controls (``reads_untrusted``) or a task it depends on had such a result: its
input may carry that content, so its output may too.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import queue
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..config import SETTINGS
from ..engine.dispatch import clean_observation, dispatch, drive
from ..engine.prompts import PromptSet, load_prompts
from ..events import Event
from ..run.control import RunBudget
from ..run.taint import EgressPolicy, RunTaint
from ..tools.base import Tool, ToolContext
from .binding import FILE_KINDS, UnresolvedPlaceholder, locate, resource_value, substitute, tool_input, workspace_roots
from .catalog import supports_model_selection
from .events import TaskEndEvent, TaskStartEvent
from .plan import Task
from .results import Assignment, TaskResult
from .workers import DaemonPool

__all__ = ["DagRun", "remaining_paths", "ORDERS"]

log = logging.getLogger("chatgpt_tool_hub.planner")
_DONE = object()
ORDERS = ("critical-path", "fifo")
# expected seconds per task: a mapping by task id, or a function of the task (None: no estimate)
Durations = Mapping[int, float] | Callable[[Task], float | None]


def remaining_paths(tasks: Sequence[Task], durations: Durations | None = None) -> dict[int, float]:
    """For each task, the length of the longest chain that starts with it and runs through its dependents.

    A chain's length is the sum of its tasks' expected durations. Tasks
    without an estimate count as the mean of the known ones; with no estimate
    at all, every task counts 1 (the chain's number of tasks).
    """
    by_id = {t.id: t for t in tasks}
    estimates: dict[int, float] = {}
    for t in tasks:
        value = durations(t) if callable(durations) else (durations or {}).get(t.id)
        if value is not None and float(value) >= 0:
            estimates[t.id] = float(value)
    fallback = sum(estimates.values()) / len(estimates) if estimates else 1.0
    children: dict[int, list[int]] = {i: [] for i in by_id}
    unmet_children = {i: 0 for i in by_id}
    for t in tasks:
        for dep in t.dep:
            children[dep].append(t.id)
            unmet_children[dep] += 1
    # from the sinks back up (Kahn's algorithm on the reversed graph): no recursion, any depth
    todo = [i for i, n in unmet_children.items() if n == 0]
    path: dict[int, float] = {}
    while todo:
        task_id = todo.pop()
        path[task_id] = estimates.get(task_id, fallback) + max((path[c] for c in children[task_id]), default=0.0)
        for dep in by_id[task_id].dep:
            unmet_children[dep] -= 1
            if unmet_children[dep] == 0:
                todo.append(dep)
    for task_id in by_id:  # a cycle (never in a validated plan): those tasks get their own duration
        path.setdefault(task_id, estimates.get(task_id, fallback))
    return path


class DagRun:
    """One execution of a validated plan. ``start()``, then read ``events()`` until it ends.

    ``durations``: expected seconds per task (a mapping by id or a function of
    the task), for the critical-path order; ``order``: ``"critical-path"`` (the
    default) or ``"fifo"``. ``launched`` lists task ids in the order they started.
    """

    def __init__(self, tasks: Sequence[Task], tools: Mapping[str, Tool], *,
                 assignments: Mapping[int, Assignment] | None = None,
                 max_workers: int = SETTINGS["planner_max_workers"].default,
                 timeout: float | None = None, context: ToolContext | None = None, pool: DaemonPool | None = None,
                 prompts: PromptSet | None = None, durations: Durations | None = None,
                 order: str = "critical-path"):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
        self.tasks = {t.id: t for t in tasks}
        self.tools = dict(tools)
        self.assignments = dict(assignments or {})
        self.max_workers = max(1, int(max_workers))
        self.timeout = timeout if timeout and timeout > 0 else None
        # nested engines (subtree tools) report into this run's event stream; approver, budget, redactor
        # and the run's taint state (shared by every task) travel in the context to the one dispatch function
        given = context or ToolContext()
        self.context = replace(given, emit=(given.emit if given.emit else self.post), taint=_taint(given))
        self.prompts = prompts or load_prompts("en")
        self.results: dict[int, TaskResult] = {
            t.id: TaskResult(t.id, t.task, model=self._model(t.id)) for t in tasks}
        self._children: dict[int, list[int]] = {i: [] for i in self.tasks}
        for t in tasks:
            for dep in t.dep:
                self._children[dep].append(t.id)
        self._unmet = {t.id: len(t.dep) for t in tasks}
        self.order = order
        self.priorities = remaining_paths(tasks, durations)  # the longest remaining path of each task
        self._arrival = itertools.count()  # FIFO: the order tasks became ready
        self._ready: list[tuple[float, int, int]] = []  # a heap of (key, tie, task id)
        for task_id in sorted(i for i, n in self._unmet.items() if n == 0):
            self._make_ready(task_id)
        self.launched: list[int] = []
        self._running: set[int] = set()
        self._pending = len(self.results)  # tasks without a final status
        self._deadlines: dict[int, float] = {}
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the watchdog sleeps on it
        self._watch_at = -math.inf  # the deadline the watchdog sleeps until (inf: none; -inf: not asleep yet)
        self._pool = pool or DaemonPool()
        self._own_pool = pool is None
        self._finished = threading.Event()
        self._started = False
        self._t0 = 0.0

    # ---- public --------------------------------------------------------------------

    def start(self) -> "DagRun":
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._t0 = time.perf_counter()
            self._launch_ready()
            self._check_done()
            if self.timeout is not None and not self._finished.is_set():
                self._pool.submit(self._watchdog)  # a pool job: a warm thread, no thread start per run
        return self

    def events(self) -> Iterator[Event]:
        """Yield task events as they happen; returns when every task has a final status."""
        self.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                yield item
        finally:
            if not self._finished.is_set():  # the reader went away: do not leave tasks behind
                self.cancel("the run was abandoned")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every task has a final status (for callers that do not read events)."""
        self.start()
        return self._finished.wait(timeout)

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        """Stop at once: waiting tasks never start, running ones are abandoned (their result is ignored)."""
        with self._lock:
            if self._finished.is_set():
                return
            self._ready.clear()
            now = self._now()
            for result in self.results.values():
                if not result.done:
                    self._settle(result, "cancelled", now, reason=reason)
            self._check_done()

    def post(self, event: Event) -> None:
        """Add an event to the stream (thread-safe); tools' nested engines use it."""
        self._queue.put(event)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    # ---- scheduling (always under the lock) ----------------------------------------------

    def _make_ready(self, task_id: int) -> None:
        """Queue a task whose dependencies are done: longest remaining path first (ties: lower id), or FIFO."""
        if self.order == "fifo":
            entry = (float(next(self._arrival)), task_id, task_id)
        else:
            entry = (-self.priorities[task_id], task_id, task_id)
        heapq.heappush(self._ready, entry)

    def _launch_ready(self, keep: bool = False) -> int | None:
        """Start ready tasks, best first, while workers are free. ``keep`` (a worker thread whose task just
        ended): the first one is returned for that thread to run itself, the rest go to the pool."""
        kept = None
        while self._ready and len(self._running) < self.max_workers:
            task_id = heapq.heappop(self._ready)[2]
            result = self.results[task_id]
            if result.done:
                continue
            result.status = "running"
            result.started = self._now()
            self._running.add(task_id)
            self.launched.append(task_id)
            if self.timeout is not None:
                due = self._deadlines[task_id] = result.started + self.timeout
                if due < self._watch_at:  # only when it is due before what the watchdog sleeps until
                    self._wake.notify()
            if keep and kept is None:
                kept = task_id
            else:
                self._pool.submit(functools.partial(self._work, task_id))
        return kept

    def _settle(self, result: TaskResult, status: str, now: float, *, output: str | None = None,
                error: str | None = None, reason: str | None = None, value: str | None = None,
                untrusted: bool = False) -> None:
        """Give a task its final status, free its slot, tell the reader."""
        result.status = status  # type: ignore[assignment]
        result.ended = now
        if result.started is None:
            result.started = now
        result.output, result.error, result.reason = output, error, reason
        result.untrusted = untrusted and status == "ok"
        if status == "ok":
            tool = self.tools[result.tool]
            kind = getattr(tool, "output_kind", "text")
            roots = workspace_roots([tool])
            try:
                result.resource = resource_value(output or "", kind, inputs=result.args.values(), roots=roots,
                                                 value=value)
                result.file = locate(result.resource, roots) if kind in FILE_KINDS else None
            except Exception:  # never leave a task half-settled: its dependents and the reader wait on it
                log.warning("could not read the resource of task %s", result.id, exc_info=True)
                result.resource, result.file = output or "", None
        self._running.discard(result.id)
        self._deadlines.pop(result.id, None)
        self._pending -= 1
        shown = output if status == "ok" else f"{status}: {error or reason or ''}"
        self._queue.put(TaskEndEvent(result.tool, shown or "", task_id=result.id, status=status, ended=now))

    def _after(self, task_id: int, keep: bool = False) -> int | None:
        """A task settled: release or skip its dependents, start what is ready (``keep``: see
        ``_launch_ready``)."""
        result = self.results[task_id]
        if result.status == "ok":
            for child in self._children[task_id]:
                self._unmet[child] -= 1
                if self._unmet[child] == 0 and not self.results[child].done:
                    self._make_ready(child)
        else:
            self._skip_dependents(task_id)
        kept = self._launch_ready(keep)
        self._check_done()
        return kept

    def _skip_dependents(self, task_id: int) -> None:
        now = self._now()
        origin = self.results[task_id]
        why = origin.error or origin.reason or origin.status
        todo = [(child, task_id) for child in self._children[task_id]]
        while todo:
            child, parent = todo.pop()
            result = self.results[child]
            if result.done:
                continue
            if parent == task_id:
                reason = f"task {task_id} ({origin.tool}) {_verb(origin.status)}: {why}"
            else:
                reason = f"it depends on task {parent}, which was skipped"
            self._settle(result, "skipped", now, reason=reason)
            todo.extend((grandchild, child) for grandchild in self._children[child])

    def _check_done(self) -> None:
        if self._pending == 0 and not self._finished.is_set():
            self._finished.set()
            self._queue.put(_DONE)
            self._wake.notify_all()
            if self._own_pool:
                self._pool.close()

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    # ---- callbacks from worker and timer threads ---------------------------------------------

    def _watchdog(self) -> None:
        """Time out running tasks at their deadlines; sleeps until the nearest one (or a change)."""
        with self._lock:
            while not self._finished.is_set():
                now = self._now()
                for task_id in [i for i, due in self._deadlines.items() if due <= now]:
                    result = self.results[task_id]
                    if result.status == "running":
                        self._settle(result, "timeout", now, error=f"no result after {self.timeout:g} s")
                        self._after(task_id)
                if self._finished.is_set():
                    return
                nearest = min(self._deadlines.values(), default=None)
                self._watch_at = math.inf if nearest is None else nearest
                self._wake.wait(None if nearest is None else max(0.0, nearest - self._now()))
                self._watch_at = -math.inf

    def _finish(self, task_id: int, status: str, *, output: str | None = None, error: str | None = None,
                value: str | None = None, untrusted: bool = False) -> int | None:
        """Settle a task that ran; returns a ready task for this thread to run next (or None)."""
        with self._lock:
            result = self.results[task_id]
            if result.status != "running":  # timed out or cancelled meanwhile: the late result is dropped
                log.debug("task %s finished after it was %s; result ignored", task_id, result.status)
                return None
            self._settle(result, status, self._now(), output=output, error=error, value=value,
                         untrusted=untrusted)
            return self._after(task_id, keep=True)

    def _work(self, task_id: int) -> None:
        """A pool job: run the task, then, while one is handed back, the next ready task on this thread (no
        queue hop, no thread wake-up)."""
        next_id: int | None = task_id
        while next_id is not None:
            next_id = self._run(next_id)

    def _run(self, task_id: int) -> int | None:
        task = self.tasks[task_id]
        result = self.results[task_id]
        try:
            tool, model = self._tool_for(task)
            outputs = {dep: self.results[dep].resource or "" for dep in task.dep}  # set: the dependency is ok
            derived = any(self.results[dep].untrusted for dep in task.dep)  # its input may be untrusted content
            args = substitute(task.args, outputs)
            given = tool_input(tool, args)
            if result.status != "running":  # cancelled or timed out before it began (one attribute read)
                return None
            result.args = args
            started = result.started or 0.0

            def start(name: str, shown: Any, depth: int) -> Event:
                return TaskStartEvent(name, shown, depth, task_id=task_id, model=model, started=started)

            calls = dispatch({task.task: tool}, task.task, given, self.context, prompts=self.prompts,
                             max_chars=0, start=start, end=None)
            outcome = drive(calls, self.post)
        except UnresolvedPlaceholder as exc:
            return self._finish(task_id, "failed", error=self._clean(f"not run: {exc}"))
        except BaseException as exc:  # the budget, a bug here (even SystemExit): the task fails, never the run
            log.debug("task %s (%s) raised", task_id, task.task, exc_info=True)
            return self._finish(task_id, "failed", error=self._clean(f"{type(exc).__name__}: {exc}"))
        if outcome.status == "ok":
            return self._finish(task_id, "ok", output=outcome.text, value=outcome.value,
                                untrusted=outcome.untrusted or derived)
        return self._finish(task_id, "failed", error=outcome.error)

    def _clean(self, text: str) -> str:
        return clean_observation(text, self.context.redactor, 0)[0]

    def _tool_for(self, task: Task) -> tuple[Tool, str | None]:
        tool = self.tools[task.task]
        model = self._model(task.id)
        if model and supports_model_selection(tool):
            return tool.with_model(model), model  # type: ignore[attr-defined]
        return tool, model

    def _model(self, task_id: int) -> str | None:
        assignment = self.assignments.get(task_id)
        return assignment.model if assignment else None


def _taint(context: ToolContext) -> RunTaint:
    """The request's taint state: the context's, else its run budget's, else one for this DAG."""
    if context.taint is not None:
        return context.taint
    if isinstance(context.budget, RunBudget):
        return context.budget.taint_with(EgressPolicy())
    return RunTaint()


def _verb(status: str) -> str:
    return {"failed": "failed", "timeout": "timed out", "cancelled": "was cancelled",
            "skipped": "was skipped"}.get(status, status)
