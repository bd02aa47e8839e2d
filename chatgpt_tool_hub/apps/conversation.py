"""``ConversationApp``: what every app shares, whatever answers the question.

Tools, per-session state, callbacks, input checks, history resolution, files
handed over, cancelling, and the ask / run / stream / aask / arun / astream
drivers. A subclass implements ``_execute(query, history, session_id, stream,
budget, llm)``, a generator of events whose return value is the run's result
(with an ``output`` string), and may implement ``_aexecute`` (the same as an
async generator; without it the async drivers run ``_execute`` in a thread).
The ReAct ``App`` and the planner's ``PlannerApp`` are the two subclasses.

Sessions the app keeps (its memory of a conversation, and the tools' state
such as a python worker, per ``session_id``) are bounded: at most
``max_sessions``, least recently used first out, and none idle past
``session_ttl_s``; an evicted session's tool state is reset too.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence

from ..config import SETTINGS
from ..engine.loop import RunBudget
from ..engine.memory import ConversationMemory, normalize_history, trim_to_budget
from ..engine.prompts import detect_language
from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message, with_options
from ..tools.base import Tool
from ..tools.context import AppContext

__all__ = ["ConversationApp", "AsyncRun", "notify", "DEFAULT_SESSION", "CALL_SESSION_PREFIX", "FileAnnouncer"]

log = logging.getLogger("chatgpt_tool_hub.apps")
Callback = Callable[[Event], None]
DEFAULT_SESSION = "default"
CALL_SESSION_PREFIX = "call-"  # sessions made for one call with chat_history and no session_id
# "$tool question", "#tool question", "/tool question": a chatbot's trigger word before the question
_TRIGGER = re.compile(r"[$#/!@][^\s]{1,24}\s+(.*)", re.S)
# (source, language, tools) -> (announcement messages, workspace-relative name); supplied by the app factory
FileAnnouncer = Callable[[Any, str, dict], "tuple[list[Message], str]"]


def notify(callbacks: Sequence[Callback], event: Event) -> None:
    """Call every observer; one that raises is logged and never breaks the run."""
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            log.warning("callback %r raised", callback, exc_info=True)


@dataclass
class _Session:
    memory: ConversationMemory | None = None  # None: only the tools keep state for it
    last_used: float = 0.0
    busy: int = 0  # runs in flight: never evicted meanwhile


@dataclass(eq=False)
class _Run:
    session_id: str
    budget: RunBudget


@dataclass
class _Final:
    """The last item of the async drivers: the run's result."""

    result: Any


@dataclass
class _Prepared:
    query: str
    chat_history: list | None
    session_id: str
    own_memory: bool
    call_session: bool
    language: str
    files: Sequence[Any] = field(default_factory=tuple)


class AsyncRun:
    """What ``app.astream()`` returns: an async iterator of events; ``result`` is set when it ends.

    Stop reading early with ``await run.aclose()`` (or leave an ``async for``): the run is
    cancelled and what its tools started is stopped.
    """

    def __init__(self, source: AsyncIterator[Any]):
        self._source = source
        self.result: Any = None

    def __aiter__(self) -> "AsyncRun":
        return self

    async def __anext__(self) -> Event:
        item = await self._source.__anext__()
        if isinstance(item, _Final):
            self.result = item.result
            await self._source.aclose()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        await self._source.aclose()


