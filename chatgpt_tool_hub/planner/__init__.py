"""HuggingGPT mode's pipeline: plan a task DAG, select models, run it in parallel, answer.

The app that drives it is ``chatgpt_tool_hub.apps.PlannerApp``
(``create_app(app_type="planner")``), with the ReAct ``App``'s ask / run /
stream / aask / reset API. Nothing here imports torch; the ``"embedding"``
selection mode loads its model on first use (``pip install
"chatgpt-tool-hub[planner]"``).
"""

from typing import Any

from .catalog import Catalog, ModelInfo, load_catalog
from .events import PlanEvent, SelectionEvent, TaskEndEvent, TaskStartEvent
from .plan import PlanError, Task, parse_plan, validate_plan
from .results import Assignment, PlanResult, TaskResult

__all__ = [
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


def __getattr__(name: str) -> Any:
    if name == "PlannerApp":  # it lives with the other apps (an app is above the planner it runs)
        raise AttributeError("chatgpt_tool_hub.planner.PlannerApp moved: import it as "
                             "`from chatgpt_tool_hub import PlannerApp` (or chatgpt_tool_hub.apps.PlannerApp)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
