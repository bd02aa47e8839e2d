"""What a planner run returns: the plan, model assignments, per-task results, usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..run.steps import RunUsage, ToolStep

__all__ = ["TaskStatus", "TaskResult", "Assignment", "PlanResult", "PlannerStop"]

TaskStatus = Literal["pending", "running", "ok", "failed", "skipped", "timeout", "cancelled"]
# answer: the response to the task results; no_tools: answered without a task (an empty plan, or a planning
# reply in prose); plan_failed: the plan was still invalid after the re-plan, so the LLM answered without tools
# (or, when it gave nothing, a message says why); cancelled: the request was cancelled
PlannerStop = Literal["answer", "no_tools", "plan_failed", "cancelled"]
FINAL_STATUSES = ("ok", "failed", "skipped", "timeout", "cancelled")


@dataclass
class TaskResult:
    """One task's outcome. ``started``/``ended`` are seconds since execution began."""

    id: int
    tool: str
    status: TaskStatus = "pending"
    output: str | None = None       # the tool's text (for file outputs: the text naming the file)
    resource: str | None = None     # what <resource>-N stands for: the file path, or the text
    file: str | None = None         # the output file's full path, when the output is a file that exists
    error: str | None = None        # why it failed or timed out
    reason: str | None = None       # why it was skipped or cancelled
    args: dict[str, Any] = field(default_factory=dict)  # the arguments after substitution
    model: str | None = None
    started: float | None = None
    ended: float | None = None
    # the output is content nobody here controls: the tool reads untrusted content, or its input came from
    # such a result; the response prompt shows it fenced as data
    untrusted: bool = False

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return self.ended - self.started

    @property
    def done(self) -> bool:
        return self.status in FINAL_STATUSES

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "status": self.status, "output": self.output,
                "resource": self.resource, "file": self.file, "error": self.error, "reason": self.reason,
                "args": self.args, "model": self.model, "started": self.started, "ended": self.ended,
                "seconds": self.seconds}


@dataclass(frozen=True)
class Assignment:
    """The model chosen for a task and why; ``candidates`` are the ids that were considered."""

    task_id: int
    tool: str
    model: str | None
    reason: str
    mode: str = "single"            # "llm", "downloads", "embedding" or "single" (nothing to choose)
    candidates: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.model, "reason": self.reason, "mode": self.mode, "candidates": list(self.candidates)}


@dataclass
class PlanResult:
    """What ``PlannerApp.run()`` returns."""

    output: str
    plan: list[dict[str, Any]] = field(default_factory=list)
    assignments: dict[int, Assignment] = field(default_factory=dict)
    tasks: dict[int, TaskResult] = field(default_factory=dict)
    usage: RunUsage = field(default_factory=RunUsage)
    stopped_by: PlannerStop = "answer"
    replans: int = 0                                   # 1 when the first plan was sent back with its problems
    # the problems of the last rejected plan: the first one's when it was sent back, the second one's when
    # planning failed (stopped_by="plan_failed")
    plan_problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def llm_calls(self) -> int:
        return self.usage.llm_calls

    @property
    def steps(self) -> list[ToolStep]:
        """The tasks as engine ``ToolStep`` s, for code written against ``RunResult``."""
        steps = []
        for task in sorted(self.tasks.values(), key=lambda t: (t.started is None, t.started or 0.0, t.id)):
            text = task.output if task.status == "ok" else f"{task.status}: {task.error or task.reason or ''}"
            steps.append(ToolStep(task.tool, task.args, text or "", status="ok" if task.status == "ok" else "error",
                                  seconds=task.seconds or 0.0))
        return steps
