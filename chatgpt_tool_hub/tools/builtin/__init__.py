"""Built-in tools, registered through the same entry-point door as plugins.

Factories import their modules only when a tool is built.
"""

from __future__ import annotations

from typing import Any


def _python_factory(**kwargs: Any):
    from .python_tool import PythonTool

    return PythonTool.from_config(**kwargs)


def register_tools(registry) -> None:
    """Entry point ``chatgpt_tool_hub.tools:builtin``."""
    registry.register_tool("python", _python_factory, [], default=True,
                           description="Run Python code in a separate process and see what it prints.")
