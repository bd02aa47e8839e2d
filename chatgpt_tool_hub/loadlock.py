"""The process-wide model-load lock (pure, no package imports): one model load at a time per process.

Building a transformers or diffusers model changes process-wide state while
it runs (the default dtype, ``torch.nn.init`` functions, weight tying), so two
loads at once in two threads corrupt each other (weights left on the ``meta``
device). Every loader takes this lock: the expert tools' model managers, the
planner's embedding model and ``local:`` LLMs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Iterator

__all__ = ["ProcessLoadLock", "PROCESS_LOAD_LOCK"]

log = logging.getLogger("chatgpt_tool_hub.experts")


class ProcessLoadLock:
    """A re-entrant lock that knows whether the current thread holds it (for loads inside a load)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._local = threading.local()
        self.loading = "another model"  # what is loading now (for the log)

    def held(self) -> bool:
        """Whether this thread holds the lock."""
        return getattr(self._local, "depth", 0) > 0

    @contextlib.contextmanager
    def hold(self, label: str) -> Iterator[None]:
        """Hold the lock to load ``label``; says in the log when it waits for another model's load."""
        if not self._lock.acquire(blocking=False):
            log.info("%s waits for %s to finish loading (one load at a time per process)", label, self.loading)
            self._lock.acquire()
        self._local.depth = getattr(self._local, "depth", 0) + 1
        outer, self.loading = self.loading, label
        try:
            yield
        finally:
            self.loading = outer
            self._local.depth -= 1
            self._lock.release()

    def __enter__(self) -> "ProcessLoadLock":
        self._lock.acquire()
        self._local.depth = getattr(self._local, "depth", 0) + 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._local.depth -= 1
        self._lock.release()



PROCESS_LOAD_LOCK = ProcessLoadLock()
