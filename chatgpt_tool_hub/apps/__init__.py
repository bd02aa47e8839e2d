"""Apps: ``AppFactory`` builds an ``App`` that answers questions with tools."""

from typing import Any

from .app import App
from .factory import AppFactory

__all__ = ["AppFactory", "App", "load_app"]


def load_app(app_type: str = "victorinox", tools_list: Any = None, **kwargs: Any) -> App:
    """chatgpt-tool-hub 0.3's entry point: ``AppFactory().create_app(...)`` in one call."""
    return AppFactory().create_app(app_type=app_type, tools_list=tools_list, **kwargs)
