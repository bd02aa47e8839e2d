"""``StandaloneTool``: one tool built alone by ``AppFactory.create_tool``, run the way an app runs it.

``tool-hub run`` and other front ends that run a tool without an LLM get the
tool with an app context of its own (settings, workspace, redactor, HTTP
settings) and call it through :func:`~chatgpt_tool_hub.engine.dispatch.dispatch`,
so its output is cleaned as every observation is: control characters stripped,
configured secrets replaced by ``***``, long output cut to head and tail, and a
failure reported as ``status="error"`` whether the tool raised it or told it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine.dispatch import Outcome, dispatch, drive
from ..engine.prompts import detect_language, load_prompts
from ..tools.base import Tool, ToolContext
from ..tools.context import AppContext
from .settings import ResolvedConfig

__all__ = ["StandaloneTool"]


@dataclass
class StandaloneTool:
    """A tool, the context it was built with and the settings they came from; ``close()`` (or ``with``)
    releases it and whatever was opened with it (an MCP server's connection)."""

    tool: Tool
    context: AppContext
    config: ResolvedConfig
    owned: list[Tool] = field(default_factory=list)  # closed with it (the tool, its plugin siblings)

    @property
    def name(self) -> str:
        return self.tool.name

    def run(self, tool_input: Any = "") -> Outcome:
        """Call the tool once through ``dispatch``: the outcome's ``observation`` is the cleaned output, its
        ``status`` is ``"error"`` (and ``error`` says why) when the call failed."""
        language = detect_language(tool_input if isinstance(tool_input, str) else "",
                                   str(self.config.get("prompt_language") or "auto"))
        call = dispatch({self.tool.name: self.tool}, self.tool.name, tool_input,
                        ToolContext(redactor=self.context.redactor), prompts=load_prompts(language),
                        max_chars=int(self.config.get("observation_max_chars") or 0), start=None, end=None)
        outcome: Outcome = drive(call, None)
        return outcome

    def close(self) -> None:
        for tool in self.owned:
            try:
                tool.close()
            except Exception:  # noqa: BLE001 - closing one must not keep the others open
                pass
        self.owned = []

    def __enter__(self) -> "StandaloneTool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
