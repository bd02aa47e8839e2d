"""``App``: ask / run / stream over a ReAct engine, with per-session memory.

An App owns its LLM, its tools and its sessions; two apps never share state.
One App serves concurrent questions from several threads: every run builds a
fresh engine and keeps its state in its own ``RunState``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Iterator, Sequence

from ..engine.budget import Budget
from ..engine.loop import Engine, EngineSettings
from ..engine.memory import ConversationMemory, normalize_history, trim_to_budget
from ..engine.prompts import detect_language
from ..engine.steps import RunResult
from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..tools.base import Tool

__all__ = ["App"]

log = logging.getLogger("chatgpt_tool_hub.apps")
Callback = Callable[[Event], None]
DEFAULT_SESSION = "default"


class App:
    """A question-answering app over an LLM and tools (``app_type="victorinox"``)."""

    app_type = "victorinox"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, settings: EngineSettings | None = None,
                 memory_max_tokens: int = 2000, approve: Callable[[str, Any], bool] | None = None,
                 callbacks: Sequence[Callback] = (), llm_builder: Callable[[str], LLM] | None = None,
                 config: dict[str, Any] | None = None, registry: Any = None,
                 tool_config: dict[str, Any] | None = None, budget_limits: tuple[int | None, int | None] = (None, None)):
        self.llm = llm
        self._tools: dict[str, Tool] = {t.name: t for t in tools}
        self.settings = settings or EngineSettings()
        self.memory_max_tokens = memory_max_tokens
        self.approve = approve
        self.callbacks = list(callbacks)
        self.config = dict(config or {})
        self._llm_builder = llm_builder
        self._registry = registry
        self._tool_config = dict(tool_config or {})  # full values (with keys) for building tools; never shown
        self.budget_limits = budget_limits  # (max LLM calls, max tool calls) per question, tree-wide
        self._sessions: dict[str, ConversationMemory] = {}
        self._lock = threading.RLock()

    # ---- tools ----------------------------------------------------------------

    @property
    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

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

    # ---- settings the terminal changes -------------------------------------------

    def set_think_depth(self, depth: int) -> None:
        if not isinstance(depth, int) or depth < 0:
            raise UserError("think depth must be a whole number >= 0")
        with self._lock:
            self.settings = _replace(self.settings, think_depth=depth)

    def set_model(self, model_name: str) -> None:
        if self._llm_builder is None:
            raise UserError("this app was given a ready LLM object; build a new app to change the model")
        llm = self._llm_builder(model_name)
        with self._lock:
            self.llm = llm

    # ---- asking ------------------------------------------------------------------------

    def ask(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> str:
        """Answer ``query``. ``chat_history`` (role/content dicts) replaces the app's own memory.

        ``files`` (paths of images or WAV audio) are copied into the workspace and
        announced to the model before the question.
        """
        return self.run(query, chat_history, session_id=session_id, files=files).output

    def run(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str = DEFAULT_SESSION, callbacks: Sequence[Callback] = (),
            files: Sequence[Any] = ()) -> RunResult:
        """Answer ``query`` and return everything that happened."""
        gen = self._iter(query, chat_history, session_id, stream=False, files=files)
        all_callbacks = [*self.callbacks, *callbacks]
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                return stop.value
            _notify(all_callbacks, event)

    def stream(self, query: str, chat_history: Sequence[Message] | None = None, *,
               session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> Iterator[Event]:
        """Yield typed events (thought, action, observation, token, answer, error) as they happen."""
        gen = self._iter(query, chat_history, session_id, stream=True, files=files)
        for event in gen:
            _notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> str:
        """``ask`` for asyncio: runs in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self.ask, query, chat_history, session_id=session_id, files=files)

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION) -> RunResult:
        return await asyncio.to_thread(self.run, query, chat_history, session_id=session_id)

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session's history, or every session's."""
        with self._lock:
            if session_id is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session_id, None)
        for tool in self.tools:
            tool.reset(session_id)

    def add_file(self, source: Any, *, session_id: str = DEFAULT_SESSION, sampling_rate: int | None = None,
                 language: str | None = None) -> str:
        """Copy an image or audio file into the workspace and tell the session about it.

        Returns the new workspace-relative name (``image/{uuid}.png`` or ``audio/{uuid}.wav``).
        """
        messages, name = self._file_messages(source, sampling_rate, language)
        self._memory(session_id).add_messages(messages)
        return name

    def _file_messages(self, source: Any, sampling_rate: int | None = None,
                       language: str | None = None) -> tuple[list[Message], str]:
        from ..engine.prompts import detect_language
        from .files import announcement, describe, ingest_file

        workspace = self._tool_config.get("workspace_dir") or "./workspace"
        kind, name = ingest_file(source, workspace, sampling_rate=sampling_rate)
        lang = language or detect_language("", self.settings.prompt_language)
        with self._lock:
            tools = dict(self._tools)
        return announcement(kind, name, describe(kind, name, tools), lang), name

    def history(self, session_id: str = DEFAULT_SESSION) -> list[Message]:
        return self._memory(session_id).messages()

    def close(self) -> None:
        for tool in self.tools:
            try:
                tool.close()
            except Exception:
                log.debug("closing %s failed", tool.name, exc_info=True)

    # ---- internals ---------------------------------------------------------------------

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str, *, stream: bool,
              files: Sequence[Any] = ()):
        if not isinstance(query, str) or not query.strip():
            raise UserError("the question is empty: pass a non-empty string to ask()/run()/stream()")
        if chat_history is not None and not isinstance(chat_history, (list, tuple)):
            raise UserError("chat_history must be a list of {'role': ..., 'content': ...} dicts or None")
        own_memory = chat_history is None
        language = detect_language(query, self.settings.prompt_language)
        announced: list[Message] = []
        for source in files or ():
            announced.extend(self._file_messages(source, language=language)[0])
        if own_memory:
            if announced:
                self._memory(session_id).add_messages(announced)
            history = self._memory(session_id).messages()
        else:
            history = trim_to_budget(normalize_history(chat_history, query), self.memory_max_tokens) + announced
        with self._lock:
            budget = Budget(max_llm_calls=self.budget_limits[0], max_tool_calls=self.budget_limits[1])
            engine = Engine(self.llm, self._tools.values(), self.settings, approve=self.approve, budget=budget)
        result = yield from engine.iter_run(query, history, stream=stream, session_id=session_id)
        if own_memory:
            self._memory(session_id).add_turn(query, result.output)
        return result

    def _memory(self, session_id: str) -> ConversationMemory:
        with self._lock:
            memory = self._sessions.get(session_id)
            if memory is None:
                memory = self._sessions[session_id] = ConversationMemory(self.memory_max_tokens)
            return memory

    def __repr__(self) -> str:
        return f"<App {self.app_type} tools={self.tool_names}>"


def _notify(callbacks: Sequence[Callback], event: Event) -> None:
    for callback in callbacks:
        try:
            callback(event)
        except Exception:  # an observer must not break the run
            log.warning("callback %r raised", callback, exc_info=True)


def _replace(settings: EngineSettings, **changes: Any) -> EngineSettings:
    from dataclasses import replace

    return replace(settings, **changes)
