"""``ConversationApp``: what every app shares, whatever answers the question.

The app's tools, callbacks and files handed over, and the ask / run / stream /
aask / arun / astream API over one core: a question (:mod:`.history`: its
inputs checked, the history it is asked with) runs as one run (:mod:`.runs`:
its run control, cancelling, the drivers that read it) in a session
(:mod:`.sessions`: the memory kept per ``session_id``, bounded).

A subclass implements ``_execute(query, history, session_id, stream, budget,
llm)``, a generator of events whose return value is the run's result (with an
``output`` string), and may implement ``_aexecute`` (the same as an async
generator, ending with a ``Final``; without it the async drivers run
``_execute`` in a thread). The ReAct ``App`` and the planner's ``PlannerApp``
are the two subclasses.

Sessions the app keeps (its memory of a conversation, and the tools' state
such as a python worker, per ``session_id``) are bounded: at most
``max_sessions``, least recently used first out, and none idle past
``session_ttl_s``; an evicted session's tool state is reset too.

A run whose question came with files handed in (``files=``, files added to its
session with ``add_file`` since its last run, the announced images of a chat
request in ``chat_history``) starts tainted with their provenance
(:mod:`.handed`): what they carry is content nobody here controls.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable, Generator, Generic, Iterator, Mapping, Protocol, Sequence, TypeVar

from ..config import SETTINGS
from ..engine.memory import ConversationMemory
from ..engine.prompts import detect_language
from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message, with_options
from ..run.control import RunBudget
from ..run.external import ExternalTurn
from ..run.taint import EgressPolicy, RunTaint
from ..tools.base import Tool
from ..tools.context import AppContext
from .handed import handed_in, taint_with_files
from .history import Question, announcements, given_history, question, remembered_history
from .runs import AsyncRun, Callback, Final, Runs, adrain, drain, drive_in_thread, notify, notifying
from .sessions import CALL_SESSION_PREFIX, DEFAULT_SESSION, Sessions

__all__ = ["ConversationApp", "AsyncRun", "notify", "DEFAULT_SESSION", "CALL_SESSION_PREFIX", "FileAnnouncer",
           "Callback", "Final"]

log = logging.getLogger("chatgpt_tool_hub.apps")
# (source, language, tools) -> (announcement messages, workspace-relative name); supplied by the app factory
FileAnnouncer = Callable[[Any, str, dict], "tuple[list[Message], str]"]


@dataclass
class _Turn:
    """One question in flight: its checked inputs, its run control, the LLM it is asked with, and its
    session's memory (looked up when used: a session reset meanwhile gets a new one)."""

    question: Question
    budget: RunBudget
    llm: LLM
    memory: Callable[[], ConversationMemory]
    memory_max_tokens: int
    taint: RunTaint  # the run's, with the app's untrusted_egress policy
    handed: list[str]  # the files the given chat history hands in (a chat request's images)

    def history(self, announced: list[Message]) -> list[Message]:
        """The history the run gets, the announcements of the files handed over at its end."""
        if self.question.own_memory:
            return remembered_history(self.memory(), announced)
        return given_history(self.question, announced, self.memory_max_tokens)

    def remember(self, result: Any) -> Any:
        """Store the turn in the session's memory (when the app keeps the history); returns ``result``."""
        if self.question.own_memory and result is not None:
            self.memory().add_turn(self.question.query, result.output)
        return result


class _Answered(Protocol):
    output: str


ResultT = TypeVar("ResultT", bound=_Answered)  # what run() returns: RunResult (App) or PlanResult (PlannerApp)


