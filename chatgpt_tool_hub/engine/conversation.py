"""``ConversationApp``: what every app shares, whatever answers the question.

Tools, per-session memory, callbacks, input checks, history resolution,
files handed over, and the ask / run / stream / aask / arun drivers. A
subclass implements ``_execute(query, history, session_id, stream)``, a
generator of events whose return value is the run's result (with an
``output`` string). The ReAct ``App`` and the planner's ``PlannerApp`` are
the two subclasses.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Generator, Iterator, Sequence

from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..tools.base import Tool
from .memory import ConversationMemory, normalize_history, trim_to_budget
from .prompts import detect_language

__all__ = ["ConversationApp", "notify", "DEFAULT_SESSION", "FileAnnouncer"]

log = logging.getLogger("chatgpt_tool_hub.engine")
Callback = Callable[[Event], None]
DEFAULT_SESSION = "default"
# (source, language, tools) -> (announcement messages, workspace-relative name); supplied by the app factory
FileAnnouncer = Callable[[Any, str, dict], "tuple[list[Message], str]"]


def notify(callbacks: Sequence[Callback], event: Event) -> None:
    """Call every observer; one that raises is logged and never breaks the run."""
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            log.warning("callback %r raised", callback, exc_info=True)


class ConversationApp:
    """Base of the apps. Two apps share nothing; one app serves many threads."""

    app_type = "base"
    prompt_language = "auto"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, memory_max_tokens: int = 2000,
                 approve: Callable[[str, Any], bool] | None = None, callbacks: Sequence[Callback] = (),
                 file_announcer: FileAnnouncer | None = None):
        self.llm = llm
        self._tools: dict[str, Tool] = {t.name: t for t in tools}
        self.memory_max_tokens = memory_max_tokens
        self.approve = approve
        self.callbacks = list(callbacks)
        self._file_announcer = file_announcer
        self._sessions: dict[str, ConversationMemory] = {}
        self._lock = threading.RLock()

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
            session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> str:
        """Answer ``query``. ``chat_history`` (role/content dicts) replaces the app's own memory.

        ``files`` (paths of images or WAV audio) are copied into the workspace and
        announced to the model before the question.
        """
        return self.run(query, chat_history, session_id=session_id, files=files).output

    def run(self, query: str, chat_history: Sequence[Message] | None = None, *,
            session_id: str = DEFAULT_SESSION, callbacks: Sequence[Callback] = (), files: Sequence[Any] = ()):
        """Answer ``query`` and return everything that happened."""
        gen = self._iter(query, chat_history, session_id, stream=False, files=files)
        everyone = [*self.callbacks, *callbacks]
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                return stop.value
            notify(everyone, event)

    def stream(self, query: str, chat_history: Sequence[Message] | None = None, *,
               session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> Iterator[Event]:
        """Yield typed events (thought, action, observation, token, answer, error) as they happen."""
        for event in self._iter(query, chat_history, session_id, stream=True, files=files):
            notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()) -> str:
        """``ask`` for asyncio: runs in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self.ask, query, chat_history, session_id=session_id, files=files)

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str = DEFAULT_SESSION, files: Sequence[Any] = ()):
        return await asyncio.to_thread(self.run, query, chat_history, session_id=session_id, files=files)

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

    def add_file(self, source: Any, *, session_id: str = DEFAULT_SESSION, language: str | None = None) -> str:
        """Copy an image or WAV file into the workspace and tell the session about it.

        Returns the new workspace-relative name (``image/{uuid}.png`` or ``audio/{uuid}.wav``).
        """
        messages, name = self._announce(source, language or detect_language("", self.prompt_language))
        self._memory(session_id).add_messages(messages)
        return name

    def close(self) -> None:
        for tool in self.tools:
            try:
                tool.close()
            except Exception:
                log.debug("closing %s failed", tool.name, exc_info=True)

    # ---- internals -----------------------------------------------------------------------

    def _execute(self, query: str, history: list[Message], session_id: str,
                 stream: bool) -> Generator[Event, None, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_open(self) -> None:
        """Subclasses raise ``UserError`` here when they can no longer answer."""

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str, *, stream: bool,
              files: Sequence[Any] = ()):
        self._check_open()
        if not isinstance(query, str) or not query.strip():
            raise UserError("the question is empty: pass a non-empty string to ask()/run()/stream()")
        if chat_history is not None and not isinstance(chat_history, (list, tuple)):
            raise UserError("chat_history must be a list of {'role': ..., 'content': ...} dicts or None")
        language = detect_language(query, self.prompt_language)
        announced: list[Message] = []
        for source in files or ():
            announced.extend(self._announce(source, language)[0])
        own_memory = chat_history is None
        if own_memory:
            if announced:
                self._memory(session_id).add_messages(announced)
            history = self._memory(session_id).messages()
        else:
            history = trim_to_budget(normalize_history(chat_history, query), self.memory_max_tokens) + announced
        result = yield from self._execute(query, history, session_id, stream)
        if own_memory:
            self._memory(session_id).add_turn(query, result.output)
        return result

    def _announce(self, source: Any, language: str) -> tuple[list[Message], str]:
        if self._file_announcer is None:
            raise UserError("this app was built without file handling; build it with AppFactory.create_app "
                            "to hand it files")
        with self._lock:
            tools = dict(self._tools)
        return self._file_announcer(source, language, tools)

    def _memory(self, session_id: str) -> ConversationMemory:
        with self._lock:
            memory = self._sessions.get(session_id)
            if memory is None:
                memory = self._sessions[session_id] = ConversationMemory(self.memory_max_tokens)
            return memory
