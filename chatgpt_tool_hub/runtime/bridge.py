"""The thread <-> event-loop bridges: the one place where blocking work meets asyncio, and where a
cancel signal from any thread ends a wait.

Waiting in a thread, ended by a cancel signal (an object with ``check()``, which
raises once cancelled, and ``on_cancel(hook)``: the run's ``RunBudget``):

- :func:`interruptible` runs ``work()`` in a helper thread; ``cancel()`` ends the wait at once;
- :func:`interruptible_iter` reads an iterator in a helper thread, item by item, the same way.

On an event loop:

- :func:`cancellable` reads an async iterator; ``cancel()`` from any thread abandons the wait;
- :func:`aiter_in_thread` reads a blocking iterator in one thread of an executor, either ahead
  (a stream: items arrive as they are made) or in lockstep (a run generator: one step each time
  the reader asks, and the thread is never left running when the reader goes away);
- :func:`await_in_thread` awaits ``work()`` in an executor thread; a cancelled awaiting task waits
  for the thread to end before ``CancelledError`` goes on.

From synchronous code onto a loop: a :class:`LoopThread` owns an event loop on
a daemon thread, for async clients (the MCP SDK) whose tasks outlive one call,
and a :class:`HeldContext` keeps async resources (a transport, a session)
entered on it until closed::

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
import queue
import threading
from typing import (
    Any,
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Protocol,
    TypeVar,
)

__all__ = ["CancelSignal", "interruptible", "interruptible_iter", "cancellable", "aiter_in_thread",
           "await_in_thread", "LoopThread", "HeldContext", "unwrap_exception"]

T = TypeVar("T")


class CancelSignal(Protocol):
    """What ends a bridged wait: ``check()`` raises once cancelled; ``on_cancel(hook)`` runs ``hook`` on
    cancel (at once when already cancelled) and returns a remover."""

    def check(self) -> None:
        ...

    def on_cancel(self, hook: Callable[[], Any]) -> Callable[[], None]:
        ...


class _Raised:
    """An error raised in the producing thread, handed to the reader to raise."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


_END = object()     # the iterator is exhausted
_CANCEL = object()  # the cancel signal fired


def _produce(open_iter: Callable[[], Iterable[Any]], post: Callable[[Any], None], go: Callable[[], bool]) -> None:
    """Read ``open_iter()`` in this thread: each item is posted while ``go()`` says to take the next one,
    then ``_END`` (after the iterator is closed), or the error wrapped in ``_Raised``."""
    try:
        source = open_iter()
        try:
            items = iter(source)
            while go():
                try:
                    item = next(items)
                except StopIteration:
                    break
                post(item)
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()
        post(_END)
    except BaseException as exc:  # noqa: BLE001 - raised in the reader
        post(_Raised(exc))


# ---- waiting in a thread ------------------------------------------------------------------------


def interruptible_iter(open_iter: Callable[[], Iterable[T]], cancel: CancelSignal, *,
                       name: str = "tool-hub-llm-stream") -> Generator[T, None, None]:
    """The items of ``open_iter()``, read in a helper thread; ``cancel`` ends the wait for the next one
    (its ``check()`` raises). An abandoned reader stops the thread after the item it is reading."""
    cancel.check()
    items: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    remove = cancel.on_cancel(lambda: items.put(_CANCEL))
    try:
        threading.Thread(target=_produce, args=(open_iter, items.put, lambda: not stop.is_set()), name=name,
                         daemon=True).start()
        while True:
            item = items.get()
            if item is _CANCEL:
                cancel.check()
                continue
            if item is _END:
                return
            if isinstance(item, _Raised):
                cancel.check()  # cancelled meanwhile: the cancel wins over an error it may have caused
                raise item.error
            yield item
    finally:
        stop.set()
        remove()


def interruptible(work: Callable[[], T], cancel: CancelSignal, *, name: str = "tool-hub-llm") -> T:
    """``work()`` in a helper thread; ``cancel`` ends the wait at once (its ``check()`` raises; the result
    is dropped)."""
    with contextlib.closing(interruptible_iter(lambda: _once(work), cancel, name=name)) as results:
        for result in results:
            cancel.check()  # cancelled while the result came: the run ends all the same
            return result
    raise AssertionError("unreachable")  # pragma: no cover - _once yields exactly one item