class ConversationApp:
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
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._runs: set[_Run] = set()
        self._lock = threading.RLock()
        self._clock = time.monotonic

    # ---- tools ----------------------------------------------------------------------

    @property
    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    # ---- asking ------------------------------------------------------------------------

    def ask(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str | None = None, files: Sequence[Any] = ()) -> str:
        """Answer ``query``. ``chat_history`` (role/content dicts) replaces the app's own memory.

        ``session_id`` names the conversation: the app's memory and the tools' state
        (the ``python`` tool's variables) are kept per session. Without it, a call
        without ``chat_history`` uses the ``"default"`` session; a call *with*
        ``chat_history`` (a chatbot that keeps the conversation itself, for many
        users) gets a session of its own that ends with the call, so one chat
        user never sees another's tool state and users' tool calls run in
        parallel. Pass ``session_id`` (e.g. the chat user's id) to keep tool
        state between that user's calls.

        ``files`` (paths of images or WAV audio) are copied into the workspace and
        announced to the model before the question.
        """
        return self.run(query, chat_history, session_id=session_id, files=files).output

    def run(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str | None = None, callbacks: Sequence[Callback] = (), files: Sequence[Any] = (),
            llm_options: Mapping[str, Any] | None = None):
        """Answer ``query`` and return everything that happened.

        ``llm_options`` (``temperature``, ``max_tokens``) change the LLM's sampling for this run, for
        LLM objects that have ``with_options`` (the OpenAI-compatible client does)."""
        gen = self._iter(query, chat_history, session_id, stream=False, files=files, llm_options=llm_options)
        everyone = [*self.callbacks, *callbacks]
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                return stop.value
            notify(everyone, event)

    def stream(self, query: str, chat_history: Sequence[Message] | None = None, *,
               session_id: str | None = None, files: Sequence[Any] = (),
               llm_options: Mapping[str, Any] | None = None) -> Iterator[Event]:
        """Yield typed events (thought, action, observation, token, answer, error) as they happen."""
        for event in self._iter(query, chat_history, session_id, stream=True, files=files, llm_options=llm_options):
            notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, files: Sequence[Any] = ()) -> str:
        """``ask`` for asyncio: LLM calls are awaited (``acomplete``), tools run in threads."""
        return (await self.arun(query, chat_history, session_id=session_id, files=files)).output

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, callbacks: Sequence[Callback] = (), files: Sequence[Any] = (),
                   llm_options: Mapping[str, Any] | None = None):
        """``run`` for asyncio. Cancelling the awaiting task cancels the run: its tools' processes are
        killed and the call in flight is waited for before ``CancelledError`` goes on."""
        everyone = [*self.callbacks, *callbacks]
        result = None
        source = self._aiter(query, chat_history, session_id, stream=False, files=files, llm_options=llm_options)
        try:
            async for item in source:
                if isinstance(item, _Final):
                    result = item.result
                else:
                    notify(everyone, item)
        finally:
            await source.aclose()
        return result

    def astream(self, query: str, chat_history: Sequence[Message] | None = None, *,
                session_id: str | None = None, files: Sequence[Any] = (),
                llm_options: Mapping[str, Any] | None = None) -> AsyncRun:
        """``stream`` for asyncio: ``async for event in app.astream(q)``; the :class:`AsyncRun` it returns
        has the run's result in ``.result`` once the events end."""
        source = self._aiter(query, chat_history, session_id, stream=True, files=files, llm_options=llm_options)
        return AsyncRun(_notifying(source, self.callbacks))

    # ---- cancelling ------------------------------------------------------------------------

    def cancel(self, session_id: str | None = None) -> int:
        """Stop the runs in flight (one session's, or all) within a second: the running tool call's
        processes are killed (python, terminal), no further LLM or tool call is made, and each run returns
        at once with ``stopped_by="cancelled"`` and its steps so far. Safe from any thread (also from a
        signal handler through a thread: ``threading.Thread(target=app.cancel).start()``).
        Returns how many runs were cancelled."""
        with self._lock:
            runs = [r for r in self._runs if session_id is None or r.session_id == session_id]
        return sum(1 for run in runs if run.budget.cancel("cancelled by the caller"))

    # ---- sessions ------------------------------------------------------------------------

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session's history (and the tools' state for it), or every session's."""
        with self._lock:
            if session_id is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session_id, None)
        for tool in self.tools:
            tool.reset(session_id)

    def history(self, session_id: str = DEFAULT_SESSION) -> list[Message]:
        return self._memory(session_id).messages()

    def forget_last_turn(self, session_id: str = DEFAULT_SESSION) -> bool:
        """Drop the session's last question and its answer (or the last file announcement) from its
        history; False when the history does not end with one."""
        return bool(self._memory(session_id).pop_turn())

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

    @property
    def session_ids(self) -> list[str]:
        """The sessions the app keeps, least recently used first."""
        with self._lock:
            return list(self._sessions)

    def prune_sessions(self) -> list[str]:
        """Evict the sessions idle past ``session_ttl_s`` and those past ``max_sessions`` (least recently
        used first; never one with a run in flight), resetting their tool state; returns their ids.
        Every run does this; a server calls it now and then too."""
        now = self._clock()
        victims: list[str] = []
        with self._lock:
            ttl, cap = self.session_ttl_s, self.max_sessions
            excess = len(self._sessions) - cap if cap > 0 else 0
            for sid, entry in self._sessions.items():  # least recently used first
                expired = ttl > 0 and now - entry.last_used > ttl
                if not expired and excess <= 0:
                    break  # the rest were used more recently
                if not entry.busy:
                    victims.append(sid)
                    excess -= 1
            for sid in victims:
                del self._sessions[sid]
        for sid in victims:
            self._end_tool_session(sid)
        if victims:
            log.debug("evicted %d idle session(s)", len(victims))
        return victims

    def add_file(self, source: Any, *, session_id: str = DEFAULT_SESSION, language: str | None = None) -> str:
        """Copy an image or WAV file into the workspace and tell the session about it.

        Returns the new workspace-relative name (``image/{uuid}.png`` or ``audio/{uuid}.wav``).
        """
        messages, name = self._announce(source, language or detect_language("", self.prompt_language))
        self._memory(session_id).add_messages(messages)
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

    # ---- internals -----------------------------------------------------------------------

    def _new_budget(self) -> RunBudget:
        """The budget of one question, shared by everything that works on it; ``cancel()`` stops the run."""
        return RunBudget(max_llm_calls=self.budget_limits[0], max_tool_calls=self.budget_limits[1])

    def _execute(self, query: str, history: list[Message], session_id: str, stream: bool, budget: RunBudget,
                 llm: LLM) -> Generator[Event, None, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _aexecute(self, query: str, history: list[Message], session_id: str, stream: bool,
                        budget: RunBudget, llm: LLM) -> AsyncIterator[Any]:
        """The async run: ``_execute`` driven in one thread (subclasses with an async engine override it);
        yields events, then a ``_Final``."""
        gen = self._execute(query, history, session_id, stream, budget, llm)
        async for item in _drive_in_thread(gen, self._async_executor(), budget):
            yield item

    def _async_executor(self) -> Any:
        if self.executor is not None:
            return self.executor
        with self._lock:
            if self._own_executor is None:
                self._own_executor = ThreadPoolExecutor(self.async_max_threads, thread_name_prefix="tool-hub-async")
            return self._own_executor

    def _check_open(self) -> None:
        """Subclasses raise ``UserError`` here when they can no longer answer."""

    def _prepare(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None,
                 files: Sequence[Any]) -> _Prepared:
        self._check_open()
        if not isinstance(query, str) or not query.strip():
            raise UserError("the question is empty: pass a non-empty string to ask()/run()/stream()")
        if chat_history is not None:
            if isinstance(chat_history, (str, bytes, Mapping)) or not isinstance(chat_history, Iterable):
                raise UserError("chat_history must be a list of {'role': ..., 'content': ...} dicts or None")
            chat_history = _prepare_history(chat_history, query)
        if session_id is not None and not isinstance(session_id, str):
            session_id = str(session_id)
        own_memory = chat_history is None
        call_session = session_id is None and not own_memory  # a chatbot's call: tool state ends with it
        if session_id is None:
            session_id = DEFAULT_SESSION if own_memory else f"{CALL_SESSION_PREFIX}{uuid.uuid4().hex}"
        language = detect_language(query, self.prompt_language)
        return _Prepared(query, chat_history, session_id, own_memory, call_session, language, tuple(files or ()))

    def _history(self, prepared: _Prepared, announced: list[Message]) -> list[Message]:
        if prepared.own_memory:
            memory = self._memory(prepared.session_id)
            if announced:
                memory.add_messages(announced)
            return memory.messages()
        return trim_to_budget(normalize_history(prepared.chat_history, prepared.query),
                              self.memory_max_tokens) + announced

    def _announce_all(self, prepared: _Prepared) -> list[Message]:
        announced: list[Message] = []
        for source in prepared.files:
            announced.extend(self._announce(source, prepared.language)[0])
        return announced

    def _begin(self, prepared: _Prepared) -> _Run:
        run = _Run(prepared.session_id, self._new_budget())
        with self._lock:
            self._runs.add(run)
            if not prepared.call_session:
                entry = self._sessions.get(prepared.session_id)
                if entry is None:
                    entry = self._sessions[prepared.session_id] = _Session()
                self._sessions.move_to_end(prepared.session_id)
                entry.last_used = self._clock()
                entry.busy += 1
        self.prune_sessions()
        return run

    def _end(self, prepared: _Prepared, run: _Run) -> None:
        run.budget.cancel("the run ended")  # a tool hook still registered is told; charges end
        with self._lock:
            self._runs.discard(run)
            entry = self._sessions.get(prepared.session_id)
            if entry is not None and not prepared.call_session:
                entry.busy = max(0, entry.busy - 1)
                entry.last_used = self._clock()
                self._sessions.move_to_end(prepared.session_id)
        if prepared.call_session:
            self._end_tool_session(prepared.session_id)

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, *, stream: bool,
              files: Sequence[Any] = (), llm_options: Mapping[str, Any] | None = None):
        prepared = self._prepare(query, chat_history, session_id, files)
        run = self._begin(prepared)
        try:
            history = self._history(prepared, self._announce_all(prepared) if prepared.files else [])
            llm = with_options(self.llm, **dict(llm_options or {}))
            result = yield from self._execute(prepared.query, history, prepared.session_id, stream, run.budget, llm)
            if prepared.own_memory:
                self._memory(prepared.session_id).add_turn(prepared.query, result.output)
            return result
        finally:
            self._end(prepared, run)

    async def _aiter(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, *,
                     stream: bool, files: Sequence[Any] = (),
                     llm_options: Mapping[str, Any] | None = None) -> AsyncIterator[Any]:
        prepared = self._prepare(query, chat_history, session_id, files)
        run = self._begin(prepared)
        executor = self._async_executor()
        loop = asyncio.get_running_loop()
        try:
            announced = (await loop.run_in_executor(executor, self._announce_all, prepared)) if prepared.files else []
            history = self._history(prepared, announced)
            llm = with_options(self.llm, **dict(llm_options or {}))
            result = None
            async for item in self._aexecute(prepared.query, history, prepared.session_id, stream, run.budget, llm):
                if isinstance(item, _Final):
                    result = item.result
                else:
                    yield item
            if prepared.own_memory and result is not None:
                self._memory(prepared.session_id).add_turn(prepared.query, result.output)
            yield _Final(result)
        finally:
            self._end(prepared, run)

    def _end_tool_session(self, session_id: str) -> None:
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

    def _memory(self, session_id: str) -> ConversationMemory:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                entry = self._sessions[session_id] = _Session(last_used=self._clock())
            else:
                entry.last_used = self._clock()
                self._sessions.move_to_end(session_id)
            if entry.memory is None:
                entry.memory = ConversationMemory(self.memory_max_tokens)
            return entry.memory


