"""Compatibility with chatgpt-tool-hub 0.4's ``get_all_tool_names``."""

from .tool_register import main_tool_register

__all__ = ["get_all_tool_names"]


def get_all_tool_names() -> list[str]:
    """Names of every registered tool (built-in and installed packages)."""
    return main_tool_register.get_registered_tool_names()
