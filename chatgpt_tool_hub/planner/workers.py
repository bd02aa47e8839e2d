"""An elastic pool of daemon threads for running tasks.

Why not ``concurrent.futures.ThreadPoolExecutor``: a hung tool would keep one
of its fixed workers forever (later tasks queue behind it) and its workers are
joined at interpreter exit (a hung tool would block exit). This pool reuses
idle threads (dispatch is a queue put, no thread start on the hot path),
starts a new daemon thread whenever none is idle, and lets threads idle for
``idle_exit`` seconds exit. Concurrency limits are the caller's job (the DAG
scheduler never submits more than ``max_workers`` live tasks).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

__all__ = ["DaemonPool"]

log = logging.getLogger("chatgpt_tool_hub.planner")
_STOP = object()


class DaemonPool:
    def __init__(self, name: str = "planner-worker", idle_exit: float = 60.0):
        self.name = name
        self.idle_exit = idle_exit
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0      # waiting threads not yet promised a job
        self._threads = 0
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            spawn = self._idle == 0
            if spawn:
                self._threads += 1
                number = self._threads
            else:
                self._idle -= 1  # promise this job to one waiting thread
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._loop, name=f"{self.name}-{number}", daemon=True).start()

    def warm(self, count: int) -> None:
        """Start threads up to ``count`` idle ones now, so the first tasks do not pay for thread starts."""
        with self._lock:
            missing = max(0, count - self._idle)
            self._idle += missing
            self._threads += missing
            first = self._threads - missing
        for i in range(missing):
            threading.Thread(target=self._loop, name=f"{self.name}-{first + i + 1}", daemon=True).start()

    def close(self) -> None:
        """Idle threads exit; busy ones exit after their job."""
        with self._lock:
            self._closed = True
            count = self._threads
        for _ in range(count):
            self._jobs.put(_STOP)

    @property
    def threads(self) -> int:
        with self._lock:
            return self._threads

    def _loop(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_exit)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody is owed this thread: leave
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue  # a job was promised to a waiting thread and is on its way
            if job is _STOP:
                with self._lock:
                    self._threads -= 1
                return
            try:
                job()
            except BaseException:  # jobs handle their own errors; this is a last resort that keeps the count right
                log.exception("a planner worker job raised")
            with self._lock:
                self._idle += 1
