"""Chat history: per-session memory with a token budget, and caller-supplied history.

``chat_history`` as chatbots pass it is a list of ``{"role", "content"}``
dicts whose last user message may already be the current question; it is
normalised here so the question is never sent twice.

Token counts are cached per message: a session's memory keeps each stored
message's count, and :func:`message_tokens` keeps the counts of recent
messages by content (a chatbot sends the same history again each turn), so
adding to or reading a history never tokenises it all again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable, Sequence

from ..llm.base import Message
from ..llm.tokens import count_message_tokens

__all__ = ["ConversationMemory", "normalize_history", "trim_to_budget", "message_tokens"]

_ROLES = {"user", "assistant"}
_CACHE_SIZE = 8192  # messages whose counts are kept by content
_cache: "OrderedDict[tuple, int]" = OrderedDict()
_cache_lock = threading.Lock()


def message_tokens(message: Message, model: str | None = None) -> int:
    """The tokens of one message in a prompt (role overhead included); cached by content."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or len(message) != 2:  # tool calls, names ...: counted each time
        return count_message_tokens([message], model)
    key = (model, message.get("role"), len(content), hash(content))
    with _cache_lock:
        cost = _cache.get(key)
        if cost is not None:
            _cache.move_to_end(key)
            return cost
    cost = count_message_tokens([message], model)
    with _cache_lock:
        _cache[key] = cost
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return cost


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


def trim_to_budget(messages: Sequence[Message], max_tokens: int, model: str | None = None,
                   costs: Sequence[int] | None = None) -> list[Message]:
    """The newest messages that fit in ``max_tokens`` (whole messages only); ``costs`` are their token
    counts when the caller knows them."""
    return [messages[i] for i in _kept(messages, max_tokens, model, costs)]


def _kept(messages: Sequence[Message], max_tokens: int, model: str | None,
          costs: Sequence[int] | None) -> range:
    """The indexes of the newest messages that fit, as a range (no orphaned answer first)."""
    if max_tokens <= 0:
        return range(0)
    start = len(messages)
    used = 0
    for i in range(len(messages) - 1, -1, -1):
        cost = costs[i] if costs is not None else message_tokens(messages[i], model)
        if used + cost > max_tokens:
            break
        used += cost
        start = i
    while start < len(messages) and messages[start]["role"] == "assistant":  # never start with an orphaned answer
        start += 1
    return range(start, len(messages))


class ConversationMemory:
    """One session's turns, trimmed to a token budget when read. Thread-safe."""

    def __init__(self, max_tokens: int = 2000, model: str | None = None):
        self.max_tokens = max_tokens
        self.model = model
        self._messages: list[Message] = []
        self._costs: list[int] = []  # each stored message's token count, counted once when added
        self._lock = threading.Lock()

    def add_turn(self, user: str, assistant: str) -> None:
        self.add_messages([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}])

    def add_messages(self, messages: Iterable[Message]) -> None:
        new = list(messages)
        costs = [message_tokens(m, self.model) for m in new]  # outside the lock: only the new ones
        with self._lock:
            self._messages.extend(new)
            self._costs.extend(costs)
            # keep storage bounded too: drop what can never be sent again
            kept = _kept(self._messages, self.max_tokens * 2, self.model, self._costs)
            if not kept:
                kept = range(max(0, len(self._messages) - 2), len(self._messages))
            if kept.start:
                del self._messages[:kept.start]
                del self._costs[:kept.start]

    def messages(self) -> list[Message]:
        with self._lock:
            kept = _kept(self._messages, self.max_tokens, self.model, self._costs)
            return [self._messages[i] for i in kept]

    def pop_turn(self) -> list[Message]:
        """Remove and return the last user message and the assistant reply after it; ``[]`` (nothing
        removed) when the memory does not end with such a pair."""
        with self._lock:
            if len(self._messages) < 2 or self._messages[-1].get("role") != "assistant" \
                    or self._messages[-2].get("role") != "user":
                return []
            popped = self._messages[-2:]
            del self._messages[-2:]
            del self._costs[-2:]
            return popped

    def clear(self) -> None:
        with self._lock:
            self._messages.clear()
            self._costs.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)
