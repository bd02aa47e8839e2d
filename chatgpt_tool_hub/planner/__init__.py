"""HuggingGPT mode: plan a task DAG, select models, run it in parallel, answer.

``PlannerApp`` offers the ReAct ``App``'s ask / run / stream / aask / reset
API. Nothing here imports torch; the ``"embedding"`` selection mode loads its
model on first use (``pip install "chatgpt-tool-hub[planner]"``).
"""

from .app import PlannerApp
from .catalog import Catalog, ModelInfo, load_catalog
from .events import PlanEvent, SelectionEvent, TaskEndEvent, TaskStartEvent
from .plan import PlanError, Task, parse_plan, validate_plan
from .results import Assignment, PlanResult, TaskResult

__all__ = [
    "PlannerApp",
    "PlanResult",
    "TaskResult",
    "Assignment",
    "PlanError",
    "Task",
    "parse_plan",
    "validate_plan",
    "Catalog",
    "ModelInfo",
    "load_catalog",
    "PlanEvent",
    "SelectionEvent",
    "TaskStartEvent",
    "TaskEndEvent",
]
