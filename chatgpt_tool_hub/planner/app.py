"""``PlannerApp``: HuggingGPT mode behind the same ask / run / stream API as the ReAct ``App``.

A request is planned as a task DAG over the app's tools, expert tasks get a
model, the DAG runs in parallel, and the LLM writes the answer from the
results. The app owns its LLM, tools and sessions; two apps share nothing,
and one app serves concurrent requests (each keeps its state in a
``pipeline.Request``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..config import get_typed
from ..engine.memory import ConversationMemory, normalize_history, trim_to_budget
from ..errors import ConfigError, UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..tools.base import Tool
from .catalog import Catalog, load_catalog
from .pipeline import PlannerSettings, Request, RunControl, iter_request
from .results import PlanResult
from .select import SELECTION_MODES, ModelSelector
from .workers import DaemonPool

__all__ = ["PlannerApp", "CONFIG_KEYS"]

log = logging.getLogger("chatgpt_tool_hub.planner")
Callback = Callable[[Event], None]
DEFAULT_SESSION = "default"

# config key -> (constructor argument, default)
CONFIG_KEYS: dict[str, tuple[str, Any]] = {
    "planner_max_tasks": ("max_tasks", 20),
    "planner_max_workers": ("max_workers", 4),
    "planner_task_timeout": ("task_timeout", 120.0),
    "planner_model_selection": ("model_selection", "llm"),
    "planner_top_k": ("top_k", 5),
    "memory_max_tokens": ("memory_max_tokens", 2000),
}


class PlannerApp:
    """Answers requests the HuggingGPT way (``app_type="planner"``)."""

    app_type = "planner"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, max_tasks: int = 20, max_workers: int = 4,
                 task_timeout: float | None = 120.0, model_selection: str = "llm", top_k: int = 5,
                 catalog: Catalog | str | Sequence[Mapping[str, Any]] | None = None, callbacks: Sequence[Callback] = (),
                 memory_max_tokens: int = 2000, approve: Callable[[str, Any], bool] | None = None,
                 bot_name: str = "LLM-OS", embedder: Any = None):
        _check_int("planner_max_tasks", max_tasks)
        _check_int("planner_max_workers", max_workers)
        if task_timeout is not None and (isinstance(task_timeout, bool) or not isinstance(task_timeout, (int, float))
                                         or task_timeout < 0):
            raise ConfigError("planner_task_timeout must be a number of seconds >= 0 (0 or None: no limit)",
                              key="planner_task_timeout")
        for tool in tools:
            if not isinstance(tool, Tool):
                raise UserError(f"PlannerApp takes Tool objects, got {tool!r}; tool names are resolved by "
                                f"AppFactory.create_app(app_type='planner', tools_list=[...])")
        if model_selection == "embedding" and embedder is None:
            from .embedding import require_embedding_model

            require_embedding_model()  # fail now, with the pip command, not at the first request
        self.llm = llm
        self._tools: dict[str, Tool] = {t.name: t for t in tools}
        self.catalog = load_catalog(catalog)
        self.selector = ModelSelector(self.catalog, model_selection, top_k, embedder=embedder)
        self.settings = PlannerSettings(max_tasks=max_tasks, max_workers=max_workers,
                                        task_timeout=float(task_timeout) if task_timeout else None, bot_name=bot_name)
        self.callbacks = list(callbacks)
        self.memory_max_tokens = memory_max_tokens
        self.approve = approve
        self._sessions: dict[str, ConversationMemory] = {}
        self._active: set[RunControl] = set()
        self._pool = DaemonPool(f"planner-{id(self):x}")  # task threads, reused across requests
        self._closed = False
        self._lock = threading.RLock()

    @classmethod
    def from_config(cls, llm: LLM, tools: Sequence[Tool], config: Mapping[str, Any], **kwargs: Any) -> "PlannerApp":
        """Build from configuration keys (``planner_max_tasks``, ``planner_max_workers``,
        ``planner_model_selection``, ``planner_top_k``, ``planner_task_timeout``, ``memory_max_tokens``,
        ``planner_catalog``); ``kwargs`` (callbacks, approve, ...) go to the constructor."""
        arguments: dict[str, Any] = {}
        for key, (name, default) in CONFIG_KEYS.items():
            arguments[name] = get_typed(config, key, default)
        mode = str(arguments["model_selection"]).strip().lower()
        if mode not in SELECTION_MODES:
            raise ConfigError(f"planner_model_selection must be one of {', '.join(SELECTION_MODES)}, not "
                              f"{arguments['model_selection']!r}", key="planner_model_selection")
        arguments["model_selection"] = mode
        catalog = get_typed(config, "planner_catalog", None)
        if catalog is not None:
            arguments["catalog"] = catalog
        return cls(llm, tools, **{**arguments, **kwargs})

    # ---- tools ----------------------------------------------------------------------------

    @property
    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    # ---- asking -----------------------------------------------------------------------------

    def ask(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str = DEFAULT_SESSION) -> str:
        """Answer ``query``. ``chat_history`` (role/content dicts) replaces the app's own memory."""
        return self.run(query, chat_history, session_id=session_id).output

    def run(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str = DEFAULT_SESSION, callbacks: Sequence[Callback] = ()) -> PlanResult:
        """Answer ``query`` and return the plan, model assignments, per-task results and usage."""
        gen = self._iter(query, chat_history, session_id, stream=False)
        everyone = [*self.callbacks, *callbacks]
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                return stop.value
            _notify(everyone, event)

    def stream(self, query: str, chat_history: Sequence[Message] | None = None, *,
               session_id: str = DEFAULT_SESSION) -> Iterator[Event]:
        """Yield events: the plan and model choices (thought), each task's start (action) and end
        (observation), the answer's tokens, and the answer."""
        for event in self._iter(query, chat_history, session_id, stream=True):
            _notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION) -> str:
        """``ask`` for asyncio: runs in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self.ask, query, chat_history, session_id=session_id)

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION) -> PlanResult:
        return await asyncio.to_thread(self.run, query, chat_history, session_id=session_id)

    def cancel(self, session_id: str | None = None) -> int:
        """Cancel the requests in flight (one session's, or all): tasks not yet started never start,
        running ones are abandoned, and the request returns at once. Returns how many were cancelled."""
        with self._lock:
            controls = [c for c in self._active if session_id is None or c.session_id == session_id]
        for control in controls:
            control.cancel()
        return len(controls)

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session's history, or every session's."""
        with self._lock:
            if session_id is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session_id, None)
        for tool in self.tools:
            tool.reset(session_id)

    def history(self, session_id: str = DEFAULT_SESSION) -> list[Message]:
        return self._memory(session_id).messages()

    def close(self) -> None:
        """Cancel requests in flight, stop the task threads, close the tools."""
        self._closed = True
        self.cancel()
        self._pool.close()
        for tool in self.tools:
            try:
                tool.close()
            except Exception:
                log.debug("closing %s failed", tool.name, exc_info=True)

    # ---- internals ---------------------------------------------------------------------------

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str, *, stream: bool):
        if self._closed:
            raise UserError("this PlannerApp is closed; build a new one")
        if not isinstance(query, str) or not query.strip():
            raise UserError("the question is empty: pass a non-empty string to ask()/run()/stream()")
        if chat_history is not None and not isinstance(chat_history, (list, tuple)):
            raise UserError("chat_history must be a list of {'role': ..., 'content': ...} dicts or None")
        own_memory = chat_history is None
        if own_memory:
            history = self._memory(session_id).messages()
        else:
            history = trim_to_budget(normalize_history(chat_history, query), self.memory_max_tokens)
        control = RunControl(session_id)
        with self._lock:
            request = Request(self.llm, dict(self._tools), self.selector, self.settings, query, history,
                              session_id=session_id, stream=stream, control=control, approve=self.approve,
                              pool=self._pool)
            self._active.add(control)
        try:
            result = yield from iter_request(request)
        finally:
            with self._lock:
                self._active.discard(control)
            control.cancel()  # a consumer that stopped reading leaves no task running
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
        return f"<PlannerApp tools={self.tool_names} selection={self.selector.mode}>"


def _check_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a whole number >= 1, got {value!r}", key=key)


def _notify(callbacks: Sequence[Callback], event: Event) -> None:
    for callback in callbacks:
        try:
            callback(event)
        except Exception:  # an observer must not break the run
            log.warning("callback %r raised", callback, exc_info=True)
