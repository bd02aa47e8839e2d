"""The sessions an app keeps: its memory of each conversation, bounded in number and idle time.

A session is named by ``session_id``; the app keeps its memory (when the app
remembers the conversation) and the tools keep their state for it (a python
worker). :class:`Sessions` holds at most ``max_sessions`` of them, least
recently used first out, and none idle past ``ttl_s``; a session with a run in
flight is never evicted. It returns the ids it evicted: resetting their tool
state is the app's business.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from ..engine.memory import ConversationMemory

__all__ = ["Sessions", "DEFAULT_SESSION", "CALL_SESSION_PREFIX"]

DEFAULT_SESSION = "default"
CALL_SESSION_PREFIX = "call-"  # sessions made for one call with chat_history and no session_id


@dataclass
class _Session:
    memory: ConversationMemory | None = None  # None: only the tools keep state for it
    last_used: float = 0.0
    busy: int = 0  # runs in flight: never evicted meanwhile


class Sessions:
    """The sessions of one app, least recently used first; thread-safe."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._entries: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def ids(self) -> list[str]:
        """The sessions kept, least recently used first."""
        with self._lock:
            return list(self._entries)

    def memory(self, session_id: str, max_tokens: int) -> ConversationMemory:
        """The session's memory (made on first use, with ``max_tokens``); the session counts as used now."""
        with self._lock:
            entry = self._touch(session_id)
            if entry.memory is None:
                entry.memory = ConversationMemory(max_tokens)
            return entry.memory

    def enter(self, session_id: str) -> None:
        """A run of the session starts: it is used now and cannot be evicted until :meth:`leave`."""
        with self._lock:
            self._touch(session_id).busy += 1

    def leave(self, session_id: str) -> None:
        """A run of the session ended (a session forgotten meanwhile stays forgotten)."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is not None:
                entry.busy = max(0, entry.busy - 1)
                entry.last_used = self._clock()
                self._entries.move_to_end(session_id)

    def forget(self, session_id: str | None = None) -> None:
        """Drop one session, or all of them."""
        with self._lock:
            if session_id is None:
                self._entries.clear()
            else:
                self._entries.pop(session_id, None)

    def prune(self, max_sessions: int, ttl_s: float) -> list[str]:
        """Drop the sessions idle past ``ttl_s`` and those past ``max_sessions`` (least recently used first;
        never one with a run in flight; 0: no limit); returns their ids."""
        now = self._clock()
        victims: list[str] = []
        with self._lock:
            excess = len(self._entries) - max_sessions if max_sessions > 0 else 0
            for sid, entry in self._entries.items():  # least recently used first
                expired = ttl_s > 0 and now - entry.last_used > ttl_s
                if not expired and excess <= 0:
                    break  # the rest were used more recently
                if not entry.busy:
                    victims.append(sid)
                    excess -= 1
            for sid in victims:
                del self._entries[sid]
        return victims

    def _touch(self, session_id: str) -> _Session:
        """The session's entry (made when new), marked as the most recently used; under the lock."""
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = _Session()
        else:
            self._entries.move_to_end(session_id)
        entry.last_used = self._clock()
        return entry
