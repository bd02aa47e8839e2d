"""A cap on live worker processes shared by several pools: all the ``python`` tools of a server's users.

Each ``python`` tool keeps its own pool of workers (``python_max_workers``).
A server builds one app per user, so without a shared count 1000 users could
hold 8000 workers. :class:`WorkerLimit` is that count: a pool :meth:`take`\\ s
a place before it starts a worker and :meth:`give`\\ s it back when the worker
has ended. When every place is taken, the least recently used *idle* worker of
any registered pool is stopped to make room; when all are busy, :meth:`take`
says no and the call is refused with a message naming ``setting``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

__all__ = ["WorkerLimit", "Reclaimable"]

_RECLAIM_TRIES = 8  # idle workers stopped at most to make room for one new worker


class Reclaimable(Protocol):
    """A pool whose idle workers may be stopped to make room for another pool's."""

    def oldest_idle(self) -> float | None:
        """When its least recently used idle worker was last used (``time.monotonic()``); None: none idle."""

    def stop_oldest_idle(self) -> bool:
        """Stop that worker (its place is given back when it has ended); False when none was idle."""


class WorkerLimit:
    """At most ``limit`` workers alive across every pool that uses it (``limit <= 0``: no limit)."""

    def __init__(self, limit: int, setting: str = "serve_max_python_workers"):
        self.limit = int(limit)
        self.setting = setting
        self._lock = threading.Lock()
        self._live = 0
        self._pools: "weakref.WeakSet[Reclaimable]" = weakref.WeakSet()

    @property
    def live(self) -> int:
        with self._lock:
            return self._live

    def register(self, pool: Reclaimable) -> None:
        """Let this limit stop ``pool``'s idle workers to make room (the pool is held weakly)."""
        with self._lock:
            self._pools.add(pool)

    def take(self) -> bool:
        """A place for one new worker: True (give it back with :meth:`give`), or False when every place is
        held by a busy worker."""
        for _ in range(_RECLAIM_TRIES + 1):
            with self._lock:
                if self.limit <= 0 or self._live < self.limit:
                    self._live += 1
                    return True
                pools = list(self._pools)
            if not self._reclaim(pools):
                return False
        return False

    def give(self) -> None:
        with self._lock:
            self._live = max(0, self._live - 1)

    @staticmethod
    def _reclaim(pools: list[Reclaimable]) -> bool:
        """Stop the least recently used idle worker of ``pools``; False when none is idle."""
        ages = [(when, index) for index, pool in enumerate(pools) if (when := pool.oldest_idle()) is not None]
        for _, index in sorted(ages):
            if pools[index].stop_oldest_idle():
                return True
        return False

    def message(self) -> str:
        return (f"this server runs its most python worker processes ({self.limit}, {self.setting}) and all of "
                f"them are busy; try again in a moment")