class ConversationApp(Generic[ResultT]):
    """Base of the apps. Two apps share nothing; one app serves many threads and event loops."""

    app_type = "base"
    prompt_language = "auto"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, memory_max_tokens: int = 2000,
                 approve: Callable[[str, Any], bool] | None = None, callbacks: Sequence[Callback] = (),
                 file_announcer: FileAnnouncer | None = None, context: AppContext | None = None,
                 budget_limits: tuple[int | None, int | None] = (None, None),
                 max_sessions: int | None = None, session_ttl_s: float | None = None):
        self.llm = llm
        # the app's context (registry, model manager, redactor, workspace, settings); an app built
        # without the factory gets an empty one: no settings, nothing to redact, the default workspace
        self.context = context if context is not None else AppContext(llm=llm)
        self.budget_limits = budget_limits  # (max LLM calls, max tool calls) per question, tree-wide
        self._tools: dict[str, Tool] = {t.name: t for t in tools}
        self.memory_max_tokens = memory_max_tokens
        self.approve = approve
        self.callbacks = list(callbacks)
        self._file_announcer = file_announcer
        settings = self.context.settings
        self.max_sessions = int(max_sessions if max_sessions is not None else
                                settings.get("max_sessions", SETTINGS["max_sessions"].default))
        self.session_ttl_s = float(session_ttl_s if session_ttl_s is not None else
                                   settings.get("session_ttl_s", SETTINGS["session_ttl_s"].default))
        self.async_max_threads = max(1, int(settings.get("async_max_threads", SETTINGS["async_max_threads"].default)))
        self.executor: Any = None  # threads of the async path (tools, LLMs without acomplete); None: made on use
        self._own_executor: ThreadPoolExecutor | None = None
        self._lock = threading.RLock()  # the tools, and what subclasses change while questions run
        self._clock = time.monotonic
        self._sessions = Sessions(lambda: self._clock())
        self._runs = Runs()
        self._added: dict[str, list[str]] = {}  # per session: files add_file handed in since its last run

    # ---- tools ----------------------------------------------------------------------

    @property
    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def add_tool(self, tool: Tool) -> None:
        """Add (or replace) a tool; the next question sees it (both app types)."""
        with self._lock:
            self._tools[tool.name] = tool

    def unregister(self, name: str) -> None:
        """Remove a tool or subtree; the next question no longer sees it."""
        with self._lock:
            tool = self._tools.pop(name, None)
        if tool is None:
            raise UserError(f"no tool named {name!r} in this app; it has: {', '.join(self.tool_names) or '(none)'}")
        tool.close()

    # ---- asking ------------------------------------------------------------------------

    def ask(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str | None = None, files: Sequence[Any] | Any = ()) -> str:
        """Answer ``query``. ``chat_history`` (role/content dicts) replaces the app's own memory.

        ``session_id`` names the conversation: the app's memory and the tools' state
        (the ``python`` tool's variables) are kept per session. Without it, a call
        without ``chat_history`` uses the ``"default"`` session; a call *with*
        ``chat_history`` (a chatbot that keeps the conversation itself, for many
        users) gets a session of its own that ends with the call, so one chat
        user never sees another's tool state and users' tool calls run in
        parallel. Pass ``session_id`` (e.g. the chat user's id) to keep tool
        state between that user's calls.

        ``files`` (paths of images or WAV audio; one path alone is one file) are copied into the
        workspace and announced to the model before the question.
        """
        return self.run(query, chat_history, session_id=session_id, files=files).output

    def run(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str | None = None, callbacks: Sequence[Callback] = (), files: Sequence[Any] | Any = (),
            llm_options: Mapping[str, Any] | None = None, external: ExternalTurn | None = None) -> ResultT:
        """Answer ``query`` and return everything that happened.

        ``llm_options`` (``temperature``, ``max_tokens``) change the LLM's sampling for this run, for
        LLM objects that have ``with_options`` (the OpenAI-compatible client does). ``external``: tools the
        caller runs itself, a paused run to resume with their results, a required tool call or answer shape
        (:class:`~chatgpt_tool_hub.run.external.ExternalTurn`; a run that calls such a tool ends with
        ``stopped_by="tool_calls"`` and ``result.paused``)."""
        run = self._iter(query, chat_history, session_id, stream=False, files=files, llm_options=llm_options,
                         external=external)
        result: ResultT = drain(run, [*self.callbacks, *callbacks])
        return result

    def stream(self, query: str, chat_history: Sequence[Message] | None = None, *,
               session_id: str | None = None, files: Sequence[Any] | Any = (),
               llm_options: Mapping[str, Any] | None = None, external: ExternalTurn | None = None) -> Iterator[Event]:
        """Yield typed events (thought, action, observation, token, answer, error) as they happen."""
        for event in self._iter(query, chat_history, session_id, stream=True, files=files, llm_options=llm_options,
                                external=external):
            notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, files: Sequence[Any] | Any = ()) -> str:
        """``ask`` for asyncio: LLM calls are awaited (``acomplete``), tools run in threads."""
        return (await self.arun(query, chat_history, session_id=session_id, files=files)).output

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, callbacks: Sequence[Callback] = (),
                   files: Sequence[Any] | Any = (), llm_options: Mapping[str, Any] | None = None,
                   external: ExternalTurn | None = None) -> ResultT:
        """``run`` for asyncio. Cancelling the awaiting task cancels the run: its tools' processes are
        killed and the call in flight is waited for before ``CancelledError`` goes on."""
        source = self._aiter(query, chat_history, session_id, stream=False, files=files, llm_options=llm_options,
                             external=external)
        result: ResultT = await adrain(source, [*self.callbacks, *callbacks])
        return result

    def astream(self, query: str, chat_history: Sequence[Message] | None = None, *,
                session_id: str | None = None, files: Sequence[Any] | Any = (),
                llm_options: Mapping[str, Any] | None = None, external: ExternalTurn | None = None) -> AsyncRun:
        """``stream`` for asyncio: ``async for event in app.astream(q)``; the :class:`AsyncRun` it returns
        has the run's result in ``.result`` once the events end."""
        source = self._aiter(query, chat_history, session_id, stream=True, files=files, llm_options=llm_options,
                             external=external)
        return AsyncRun(notifying(source, self.callbacks))

    # ---- cancelling ------------------------------------------------------------------------

    def cancel(self, session_id: str | None = None) -> int:
        """Stop the runs in flight (one session's, or all) within a second: the running tool call's
        processes are killed (python, terminal), no further LLM or tool call is made, and each run returns
        at once with ``stopped_by="cancelled"`` and its steps so far. Safe from any thread (also from a
        signal handler through a thread: ``threading.Thread(target=app.cancel).start()``).
        Returns how many runs were cancelled."""
        return self._runs.cancel(session_id)

    # ---- sessions ------------------------------------------------------------------------

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session's history (and the tools' state for it), or every session's."""
        self._sessions.forget(session_id)
        with self._lock:
            if session_id is None:
                self._added.clear()
            else:
                self._added.pop(session_id, None)
        for tool in self.tools:
            tool.reset(session_id)

    def history(self, session_id: str = DEFAULT_SESSION) -> list[Message]:
        return self._memory(session_id).messages()

    def forget_last_turn(self, session_id: str = DEFAULT_SESSION) -> bool:
        """Drop the session's last question and its answer (or the last file announcement) from its
        history; False when the history does not end with one."""
        return bool(self._memory(session_id).pop_turn())

    @property
    def session_ids(self) -> list[str]:
        """The sessions the app keeps, least recently used first."""
        return self._sessions.ids()

    def prune_sessions(self) -> list[str]:
        """Evict the sessions idle past ``session_ttl_s`` and those past ``max_sessions`` (least recently
        used first; never one with a run in flight), resetting their tool state; returns their ids.
        Every run does this; a server calls it now and then too."""
        victims = self._sessions.prune(self.max_sessions, self.session_ttl_s)
        for sid in victims:
            self._end_tool_session(sid)
        if victims:
            log.debug("evicted %d idle session(s)", len(victims))
        return victims

    def add_file(self, source: Any, *, session_id: str = DEFAULT_SESSION, language: str | None = None) -> str:
        """Copy an image or WAV file into the workspace and tell the session about it.

        Returns the new workspace-relative name (``image/{uuid}.png`` or ``audio/{uuid}.wav``). The
        session's next run starts tainted by the file (see :mod:`.handed`).
        """
        messages, name = self._announce(source, language or detect_language("", self.prompt_language))
        self._memory(session_id).add_messages(messages)
        with self._lock:
            added = self._added.setdefault(session_id, [])
            added.extend(n for n in handed_in(messages) if n not in added)
        return name

    def close(self) -> None:
        """Cancel the runs in flight, close the tools and unload the app's expert models (the app's own
        manager; a later call loads what it needs again)."""
        self.cancel()
        for tool in self.tools:
            try:
                tool.close()
            except Exception:
                log.debug("closing %s failed", tool.name, exc_info=True)
        models = self.context.models
        if models is not None:
            models.clear()
        executor, self._own_executor = self._own_executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    # ---- what subclasses implement ---------------------------------------------------------

    def _execute(self, query: str, history: list[Message], session_id: str, stream: bool, budget: RunBudget,
                 llm: LLM) -> Generator[Event, None, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _aexecute(self, query: str, history: list[Message], session_id: str, stream: bool,
                  budget: RunBudget, llm: LLM) -> AsyncGenerator[Any, None]:
        """The async run: ``_execute`` driven in one thread (subclasses with an async engine override it);
        yields events, then a ``Final``."""
        run = self._execute(query, history, session_id, stream, budget, llm)
        return drive_in_thread(run, self._async_executor(), budget)

    def _check_open(self) -> None:
        """Subclasses raise ``UserError`` here when they can no longer answer."""

    # ---- the core: one question, read by a sync or an async driver ------------------------------

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, *, stream: bool,
              files: Any = (), llm_options: Mapping[str, Any] | None = None,
              external: ExternalTurn | None = None) -> Generator[Event, None, Any]:
        extra = self._external_kwargs(external)
        with self._turn(query, chat_history, session_id, files, llm_options) as turn:
            asked = turn.question
            announced = announcements(asked, self._announce)
            self._hand_in(turn, announced)
            history = turn.history(announced)
            result = yield from self._execute(asked.query, history, asked.session_id, stream, turn.budget, turn.llm,
                                              **extra)
            return turn.remember(result)

    async def _aiter(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, *,
                     stream: bool, files: Any = (), llm_options: Mapping[str, Any] | None = None,
                     external: ExternalTurn | None = None) -> AsyncGenerator[Any, None]:
        extra = self._external_kwargs(external)
        with self._turn(query, chat_history, session_id, files, llm_options) as turn:
            asked = turn.question
            announced = (await asyncio.get_running_loop().run_in_executor(
                self._async_executor(), announcements, asked, self._announce)) if asked.files else []
            self._hand_in(turn, announced)
            history = turn.history(announced)
            result = None
            async with aclosing(self._aexecute(asked.query, history, asked.session_id, stream, turn.budget,
                                               turn.llm, **extra)) as items:
                async for item in items:
                    if isinstance(item, Final):
                        result = item.result
                    else:
                        yield item
            yield Final(turn.remember(result))

    @contextmanager
    def _turn(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, files: Any,
              llm_options: Mapping[str, Any] | None) -> Iterator[_Turn]:
        """One question from start to end: its inputs checked, its run registered (``cancel()`` reaches it)
        and its session kept busy; at the end the run's control ends and a call's own session's tool
        state is reset."""
        self._check_open()
        if isinstance(chat_history, Iterator):  # read twice: for the question, and for the files it hands in
            chat_history = list(chat_history)
        asked = question(query, chat_history, session_id, files, self.prompt_language)
        handed = handed_in(chat_history) if chat_history is not None else []
        run = self._runs.start(asked.session_id, self.budget_limits)
        taint = run.budget.taint_with(EgressPolicy.from_settings(self.context.settings))  # the app's untrusted_egress
        if not asked.call_session:
            self._sessions.enter(asked.session_id)
        try:
            self.prune_sessions()
            yield _Turn(asked, run.budget, with_options(self.llm, **dict(llm_options or {})),
                        lambda: self._memory(asked.session_id), self.memory_max_tokens, taint, handed)
        finally:
            self._runs.end(run)
            if asked.call_session:
                self._end_tool_session(asked.session_id)
            else:
                self._sessions.leave(asked.session_id)

    # ---- helpers ----------------------------------------------------------------------------

    takes_external = False  # True: _execute / _aexecute take ``external`` (tools the caller runs)

    def _external_kwargs(self, external: ExternalTurn | None) -> dict[str, Any]:
        if external is None or external.empty:
            return {}
        if not self.takes_external:
            raise UserError(f"a {self.app_type!r} app cannot take tools its caller runs, a required tool call or "
                            f"an answer shape; ask a ReAct app (app_type 'victorinox')")
        return {"external": external}

    def _async_executor(self) -> Any:
        if self.executor is not None:
            return self.executor
        with self._lock:
            if self._own_executor is None:
                self._own_executor = ThreadPoolExecutor(self.async_max_threads, thread_name_prefix="tool-hub-async")
            return self._own_executor

    def _memory(self, session_id: str) -> ConversationMemory:
        return self._sessions.memory(session_id, self.memory_max_tokens)

    def _hand_in(self, turn: _Turn, announced: list[Message]) -> None:
        """Before the run starts: taint it with the files handed in with its question -- those the chat
        history announces, those ``add_file`` added to its session since its last run, and ``files=``
        (``announced``)."""
        with self._lock:
            added = self._added.pop(turn.question.session_id, [])
        taint_with_files(turn.taint, [*turn.handed, *added, *handed_in(announced)])

    def _end_tool_session(self, session_id: str) -> None:
        with self._lock:
            self._added.pop(session_id, None)
        for tool in self.tools:
            try:
                tool.reset(session_id)
            except Exception:
                log.debug("resetting %s for session %s failed", tool.name, session_id, exc_info=True)

    def _announce(self, source: Any, language: str) -> tuple[list[Message], str]:
        if self._file_announcer is None:
            raise UserError("this app was built without file handling; build it with AppFactory.create_app "
                            "to hand it files")
        with self._lock:
            tools = dict(self._tools)
        return self._file_announcer(source, language, tools)
