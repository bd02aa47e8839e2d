"""chatgpt-tool-hub compatible default registry.

``main_tool_register`` is a default :class:`ToolRegistry` instance that
discovers the built-in tools and installed tool packages on first use. Apps
copy it when they are created, so later changes never leak into a live app.
"""

from .registry import ToolRegistry

__all__ = ["main_tool_register", "ToolRegistry"]

main_tool_register = ToolRegistry(discover=True)
