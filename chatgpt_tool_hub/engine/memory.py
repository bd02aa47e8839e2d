"""Chat history: per-session memory with a token budget, and caller-supplied history.

``chat_history`` as chatbots pass it is a list of ``{"role", "content"}``
dicts whose last user message may already be the current question; it is
normalised here so the question is never sent twice.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Sequence

from ..llm.base import Message
from ..llm.tokens import count_message_tokens

__all__ = ["ConversationMemory", "normalize_history", "trim_to_budget"]

_ROLES = {"user", "assistant"}


def normalize_history(chat_history: Iterable[Any] | None, query: str | None = None) -> list[Message]:
    """Keep well-formed user/assistant messages; drop a trailing copy of ``query``.

    System messages are dropped (the engine writes its own), malformed entries
    are skipped rather than failing the question.
    """
    messages: list[Message] = []
    for item in chat_history or ():
        if not isinstance(item, dict):
            continue
        role, content = item.get("role"), item.get("content")
        if role not in _ROLES or content is None:
            continue
        if not isinstance(content, str):
            content = str(content)
        messages.append({"role": role, "content": content})
    if query is not None and messages and messages[-1]["role"] == "user" \
            and messages[-1]["content"].strip() == query.strip():
        messages.pop()
    return messages


def trim_to_budget(messages: Sequence[Message], max_tokens: int, model: str | None = None) -> list[Message]:
    """The newest messages that fit in ``max_tokens`` (whole messages only)."""
    if max_tokens <= 0:
        return []
    kept: list[Message] = []
    used = 0
    for message in reversed(messages):
        cost = count_message_tokens([message], model)
        if used + cost > max_tokens:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    while kept and kept[0]["role"] == "assistant":  # never start with an orphaned answer
        kept.pop(0)
    return kept


class ConversationMemory:
    """One session's turns, trimmed to a token budget when read. Thread-safe."""

    def __init__(self, max_tokens: int = 2000, model: str | None = None):
        self.max_tokens = max_tokens
        self.model = model
        self._messages: list[Message] = []
        self._lock = threading.Lock()

    def add_turn(self, user: str, assistant: str) -> None:
        self.add_messages([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}])

    def add_messages(self, messages: Iterable[Message]) -> None:
        with self._lock:
            self._messages.extend(messages)
            # keep storage bounded too: drop what can never be sent again
            self._messages = trim_to_budget(self._messages, self.max_tokens * 2, self.model) or self._messages[-2:]

    def messages(self) -> list[Message]:
        with self._lock:
            snapshot = list(self._messages)
        return trim_to_budget(snapshot, self.max_tokens, self.model)

    def clear(self) -> None:
        with self._lock:
            self._messages.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)
