"""What a question is asked with: its checked inputs, and the history the run gets.

A question keeps the app's own memory of its session, or, when the caller
passes ``chat_history`` (a chatbot that keeps the conversation itself), that
history instead. Chatbots pass OpenAI-style messages (content as a list of
parts for vision) and often append the question itself, sometimes after their
trigger word (``$tool question``): :func:`prepare_history` makes them plain
role/content dicts and that copy exact, so it is dropped once, not sent twice.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..engine.memory import ConversationMemory, normalize_history, trim_to_budget
from ..engine.prompts import detect_language
from ..errors import UserError
from ..llm.base import Message
from .sessions import CALL_SESSION_PREFIX, DEFAULT_SESSION

__all__ = ["Question", "question", "as_files", "announcements", "prepare_history", "given_history",
           "remembered_history"]

# "$tool question", "#tool question", "/tool question": a chatbot's trigger word before the question
_TRIGGER = re.compile(r"[$#/!@][^\s]{1,24}\s+(.*)", re.S)


@dataclass
class Question:
    """One question's inputs, checked, with the session it runs in."""

    query: str
    chat_history: list | None  # None: the session's memory is the history
    session_id: str
    own_memory: bool  # the app's memory of the session is read and the turn stored
    call_session: bool  # a session made for this call alone: its tool state ends with it
    language: str
    files: Sequence[Any] = field(default_factory=tuple)


def question(query: str, chat_history: Iterable[Any] | None, session_id: Any, files: Any,
             prompt_language: str) -> Question:
    """Check a question's inputs (``UserError`` names what is wrong) and pick its session.

    Without ``session_id`` a call without ``chat_history`` uses the ``"default"`` session, and a
    call with it a session of its own that ends with the call."""
    if not isinstance(query, str) or not query.strip():
        raise UserError("the question is empty: pass a non-empty string to ask()/run()/stream()")
    if chat_history is not None:
        if isinstance(chat_history, (str, bytes, Mapping)) or not isinstance(chat_history, Iterable):
            raise UserError("chat_history must be a list of {'role': ..., 'content': ...} dicts or None")
        chat_history = prepare_history(chat_history, query)
    if session_id is not None and not isinstance(session_id, str):
        session_id = str(session_id)
    own_memory = chat_history is None
    call_session = session_id is None and not own_memory  # a chatbot's call: tool state ends with it
    if session_id is None:
        session_id = DEFAULT_SESSION if own_memory else f"{CALL_SESSION_PREFIX}{uuid.uuid4().hex}"
    return Question(query, chat_history, session_id, own_memory, call_session,
                    detect_language(query, prompt_language), as_files(files))


def as_files(files: Any) -> tuple[Any, ...]:
    """The files handed over with a question: a path (``str``, ``bytes`` or ``os.PathLike``) or another single
    object (a PIL image) is one file, not a sequence of characters; anything else iterable is a collection."""
    if files is None or (isinstance(files, (str, bytes)) and not files):
        return ()
    if isinstance(files, (str, bytes, os.PathLike)) or not isinstance(files, Iterable):
        return (files,)
    return tuple(files)


def announcements(asked: Question, announce: Callable[[Any, str], tuple[list[Message], str]]) -> list[Message]:
    """The messages that announce the files handed over with the question (``announce(source, language)``
    copies one into the workspace)."""
    announced: list[Message] = []
    for source in asked.files:
        announced.extend(announce(source, asked.language)[0])
    return announced


def given_history(asked: Question, announced: list[Message], max_tokens: int) -> list[Message]:
    """The caller's ``chat_history``, trimmed to ``max_tokens``, then the announcements of the files handed over."""
    return trim_to_budget(normalize_history(asked.chat_history, asked.query), max_tokens) + announced


def remembered_history(memory: ConversationMemory, announced: list[Message]) -> list[Message]:
    """The session's memory, after the announcements of the files handed over are added to it."""
    if announced:
        memory.add_messages(announced)
    return memory.messages()


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


def prepare_history(chat_history: Iterable[Any], query: str) -> list[Any]:
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
