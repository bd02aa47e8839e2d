"""Planner events: the core event types with the planner's extra fields.

Each subclasses the core event it is (so ``kind`` and ``isinstance`` checks
written for the ReAct engine keep working) and adds what the planner knows:
the plan, the chosen model, the task id and status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..events import ActionEvent, ObservationEvent, ThoughtEvent

__all__ = ["PlanEvent", "SelectionEvent", "TaskStartEvent", "TaskEndEvent"]


@dataclass(frozen=True)
class PlanEvent(ThoughtEvent):
    """The validated plan (``kind == "thought"``); ``text`` is a readable summary. ``written``: the same tasks
    as the LLM wrote them (its task names, its arguments before request files were copied in), in order."""

    tasks: tuple[dict[str, Any], ...] = ()
    attempt: int = 1
    written: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class SelectionEvent(ThoughtEvent):
    """A model was chosen for a task (``kind == "thought"``)."""

    task_id: int = -1
    model: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class TaskStartEvent(ActionEvent):
    """A task started (``kind == "action"``); ``tool_input`` is what the tool received."""

    task_id: int = -1
    model: str | None = None
    started: float = 0.0


@dataclass(frozen=True)
class TaskEndEvent(ObservationEvent):
    """A task reached a final status (``kind == "observation"``); ``observation`` is its output or why not."""

    task_id: int = -1
    status: str = "ok"
    ended: float = 0.0