def _once(work: Callable[[], T]) -> Iterator[T]:
    yield work()


# ---- on an event loop -----------------------------------------------------------------------------


async def cancellable(source: AsyncIterator[T], cancel: CancelSignal | None) -> AsyncGenerator[T, None]:
    """The items of ``source``; with a ``cancel`` signal, firing it (from any thread) abandons the wait
    and its ``check()`` raises here. The abandoned source is closed in the background."""
    if cancel is None:
        try:
            async for item in source:
                yield item
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
        return
    loop = asyncio.get_running_loop()
    items: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                items.put_nowait(item)
            items.put_nowait(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader (CancelledError: we stopped it)
            items.put_nowait(_Raised(exc))
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except BaseException:  # noqa: BLE001 - closing an abandoned stream
                    pass

    task = loop.create_task(pump())

    def wake() -> None:
        items.put_nowait(_CANCEL)
        task.cancel()

    remove = cancel.on_cancel(lambda: loop.call_soon_threadsafe(wake))
    try:
        while True:
            item = await items.get()
            if item is _CANCEL:
                cancel.check()
                continue
            if item is _END:
                return
            if isinstance(item, _Raised):
                cancel.check()  # cancelled meanwhile: the cancel wins over an error it may have caused
                raise item.error
            yield item
    finally:
        remove()
        if not task.done():
            task.cancel()


async def aiter_in_thread(open_iter: Callable[[], Iterable[T]], executor: Any = None, *, lockstep: bool = False,
                          on_abandon: Callable[[], Any] | None = None) -> AsyncGenerator[T, None]:
    """The items of ``open_iter()``, read in one thread of ``executor`` (None: the loop's default) and
    handed to the event loop in order; an error raised there is raised here.

    ``lockstep=False`` (a stream): the thread reads ahead, items arrive as they are made; a reader
    that leaves early stops the thread after the item it is reading, without waiting for it.
    ``lockstep=True`` (a run generator): the thread takes the next item only when the reader asks for
    it. A reader that leaves before the end (closed, or its task cancelled) calls ``on_abandon()``
    (cancel the run: what it started is stopped), the iterator is closed in its thread, and the
    thread is waited for: nothing is left running.
    """
    loop = asyncio.get_running_loop()
    items: asyncio.Queue = asyncio.Queue()
    asks: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def post(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(items.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody reads any more
            pass

    go = asks.get if lockstep else (lambda: not stop.is_set())
    worker = loop.run_in_executor(executor, _produce, open_iter, post, go)
    ended = False
    try:
        while True:
            if lockstep:
                asks.put(True)
            item = await items.get()
            if item is _END:
                ended = True
                return
            if isinstance(item, _Raised):
                ended = True
                raise item.error
            yield item
    finally:
        stop.set()
        if not lockstep:
            _forget(worker)
        else:
            asks.put(False)
            if not ended and on_abandon is not None:
                on_abandon()
            await _wait_out(worker)


async def await_in_thread(work: Callable[[], T], executor: Any = None, *,
                          on_abandon: Callable[[], Any] | None = None) -> T:
    """``work()`` in a thread of ``executor`` (None: the loop's default), awaited. When the awaiting task
    is cancelled, ``on_abandon()`` is called (cancel the run: what the work started is stopped) and the
    thread is waited for before ``CancelledError`` goes on: the work is never left running."""
    future = asyncio.get_running_loop().run_in_executor(executor, work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if on_abandon is not None:
            on_abandon()
        await _wait_out(future)
        raise


async def _wait_out(future: "asyncio.Future[Any]") -> None:
    """Wait until ``future`` is done, whatever cancels the waiting task meanwhile."""
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError:
            continue
    _forget(future)


def _forget(future: "asyncio.Future[Any]") -> None:
    """Retrieve the error of a future nobody awaits any more (no "exception was never retrieved")."""
    if future.done():
        if not future.cancelled():
            future.exception()
    else:
        future.add_done_callback(lambda f: f.cancelled() or f.exception())


# ---- a loop on its own thread, for synchronous callers ------------------------------------------------


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
