"""Run coroutines from synchronous code on one background event loop thread.

The engine is synchronous and calls tools from worker threads; async clients
(the MCP SDK) need a running loop whose tasks outlive one call. A
:class:`LoopThread` owns such a loop on a daemon thread, and a
:class:`HeldContext` keeps async resources (a transport, a session) entered on
it until closed::

    bridge = LoopThread("mcp-fs")
    held = HeldContext(bridge, open_session)          # async def open_session(stack) -> session
    session = held.open(timeout=30)
    result = bridge.run(session.call_tool("add", {"a": 1}), timeout=10)   # from any thread
    held.close(); bridge.stop()                       # both safe to call twice
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

__all__ = ["LoopThread", "HeldContext", "unwrap_exception"]

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running forever on its own daemon thread."""

    def __init__(self, name: str = "async-bridge"):
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        if not self.alive:
            coro.close()
            raise RuntimeError("the event loop thread is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result.

        Raises ``TimeoutError`` after ``timeout`` seconds (the coroutine is
        cancelled), or whatever the coroutine raised.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop thread (would deadlock)")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout:g} s") from None
        except concurrent.futures.CancelledError:
            raise TimeoutError("the operation was cancelled") from None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop (cancelling leftover tasks) and join the thread. Idempotent."""
        if self._thread.is_alive() and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:  # closed in between
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


def unwrap_exception(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups (duck-typed: Python 3.10 has no builtin)."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:  # type: ignore[attr-defined]
        group = list(exc.exceptions)  # type: ignore[attr-defined]
        exc = next((e for e in group if not isinstance(e, asyncio.CancelledError)), group[0])
    return exc


class HeldContext:
    """Async resources entered by one long-lived task on a :class:`LoopThread`.

    anyio task groups and cancel scopes must be entered and exited by the same
    task, so ``opener(stack)`` runs inside a serving task that then waits for
    :meth:`close`; ``opener`` enters what it needs onto ``stack`` and returns a
    value (a session) that other tasks may use meanwhile.
    """

    def __init__(self, bridge: LoopThread, opener: Callable[[contextlib.AsyncExitStack], Awaitable[Any]]):
        self.bridge = bridge
        self._opener = opener
        self._task: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self.error: BaseException | None = None  # what ended the serving task after it opened (a dropped transport)

    @property
    def alive(self) -> bool:
        """Opened, and the serving task has not ended (e.g. by a dropped transport)."""
        return self._task is not None and self._stop is not None and not self._task.done()

    def open(self, timeout: float) -> Any:
        """Run the opener; return its value, or raise its (unwrapped) error or ``TimeoutError``."""
        try:
            return self.bridge.run(self._open(timeout), timeout + 15)
        except BaseException as exc:
            raise unwrap_exception(exc) from None

    def ended(self, wait: float = 0.0) -> BaseException | None:
        """Wait up to ``wait`` seconds for a failing serving task to end; return the error that ended it
        (unwrapped), or ``None`` when it still runs or ended cleanly."""
        task = self._task
        if task is not None and not task.done() and wait > 0 and self.bridge.alive:
            try:
                self.bridge.run(asyncio.wait([task], timeout=wait), wait + 5)
            except BaseException:  # noqa: BLE001 - only a diagnosis
                pass
        return self.error

    def close(self, timeout: float = 20) -> None:
        """Unwind the opened resources. Never raises; safe to call twice."""
        if self._task is not None and not self._task.done() and self.bridge.alive:
            try:
                self.bridge.run(self._aclose(timeout - 5), timeout)
            except BaseException:  # noqa: BLE001 - closing must not raise
                pass
        self._task = self._stop = None

    async def _open(self, timeout: float) -> Any:
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout)
        except BaseException:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            raise

    async def _serve(self, ready: asyncio.Future) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                value = await self._opener(stack)
                self._stop = asyncio.Event()
                ready.set_result(value)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - reported through ``ready``; later ones end the task
            inner = unwrap_exception(exc)
            if not ready.done():
                ready.set_exception(inner if isinstance(inner, Exception) else RuntimeError(str(inner)))
            else:
                self.error = inner

    async def _aclose(self, timeout: float) -> None:
        task = self._task
        if task is None:
            return
        if self._stop is not None:
            self._stop.set()
        else:
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), max(timeout, 1))
        except BaseException:  # noqa: BLE001
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
