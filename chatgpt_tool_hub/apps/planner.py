"""``PlannerApp``: HuggingGPT mode behind the same ask / run / stream API as the ReAct ``App``.

A request is planned as a task DAG over the app's tools, expert tasks get a
model, the DAG runs in parallel, and the LLM writes the answer from the
results. The app owns its LLM, tools and sessions; two apps share nothing,
and one app serves concurrent requests (each keeps its state in a
``pipeline.Request``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Generator, Mapping, Sequence

from ..config import SETTINGS, get_typed
from ..errors import ConfigError, UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..planner.catalog import Catalog, load_catalog
from ..planner.inputs import request_files_mode
from ..planner.pipeline import PlannerSettings, Request, iter_request
from ..planner.results import PlanResult
from ..planner.select import SELECTION_MODES, ModelSelector
from ..planner.workers import DaemonPool
from ..run.control import RunBudget
from ..tools.base import Tool
from ..tools.context import AppContext
from .conversation import ConversationApp, FileAnnouncer

__all__ = ["PlannerApp", "CONFIG_KEYS"]

log = logging.getLogger("chatgpt_tool_hub.planner")
Callback = Callable[[Event], None]

# config key -> constructor argument; the defaults are the configuration table's (config.SETTINGS)
CONFIG_KEYS: dict[str, str] = {
    "planner_max_tasks": "max_tasks",
    "planner_max_workers": "max_workers",
    "planner_task_timeout": "task_timeout",
    "planner_model_selection": "model_selection",
    "planner_top_k": "top_k",
    "planner_request_files": "request_files",
    "memory_max_tokens": "memory_max_tokens",
}
_DEFAULTS = PlannerSettings()


class PlannerApp(ConversationApp[PlanResult]):
    """Answers requests the HuggingGPT way (``app_type="planner"``); ask/run/stream come from the base."""

    app_type = "planner"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, max_tasks: int = _DEFAULTS.max_tasks,
                 max_workers: int = _DEFAULTS.max_workers, task_timeout: float | None = _DEFAULTS.task_timeout,
                 model_selection: str = _DEFAULTS.model_selection, top_k: int = _DEFAULTS.top_k,
                 catalog: Catalog | str | Sequence[Mapping[str, Any]] | None = None, callbacks: Sequence[Callback] = (),
                 memory_max_tokens: int = SETTINGS["memory_max_tokens"].default,
                 approve: Callable[[str, Any], bool] | None = None, bot_name: str = _DEFAULTS.bot_name,
                 embedder: Any = None, file_announcer: FileAnnouncer | None = None,
                 context: AppContext | None = None, budget_limits: tuple[int | None, int | None] = (None, None),
                 max_sessions: int | None = None, session_ttl_s: float | None = None,
                 request_files: str = _DEFAULTS.request_files):
        _check_int("planner_max_tasks", max_tasks)
        request_files = request_files_mode(request_files)  # a ConfigError naming planner_request_files
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
            from ..planner.embedding import require_embedding_model

            require_embedding_model()  # fail now, with the pip command, not at the first request
        super().__init__(llm, tools, memory_max_tokens=memory_max_tokens, approve=approve, callbacks=callbacks,
                         file_announcer=file_announcer, context=context, budget_limits=budget_limits,
                         max_sessions=max_sessions, session_ttl_s=session_ttl_s)
        self.catalog = load_catalog(catalog)
        self.selector = ModelSelector(self.catalog, model_selection, top_k, embedder=embedder,
                                      models=self.context.models)
        self.settings = PlannerSettings(max_tasks=max_tasks, max_workers=max_workers,
                                        task_timeout=float(task_timeout) if task_timeout else None, bot_name=bot_name,
                                        model_selection=model_selection, top_k=top_k, request_files=request_files)
        self._pool = DaemonPool(f"planner-{id(self):x}")  # task threads, reused across requests
        self._closed = False

    @classmethod
    def from_config(cls, llm: LLM, tools: Sequence[Tool], config: Mapping[str, Any], **kwargs: Any) -> "PlannerApp":
        """Build from configuration keys (``planner_max_tasks``, ``planner_max_workers``,
        ``planner_model_selection``, ``planner_top_k``, ``planner_task_timeout``, ``planner_request_files``,
        ``memory_max_tokens``, ``planner_catalog``); ``kwargs`` (callbacks, approve, ...) go to the constructor."""
        arguments: dict[str, Any] = {}
        for key, name in CONFIG_KEYS.items():
            arguments[name] = get_typed(config, key, SETTINGS[key].default)
        mode = str(arguments["model_selection"]).strip().lower()
        if mode not in SELECTION_MODES:
            raise ConfigError(f"planner_model_selection must be one of {', '.join(SELECTION_MODES)}, not "
                              f"{arguments['model_selection']!r}", key="planner_model_selection")
        arguments["model_selection"] = mode
        catalog = get_typed(config, "planner_catalog", None)
        if catalog is not None:
            arguments["catalog"] = catalog
        return cls(llm, tools, **{**arguments, **kwargs})

    def cancel(self, session_id: str | None = None) -> int:
        """Cancel the requests in flight (one session's, or all), like the ReAct app's ``cancel``: the
        planner's own LLM call in flight (planning, model selection, the response) is abandoned, tasks not
        yet started never start, the processes of running python / terminal tasks are killed, and each
        request returns at once with ``stopped_by="cancelled"`` and the task results so far. Returns how
        many were cancelled."""
        return super().cancel(session_id)

    def close(self) -> None:
        """Cancel requests in flight, stop the task threads, close the tools."""
        self._closed = True
        super().close()
        self._pool.close()
        self.selector.close()  # the embedding model of the "embedding" selection

    # ---- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UserError("this PlannerApp is closed; build a new one")

    def _execute(self, query: str, history: list[Message], session_id: str, stream: bool, budget: RunBudget,
                 llm: LLM) -> Generator[Event, None, PlanResult]:
        # the run's budget is the request's cancel: app.cancel() ends the LLM call in flight and stops the
        # DAG, and the tools' hooks kill their work; a consumer that stops reading leaves no task running
        with self._lock:
            request = Request(llm, dict(self._tools), self.selector, self.settings, query, history,
                              session_id=session_id, stream=stream, approve=self.approve, pool=self._pool,
                              budget=budget, redactor=self.context.redactor)
        result: PlanResult = yield from iter_request(request)
        return result

    def __repr__(self) -> str:
        return f"<PlannerApp tools={self.tool_names} selection={self.selector.mode}>"


def _check_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a whole number >= 1, got {value!r}", key=key)