async def _notifying(source: AsyncIterator[Any], callbacks: Sequence[Callback]) -> AsyncIterator[Any]:
    try:
        async for item in source:
            if not isinstance(item, _Final):
                notify(callbacks, item)
            yield item
    finally:
        await source.aclose()


async def _drive_in_thread(gen: Generator[Event, None, Any], executor: Any, budget: RunBudget) -> AsyncIterator[Any]:
    """A sync run generator driven in one thread, a step each time the reader asks for the next event
    (as a generator is read), then a ``_Final``. Closed or cancelled early: the run is cancelled, the
    generator closed in its thread, and the thread waited for."""
    loop = asyncio.get_running_loop()
    asks: queue.SimpleQueue = queue.SimpleQueue()
    items: asyncio.Queue = asyncio.Queue()

    def post(item: Any) -> None:
        loop.call_soon_threadsafe(items.put_nowait, item)

    def drive() -> None:
        try:
            while asks.get():
                try:
                    event = next(gen)
                except StopIteration as stop:
                    post(_Final(stop.value))
                    return
                except BaseException as exc:  # noqa: BLE001 - raised in the reader
                    post(_Raised(exc))
                    return
                post(event)
        finally:
            gen.close()

    worker = loop.run_in_executor(executor, drive)
    finished = False
    try:
        while True:
            asks.put(True)
            item = await items.get()
            if isinstance(item, _Raised):
                finished = True
                raise item.error
            yield item
            if isinstance(item, _Final):
                finished = True
                return
    finally:
        asks.put(False)
        if not finished:
            budget.cancel("the caller went away")
        while not worker.done():  # never leave the run going on in its thread
            try:
                await asyncio.wait({worker})
            except asyncio.CancelledError:
                continue


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


