"""Chat history: per-session memory with a token budget, and caller-supplied history.

``chat_history`` as chatbots pass it is a list of ``{"role", "content"}``
dicts whose last user message may already be the current question; it is
normalised here so the question is never sent twice.

A history is counted only when it may not fit its budget: while the upper
bound of its tokens (``llm.tokens.message_token_bound``, the UTF-8 length plus
the framing, no encoding needed) is within the budget, every message is kept
without loading a tokenizer, the same messages an exact count keeps. Exact
counts are cached per message: a session's memory keeps each stored message's
count once it was needed, and :func:`message_tokens` keeps the counts of
recent messages by content (a chatbot sends the same history again each turn),
so adding to or reading a history never tokenises it all again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable, MutableSequence, Sequence

from ..llm.base import Message
from ..llm.tokens import count_message_tokens, message_token_bound

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
    counts when the caller knows them. Counted only when their upper bound is over the budget."""
    return [messages[i] for i in _kept(messages, max_tokens, model, costs)]


def _kept(messages: Sequence[Message], max_tokens: int, model: str | None,
          costs: Sequence[int | None] | None, bounds: Sequence[int] | None = None) -> range:
    """The indexes of the newest messages that fit, as a range (no orphaned answer first).

    ``costs``: the messages' exact counts where known (``None`` where not yet counted; a mutable list
    gets the counts made here); ``bounds``: their upper bounds where known. While the bounds fit, every
    message fits and nothing is counted."""
    if max_tokens <= 0:
        return range(0)
    if bounds is None:
        known = costs if costs is not None else [None] * len(messages)
        bounds = [message_token_bound([m]) if cost is None else cost
                  for m, cost in zip(messages, known, strict=True)]
    if sum(bounds) <= max_tokens:
        start = 0
    else:
        start = _exact_start(messages, max_tokens, model, costs)
    while start < len(messages) and messages[start]["role"] == "assistant":  # never start with an orphaned answer
        start += 1
    return range(start, len(messages))


def _exact_start(messages: Sequence[Message], max_tokens: int, model: str | None,
                 costs: Sequence[int | None] | None) -> int:
    """The first index of the newest messages whose exact counts fit in ``max_tokens``."""
    start = len(messages)
    used = 0
    for i in range(len(messages) - 1, -1, -1):
        cost = costs[i] if costs is not None else None
        if cost is None:
            cost = message_tokens(messages[i], model)
            if isinstance(costs, MutableSequence):
                costs[i] = cost
        if used + cost > max_tokens:
            break
        used += cost
        start = i
    return start


class ConversationMemory:
    """One session's turns, trimmed to a token budget when read. Thread-safe."""

    def __init__(self, max_tokens: int = 2000, model: str | None = None):
        self.max_tokens = max_tokens
        self.model = model
        self._messages: list[Message] = []
        self._bounds: list[int] = []  # each stored message's upper bound of tokens (no encoding needed)
        self._costs: list[int | None] = []  # its exact count, made the first time the bounds do not fit
        self._lock = threading.Lock()

    def add_turn(self, user: str, assistant: str) -> None:
        self.add_messages([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}])

    def add_messages(self, messages: Iterable[Message]) -> None:
        new = list(messages)
        bounds = [message_token_bound([m]) for m in new]  # outside the lock: only the new ones
        with self._lock:
            self._messages.extend(new)
            self._bounds.extend(bounds)
            self._costs.extend([None] * len(new))
            # keep storage bounded too: drop what can never be sent again
            kept = self._kept(self.max_tokens * 2)
            if not kept:
                kept = range(max(0, len(self._messages) - 2), len(self._messages))
            if kept.start:
                del self._messages[:kept.start]
                del self._bounds[:kept.start]
                del self._costs[:kept.start]

    def _kept(self, max_tokens: int) -> range:
        """(caller holds the lock) The stored messages that fit ``max_tokens``; exact counts where made are
        tighter bounds."""
        bounds = [b if c is None else c for b, c in zip(self._bounds, self._costs, strict=True)]
        return _kept(self._messages, max_tokens, self.model, self._costs, bounds)

    def messages(self) -> list[Message]:
        with self._lock:
            kept = self._kept(self.max_tokens)
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
            del self._bounds[-2:]
            del self._costs[-2:]
            return popped

    def clear(self) -> None:
        with self._lock:
            self._messages.clear()
            self._bounds.clear()
            self._costs.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)
