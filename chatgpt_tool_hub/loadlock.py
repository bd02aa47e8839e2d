"""The process-wide model-load lock and call gate (pure, no package imports).

Building a transformers or diffusers model changes process-wide state while
it runs (the default dtype, ``torch.nn.init`` functions, weight tying), so two
loads at once in two threads corrupt each other (weights left on the ``meta``
device). Every loader takes ``PROCESS_LOAD_LOCK``: the expert tools' model
managers, the planner's embedding model and ``local:`` LLMs.

A load in half precision also switches torch's default dtype, for every
thread, for as long as the model is built: a model call running meanwhile in
another thread makes its new tensors in float16. ``CALL_GATE`` keeps them
apart: model calls share it (``calling()``), a load that switches the default
dtype has it alone (``switching()``: it waits for the running calls, and calls
wait for it). A thread that loads a model inside its own call (a detector its
tool needs) gives up its share while it loads (``suspended()``), so a load
never waits for a thread that waits for that load.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Iterator

__all__ = ["ProcessLoadLock", "PROCESS_LOAD_LOCK", "CallGate", "CALL_GATE"]

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
        """Hold the lock to load ``label``; says in the log when it waits for another model's load. The
        thread's share of the call gate is given up meanwhile."""
        with CALL_GATE.suspended():
            if not self._lock.acquire(blocking=False):
                log.info("%s waits for %s to finish loading (one load at a time per process)", label,
                         self.loading)
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


class CallGate:
    """Shared by model calls, had alone by a load that switches torch's process-wide default dtype."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._calls = 0  # threads in a call (each counted once, however deep its calls nest)
        self._switcher: int | None = None  # the thread whose load has the gate alone
        self._local = threading.local()

    @property
    def calls(self) -> int:
        return self._calls

    def _enter(self) -> None:
        me = threading.get_ident()
        with self._cond:
            while self._switcher is not None and self._switcher != me:
                self._cond.wait()
            if self._switcher != me:
                self._calls += 1
                self._local.counted = True

    def _leave(self) -> None:
        if getattr(self._local, "counted", False):
            self._local.counted = False
            with self._cond:
                self._calls -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """A model call: waits while a load switches the default dtype; calls run side by side."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._enter()
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._leave()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """This thread loads (or waits for a load): its call's share is given up until the load is done."""
        if not getattr(self._local, "counted", False):
            yield
            return
        self._leave()
        try:
            yield
        finally:
            self._enter()

    @contextlib.contextmanager
    def switching(self, label: str) -> Iterator[None]:
        """A load that switches the default dtype: it waits for the running calls; new calls wait for it."""
        me = threading.get_ident()
        if self._switcher == me:
            yield
            return
        with self.suspended():
            with self._cond:
                if self._calls or self._switcher is not None:
                    log.info("%s waits for %d running model call(s): building it switches torch's default "
                             "dtype for every thread", label, self._calls)
                while self._calls or self._switcher is not None:
                    self._cond.wait()
                self._switcher = me
            try:
                yield
            finally:
                with self._cond:
                    self._switcher = None
                    self._cond.notify_all()



CALL_GATE = CallGate()
PROCESS_LOAD_LOCK = ProcessLoadLock()
