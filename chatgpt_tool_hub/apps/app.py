"""``App``: the ReAct app (``app_type="victorinox"``).

Asking, sessions, callbacks and files come from
:class:`~chatgpt_tool_hub.engine.conversation.ConversationApp`; this class adds
the ReAct engine, live tool and subtree registration, and the settings the
terminal changes. Every run builds a fresh engine and keeps its state in its
own ``RunState``, so one App serves concurrent questions from many threads.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Sequence

from ..engine.budget import Budget
from ..engine.conversation import DEFAULT_SESSION, Callback, ConversationApp, FileAnnouncer
from ..engine.loop import Engine, EngineSettings
from ..errors import UserError
from ..llm.base import LLM, Message
from ..tools.base import Tool

__all__ = ["App", "DEFAULT_SESSION"]

log = logging.getLogger("chatgpt_tool_hub.apps")


class App(ConversationApp):
    """A question-answering app over an LLM and tools, driven by the ReAct engine."""

    app_type = "victorinox"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, settings: EngineSettings | None = None,
                 memory_max_tokens: int = 2000, approve: Callable[[str, Any], bool] | None = None,
                 callbacks: Sequence[Callback] = (), llm_builder: Callable[[str], LLM] | None = None,
                 config: dict[str, Any] | None = None, registry: Any = None,
                 tool_config: dict[str, Any] | None = None,
                 budget_limits: tuple[int | None, int | None] = (None, None),
                 file_announcer: FileAnnouncer | None = None, secrets: Sequence[str] = ()):
        super().__init__(llm, tools, memory_max_tokens=memory_max_tokens, approve=approve, callbacks=callbacks,
                         file_announcer=file_announcer)
        self.settings = settings or EngineSettings()
        self.config = dict(config or {})  # resolved settings without secrets
        self._llm_builder = llm_builder
        self._registry = registry
        self._tool_config = dict(tool_config or {})  # full values (with keys) for building tools; never shown
        self.budget_limits = budget_limits  # (max LLM calls, max tool calls) per question, tree-wide
        self.secrets: list[str] = list(secrets)  # configured key values, redacted from observations

    @property
    def prompt_language(self) -> str:  # type: ignore[override]
        return self.settings.prompt_language

    # ---- tools and subtrees --------------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        with self._lock:
            self._tools[tool.name] = tool

    def unregister(self, name: str) -> None:
        """Remove a tool or subtree; the next question no longer sees it."""
        with self._lock:
            tool = self._tools.pop(name, None)
        if tool is None:
            raise UserError(f"no tool named {name!r} in this app; it has: {', '.join(self.tool_names) or '(none)'}")
        tool.close()

    def register_subtree(self, name: str, tools: Sequence[str | Tool], description: str = "", *,
                         llm: LLM | None = None, think_depth: int | None = None) -> Tool:
        """Add a tool-in-tool subtree: a sub-agent with its own tools (names or ``Tool`` objects).

        ``llm=None`` uses the LLM configured with ``<name>_`` prefixed keys
        (e.g. ``browser_model_name``) when there are any, else the parent's.
        """
        from ..tools.subtree import SubtreeTool, subtree_llm_from_config

        if not tools:
            raise UserError(f"subtree {name!r} needs at least one tool")
        built = [t if isinstance(t, Tool) else self._build_tool(t) for t in tools]
        prefix = name.replace("-", "_")
        depth = think_depth if think_depth is not None else self._tool_config.get(f"{prefix}_think_depth",
                                                                                  self.settings.think_depth)
        subtree = SubtreeTool(name, description, built, llm=llm or subtree_llm_from_config(name, self._tool_config),
                              think_depth=int(depth), settings=self.settings,
                              max_nesting_depth=int(self._tool_config.get("max_nesting_depth", 3)))
        self.add_tool(subtree)
        return subtree

    def _build_tool(self, name: str) -> Tool:
        if self._registry is None:
            raise UserError(f"this app has no tool registry: pass Tool objects, not {name!r}")
        return self._registry.build(name, **self._tool_config)

    # ---- settings the terminal changes -------------------------------------------------------

    def set_think_depth(self, depth: int) -> None:
        if not isinstance(depth, int) or depth < 0:
            raise UserError("think depth must be a whole number >= 0")
        with self._lock:
            self.settings = replace(self.settings, think_depth=depth)

    def set_model(self, model_name: str) -> None:
        if self._llm_builder is None:
            raise UserError("this app was given a ready LLM object; build a new app to change the model")
        llm = self._llm_builder(model_name)
        with self._lock:
            self.llm = llm

    # ---- the engine -------------------------------------------------------------------------------

    def _execute(self, query: str, history: list[Message], session_id: str, stream: bool):
        with self._lock:
            budget = Budget(max_llm_calls=self.budget_limits[0], max_tool_calls=self.budget_limits[1])
            engine = Engine(self.llm, self._tools.values(), self.settings, approve=self.approve, budget=budget,
                            secrets=self.secrets)
        return (yield from engine.iter_run(query, history, stream=stream, session_id=session_id))

    def __repr__(self) -> str:
        return f"<App {self.app_type} tools={self.tool_names}>"