# ---- chat history as chatbots pass it ----------------------------------------------------------


def _content_text(content: Any) -> Any:
    """Message content as text: OpenAI's list-of-parts format (vision) keeps its text, images become
    ``[image]``; other content is left to ``normalize_history``."""
    if isinstance(content, (list, tuple)):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                kind = str(part.get("type") or "")
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif kind in ("image_url", "image", "input_image") or "image_url" in part:
                    parts.append("[image]")
                elif kind in ("input_audio", "audio"):
                    parts.append("[audio]")
                elif kind == "file" or "file" in part:
                    parts.append("[file]")
        return "\n".join(p for p in parts if p)
    if isinstance(content, Mapping) and isinstance(content.get("text"), str):
        return content["text"]
    return content


def _squash(text: str) -> str:
    return " ".join(text.split())


def _prepare_history(chat_history: Iterable[Any], query: str) -> list[Any]:
    """Plain role/content dicts; a trailing copy of ``query`` is made exact so it is dropped later.

    Chatbots append the question to their session before asking, sometimes with other spacing
    or with their trigger word (``$tool question``); that copy must not be sent twice.
    """
    items: list[Any] = []
    for item in chat_history:
        if isinstance(item, Mapping):
            role = item.get("role")
            items.append({"role": role.strip().lower() if isinstance(role, str) else role,
                          "content": _content_text(item.get("content"))})
        else:
            items.append(item)  # skipped by normalize_history
    for item in reversed(items):
        if not isinstance(item, dict) or item.get("role") not in ("user", "assistant") or item.get("content") is None:
            continue  # what normalize_history skips does not count as the last message
        content = item["content"]
        if item["role"] == "user" and isinstance(content, str):
            wanted = _squash(query)
            trigger = _TRIGGER.fullmatch(content.strip())
            if _squash(content) == wanted or (trigger and _squash(trigger.group(1)) == wanted):
                item["content"] = query
        break
    return items
