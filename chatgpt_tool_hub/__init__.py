"""chatgpt_tool_hub: a tool engine that gives an LLM hands and feet.

The public API in one import::

    from chatgpt_tool_hub import AppFactory, ScriptedLLM, tool

    app = AppFactory().create_app(llm=ScriptedLLM(["AI: hello"]), no_default=True)
    print(app.ask("hi"))

Importing this package is light: every name below is loaded on first use, and
none of them imports torch, transformers or an LLM client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "1.0.0"

# name -> the module that defines it (loaded on first access)
_PUBLIC = {
    "AppFactory": "chatgpt_tool_hub.apps.factory",
    "App": "chatgpt_tool_hub.apps.app",
    "PlannerApp": "chatgpt_tool_hub.apps.planner",
    "load_app": "chatgpt_tool_hub.apps",
    "Tool": "chatgpt_tool_hub.tools.base",
    "ToolResult": "chatgpt_tool_hub.tools.base",
    "tool": "chatgpt_tool_hub.tools.base",
    "main_tool_register": "chatgpt_tool_hub.tools.tool_register",
    "ScriptedLLM": "chatgpt_tool_hub.testing",
    "RunResult": "chatgpt_tool_hub.run.steps",
    "RunUsage": "chatgpt_tool_hub.run.steps",
    "ToolContext": "chatgpt_tool_hub.run.context",
    "parse_output": "chatgpt_tool_hub.engine.parser",
    "Action": "chatgpt_tool_hub.engine.parser",
    "Finish": "chatgpt_tool_hub.engine.parser",
    "Event": "chatgpt_tool_hub.events",
    "ThoughtEvent": "chatgpt_tool_hub.events",
    "ActionEvent": "chatgpt_tool_hub.events",
    "ObservationEvent": "chatgpt_tool_hub.events",
    "TokenEvent": "chatgpt_tool_hub.events",
    "AnswerEvent": "chatgpt_tool_hub.events",
    "ErrorEvent": "chatgpt_tool_hub.events",
    "ToolHubError": "chatgpt_tool_hub.errors",
    "ConfigError": "chatgpt_tool_hub.errors",
    "UserError": "chatgpt_tool_hub.errors",
    "OutputParserError": "chatgpt_tool_hub.errors",
}

__all__ = ["__version__", "AppFactory", "App", "PlannerApp", "load_app", "Tool", "ToolResult", "tool",
           "main_tool_register", "ScriptedLLM", "RunResult", "RunUsage", "ToolContext", "parse_output",
           "Action", "Finish", "Event", "ThoughtEvent", "ActionEvent", "ObservationEvent", "TokenEvent",
           "AnswerEvent", "ErrorEvent", "ToolHubError", "ConfigError", "UserError", "OutputParserError"]

if TYPE_CHECKING:
    from .apps import load_app
    from .apps.app import App
    from .apps.factory import AppFactory
    from .apps.planner import PlannerApp
    from .engine.parser import Action, Finish, parse_output
    from .errors import ConfigError, OutputParserError, ToolHubError, UserError
    from .events import ActionEvent, AnswerEvent, ErrorEvent, Event, ObservationEvent, ThoughtEvent, TokenEvent
    from .run.context import ToolContext
    from .run.steps import RunResult, RunUsage
    from .testing import ScriptedLLM
    from .tools.base import Tool, ToolResult, tool
    from .tools.tool_register import main_tool_register


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'chatgpt_tool_hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
