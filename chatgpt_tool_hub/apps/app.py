"""``App``: the ReAct app (``app_type="victorinox"``).

Asking, sessions, callbacks, files and cancelling come from
:class:`~chatgpt_tool_hub.apps.conversation.ConversationApp`; this class adds
the ReAct engine, live tool and subtree registration, and the settings the
terminal changes. Every run builds a fresh engine and keeps its state in its
own ``RunState``, so one App serves concurrent questions from many threads;
``arun`` / ``astream`` drive the engine on the event loop (``Engine.aiter_run``).
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from dataclasses import replace
from typing import Any, AsyncGenerator, Callable, Generator, Sequence

from ..config import tool_prefix
from ..engine.loop import Engine, EngineSettings
from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..run.control import RunBudget
from ..run.external import ExternalTurn
from ..run.steps import RunResult
from ..tools.base import Tool
from ..tools.context import AppContext
from .conversation import DEFAULT_SESSION, Callback, ConversationApp, FileAnnouncer
from .runs import Final

__all__ = ["App", "DEFAULT_SESSION"]

log = logging.getLogger("chatgpt_tool_hub.apps")


class App(ConversationApp[RunResult]):
    """A question-answering app over an LLM and tools, driven by the ReAct engine."""

    app_type = "victorinox"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, settings: EngineSettings | None = None,
                 memory_max_tokens: int = 2000, approve: Callable[[str, Any], bool] | None = None,
                 callbacks: Sequence[Callback] = (), context: AppContext | None = None,
                 config: dict[str, Any] | None = None,
                 budget_limits: tuple[int | None, int | None] = (None, None),
                 file_announcer: FileAnnouncer | None = None, max_sessions: int | None = None,
                 session_ttl_s: float | None = None):
        super().__init__(llm, tools, memory_max_tokens=memory_max_tokens, approve=approve, callbacks=callbacks,
                         file_announcer=file_announcer, context=context, budget_limits=budget_limits,
                         max_sessions=max_sessions, session_ttl_s=session_ttl_s)
        self.settings = settings or EngineSettings()
        self.config = dict(config or {})  # resolved settings without secrets
        from .schedule import resume_schedules

        resume_schedules(self)  # schedules kept in the workspace run again after a restart

    @property
    def prompt_language(self) -> str:  # type: ignore[override]
        return self.settings.prompt_language

    # ---- tools and subtrees --------------------------------------------------------------

    def register_subtree(self, name: str, tools: Sequence[str | Tool], description: str = "", *,
                         llm: LLM | None = None, think_depth: int | None = None) -> Tool:
        """Add a tool-in-tool subtree: a sub-agent with its own tools (names or ``Tool`` objects).

        ``llm=None`` uses the LLM configured with ``<name>_`` prefixed keys
        (e.g. ``browser_model_name``) when there are any, else the parent's.
        """
        from ..tools.subtree import SubtreeTool, subtree_llm

        if not tools:
            raise UserError(f"subtree {name!r} needs at least one tool")
        context = self.context
        if context.registry is None and any(not isinstance(t, Tool) for t in tools):
            raise UserError("this app has no tool registry: pass Tool objects, not tool names")
        built = [t if isinstance(t, Tool) else context.build_tool(t) for t in tools]
        settings = context.settings
        depth = think_depth if think_depth is not None else settings.get(f"{tool_prefix(name)}think_depth",
                                                                         self.settings.think_depth)
        subtree = SubtreeTool(name, description, built, llm=llm or subtree_llm(name, context),
                              think_depth=int(depth), settings=self.settings,
                              max_nesting_depth=settings.get("max_nesting_depth", 3))
        self.add_tool(subtree)
        return subtree

    # ---- settings the terminal changes -------------------------------------------------------

    def set_think_depth(self, depth: int) -> None:
        if not isinstance(depth, int) or depth < 0:
            raise UserError("think depth must be a whole number >= 0")
        with self._lock:
            self.settings = replace(self.settings, think_depth=depth)

    def set_model(self, model_name: str) -> None:
        if self.context.llm_builder is None:
            raise UserError("this app was given a ready LLM object; build a new app to change the model")
        llm = self.context.build_llm({"model_name": model_name})
        with self._lock:
            self.llm = llm

    # ---- scheduled questions (apps/schedule.py, docs/schedules.md) -----------------------------------

    def schedule(self, when: str, question: str, *, session_id: str = DEFAULT_SESSION, name: str | None = None,
                 remember: bool = True, on_result: Callable[[Any, Any], None] | None = None) -> Any:
        """Ask ``question`` on a time rule (``"every 10m"``, ``"*/5 * * * *"``); kept in the workspace."""
        from .schedule import scheduler_for

        return scheduler_for(self).add(when, question, session_id=session_id, name=name, remember=remember,
                                       on_result=on_result)

    def schedules(self) -> list[Any]:
        from .schedule import scheduler_for

        return scheduler_for(self).list()

    def unschedule(self, schedule_id: str) -> Any:
        from .schedule import scheduler_for

        return scheduler_for(self).remove(schedule_id)

    def close(self) -> None:
        from .schedule import stop_schedules

        stop_schedules(self)  # the scheduler's thread first: it may be asking a question with the tools
        super().close()

    # ---- the engine -------------------------------------------------------------------------------

    takes_external = True

    def _engine(self, budget: RunBudget, llm: LLM, session_id: str | None = None,
                external: ExternalTurn | None = None) -> Engine:
        with self._lock:
            tools = list(self._tools.values())
        if session_id is not None:  # tools a tool made for this session (tool-maker), unless a name is taken
            names = {t.name for t in tools}
            for owner in list(tools):
                offered = getattr(owner, "session_tools", None)
                for made in (offered(session_id) if offered is not None else ()):
                    if made.name not in names:
                        names.add(made.name)
                        tools.append(made)
        return Engine(llm, tools, self.settings, approve=self.approve, budget=budget,
                      redactor=self.context.redactor, external=external)

    def _execute(self, query: str, history: list[Message], session_id: str, stream: bool, budget: RunBudget,
                 llm: LLM, external: ExternalTurn | None = None) -> Generator[Event, None, RunResult]:
        engine = self._engine(budget, llm, session_id, external)
        return (yield from engine.iter_run(query, history, stream=stream, session_id=session_id))

    async def _aexecute(self, query: str, history: list[Message], session_id: str, stream: bool,
                        budget: RunBudget, llm: LLM, external: ExternalTurn | None = None) -> AsyncGenerator[Any, None]:
        engine = self._engine(budget, llm, session_id, external)
        async with aclosing(engine.aiter_run(query, history, stream=stream, session_id=session_id,
                                             executor=self._async_executor())) as items:
            async for item in items:
                yield Final(item) if isinstance(item, RunResult) else item

    def __repr__(self) -> str:
        return f"<App {self.app_type} tools={self.tool_names}>"
