"""Tools: the ``Tool`` base, the ``@tool`` decorator and registries."""

from .base import FunctionTool, Tool, tool
from .registry import ENTRY_POINT_GROUP, ToolRegistry
from .tool_register import main_tool_register

__all__ = ["Tool", "FunctionTool", "tool", "ToolRegistry", "ENTRY_POINT_GROUP", "main_tool_register"]
