"""Apps: ``AppFactory`` builds an ``App`` (ReAct) or a ``PlannerApp`` (HuggingGPT mode) with one context each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .app import App
from .factory import AppFactory

if TYPE_CHECKING:
    from .planner import PlannerApp

__all__ = ["AppFactory", "App", "PlannerApp", "ConversationApp", "AppContext", "load_app"]


def __getattr__(name: str) -> Any:  # the planner app and its pipeline load on first use
    if name == "PlannerApp":
        from .planner import PlannerApp

        return PlannerApp
    if name == "ConversationApp":
        from .conversation import ConversationApp

        return ConversationApp
    if name == "AppContext":
        from ..tools.context import AppContext

        return AppContext
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_app(app_type: str = "victorinox", tools_list: Any = None, **kwargs: Any) -> App | PlannerApp:
    """chatgpt-tool-hub 0.3's entry point: ``AppFactory().create_app(...)`` in one call."""
    return AppFactory().create_app(app_type=app_type, tools_list=tools_list, **kwargs)
