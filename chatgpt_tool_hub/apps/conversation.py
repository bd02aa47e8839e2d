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
import re
import threading
import uuid
from typing import Any, Callable, Generator, Iterable, Iterator, Mapping, Sequence

from ..engine.budget import Budget
from ..engine.memory import ConversationMemory, normalize_history, trim_to_budget
from ..engine.prompts import detect_language
from ..errors import UserError
from ..events import Event
from ..llm.base import LLM, Message
from ..tools.base import Tool
from ..tools.context import AppContext

__all__ = ["ConversationApp", "notify", "DEFAULT_SESSION", "CALL_SESSION_PREFIX", "FileAnnouncer"]

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


class ConversationApp:
    """Base of the apps. Two apps share nothing; one app serves many threads."""

    app_type = "base"
    prompt_language = "auto"

    def __init__(self, llm: LLM, tools: Sequence[Tool] = (), *, memory_max_tokens: int = 2000,
                 approve: Callable[[str, Any], bool] | None = None, callbacks: Sequence[Callback] = (),
                 file_announcer: FileAnnouncer | None = None, context: AppContext | None = None,
                 budget_limits: tuple[int | None, int | None] = (None, None)):
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
            session_id: str | None = None, callbacks: Sequence[Callback] = (), files: Sequence[Any] = ()):
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
               session_id: str | None = None, files: Sequence[Any] = ()) -> Iterator[Event]:
        """Yield typed events (thought, action, observation, token, answer, error) as they happen."""
        for event in self._iter(query, chat_history, session_id, stream=True, files=files):
            notify(self.callbacks, event)
            yield event

    async def aask(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, files: Sequence[Any] = ()) -> str:
        """``ask`` for asyncio: runs in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self.ask, query, chat_history, session_id=session_id, files=files)

    async def arun(self, query: str, chat_history: Sequence[Message] | None = None, *,
                   session_id: str | None = None, files: Sequence[Any] = ()):
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
        """Close the tools and unload the app's expert models (the app's own manager; a later call
        loads what it needs again)."""
        for tool in self.tools:
            try:
                tool.close()
            except Exception:
                log.debug("closing %s failed", tool.name, exc_info=True)
        models = self.context.models
        if models is not None:
            models.clear()

    # ---- internals -----------------------------------------------------------------------

    def _new_budget(self) -> Budget:
        """The budget of one question, shared by everything that works on it."""
        return Budget(max_llm_calls=self.budget_limits[0], max_tool_calls=self.budget_limits[1])

    def _execute(self, query: str, history: list[Message], session_id: str,
                 stream: bool) -> Generator[Event, None, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_open(self) -> None:
        """Subclasses raise ``UserError`` here when they can no longer answer."""

    def _iter(self, query: str, chat_history: Sequence[Message] | None, session_id: str | None, *, stream: bool,
              files: Sequence[Any] = ()):
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
        try:
            language = detect_language(query, self.prompt_language)
            announced: list[Message] = []
            for source in files or ():
                announced.extend(self._announce(source, language)[0])
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
        finally:
            if call_session:
                self._end_tool_session(session_id)

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
            memory = self._sessions.get(session_id)
            if memory is None:
                memory = self._sessions[session_id] = ConversationMemory(self.memory_max_tokens)
            return memory


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
