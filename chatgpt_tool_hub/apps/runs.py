"""The runs of an app: each question in flight, its run control, and the drivers that read it.

Every question is one run with its own :class:`~chatgpt_tool_hub.run.control.RunBudget`
(the limits of the whole tree of work it starts, and its cancel). :class:`Runs`
keeps the runs in flight so that ``app.cancel()`` reaches them from any thread.
A run is a generator of events whose return value is its result; the drivers
here read it: :func:`drain` (``run``), :func:`adrain` (``arun``),
:func:`drive_in_thread` (a sync run on an event loop, one step at a time in a
thread) and :class:`AsyncRun` (what ``astream`` returns). Observers are called
through :func:`notify`, which never lets one break a run.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable, Generator, Sequence

from ..events import Event
from ..run.control import RunBudget
from ..runtime.bridge import aiter_in_thread

__all__ = ["Run", "Runs", "Final", "AsyncRun", "Callback", "notify", "notifying", "drain", "adrain",
           "drive_in_thread"]

log = logging.getLogger("chatgpt_tool_hub.apps")
Callback = Callable[[Event], None]


def notify(callbacks: Sequence[Callback], event: Event) -> None:
    """Call every observer; one that raises is logged and never breaks the run."""
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            log.warning("callback %r raised", callback, exc_info=True)


@dataclass(eq=False)
class Run:
    """One question in flight: its session and its run control."""

    session_id: str
    budget: RunBudget


class Runs:
    """The runs in flight of one app; thread-safe."""

    def __init__(self) -> None:
        self._runs: set[Run] = set()
        self._lock = threading.Lock()

    def start(self, session_id: str, limits: tuple[int | None, int | None]) -> Run:
        """A new run with a fresh budget of ``limits`` (max LLM calls, max tool calls), cancellable from now on."""
        run = Run(session_id, RunBudget(max_llm_calls=limits[0], max_tool_calls=limits[1]))
        with self._lock:
            self._runs.add(run)
        return run

    def end(self, run: Run) -> None:
        """The run is over: a tool hook still registered is told, and charges end."""
        run.budget.cancel("the run ended")
        with self._lock:
            self._runs.discard(run)

    def cancel(self, session_id: str | None = None) -> int:
        """Cancel the runs in flight (one session's, or all); returns how many were cancelled."""
        with self._lock:
            runs = [r for r in self._runs if session_id is None or r.session_id == session_id]
        return sum(1 for run in runs if run.budget.cancel("cancelled by the caller"))


@dataclass
class Final:
    """The last item of the async drivers: the run's result."""

    result: Any


def drain(run: Generator[Event, None, Any], callbacks: Sequence[Callback]) -> Any:
    """Read a run to its end, showing every event to ``callbacks``; returns its result."""
    while True:
        try:
            event = next(run)
        except StopIteration as stop:
            return stop.value
        notify(callbacks, event)


async def adrain(source: AsyncGenerator[Any, None], callbacks: Sequence[Callback]) -> Any:
    """:func:`drain` for an async run (events, then a :class:`Final`); closes ``source`` whatever happens."""
    result = None
    try:
        async for item in source:
            if isinstance(item, Final):
                result = item.result
            else:
                notify(callbacks, item)
    finally:
        await source.aclose()
    return result


async def notifying(source: AsyncGenerator[Any, None], callbacks: Sequence[Callback]) -> AsyncGenerator[Any, None]:
    """The items of an async run, each event shown to ``callbacks`` first."""
    try:
        async for item in source:
            if not isinstance(item, Final):
                notify(callbacks, item)
            yield item
    finally:
        await source.aclose()


def drive_in_thread(run: Generator[Event, None, Any], executor: Any,
                    budget: RunBudget) -> AsyncGenerator[Any, None]:
    """A sync run read on the event loop: driven in one thread of ``executor``, a step each time the reader
    asks for the next event (as a generator is read), then a :class:`Final`. Closed or cancelled early:
    the run is cancelled, the generator closed in its thread, and the thread waited for."""
    return aiter_in_thread(lambda: _with_final(run), executor, lockstep=True,
                           on_abandon=lambda: budget.cancel("the caller went away"))


def _with_final(run: Generator[Event, None, Any]) -> Generator[Any, None, None]:
    """The run's events, then its result as a :class:`Final`."""
    yield Final((yield from run))


class AsyncRun:
    """What ``app.astream()`` returns: an async iterator of events; ``result`` is set when it ends.

    Stop reading early with ``await run.aclose()`` (or leave an ``async for``): the run is
    cancelled and what its tools started is stopped.
    """

    def __init__(self, source: AsyncGenerator[Any, None]):
        self._source = source
        self.result: Any = None

    def __aiter__(self) -> "AsyncRun":
        return self

    async def __anext__(self) -> Event:
        item = await self._source.__anext__()
        if isinstance(item, Final):
            self.result = item.result
            await self._source.aclose()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        await self._source.aclose()
