"""Cancelling a run, and what the engine's two drivers share.

:class:`RunBudget` is the budget of one run that can also be cancelled from
any thread; :class:`RunCancelled` is what a charge raises after that. The
helpers make the drivers' waits for the LLM interruptible by ``cancel()``:
the sync driver reads the LLM in a helper thread, the async one through a
task whose wait ``cancel()`` ends. :class:`StreamFold` turns a streamed reply
into token events and one response.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterable, Iterator

from ..errors import RunError
from ..events import TokenEvent
from ..llm.base import LLMResponse, StreamChunk, collect_stream
from ..llm.stops import StopCutter
from ..run.budget import Budget

__all__ = ["RunBudget", "RunCancelled", "StreamFold", "interruptible", "interruptible_iter", "one", "cancellable"]

log = logging.getLogger("chatgpt_tool_hub.engine")


class RunCancelled(RunError):
    """The run was cancelled (``app.cancel``, a client that went away); the engine ends the run with it."""


@dataclass
class RunBudget(Budget):
    """A :class:`Budget` that can be cancelled, shared by everything that works on one run.

    After :meth:`cancel`, every charge raises :class:`RunCancelled`, so every
    engine of the run tree (subtrees too) stops at its next LLM or tool call.
    Tools that start processes register a kill hook with :meth:`on_cancel`
    for the time of their call (they find the budget in ``ToolContext.budget``):
    ``cancel()`` runs the hooks at once, from the cancelling thread.
    """

    reason: str = ""
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    _hooks: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel the run; False when it was cancelled already. Hooks that raise are logged."""
        with self._lock:
            if self._cancelled.is_set():
                return False
            self.reason = reason
            self._cancelled.set()
            hooks, self._hooks = list(self._hooks.values()), {}
        for hook in hooks:
            try:
                hook()
            except Exception:
                log.warning("a cancel hook raised", exc_info=True)
        return True

    def on_cancel(self, hook: Callable[[], Any]) -> Callable[[], None]:
        """Run ``hook()`` when the run is cancelled (at once when it is already); returns a remover."""
        key = object()
        with self._lock:
            if not self._cancelled.is_set():
                self._hooks[key] = hook
                return lambda: self._hooks.pop(key, None)
        hook()
        return lambda: None

    def check(self) -> None:
        if self._cancelled.is_set():
            raise RunCancelled(f"the run was cancelled ({self.reason})")

    def charge_llm(self) -> None:
        self.check()
        super().charge_llm()

    def charge_tool(self) -> None:
        self.check()
        super().charge_tool()


class StreamFold:
    """A streamed reply: stop sequences applied, token events made, the response put together."""

    def __init__(self, depth: int, stops: Iterable[str]):
        self.depth = depth
        self.chunks: list[StreamChunk] = []
        self.stops = StopCutter(list(stops))  # a server may ignore them or split one over chunks

    def feed(self, chunk: StreamChunk) -> TokenEvent | None:
        text = self.stops.feed(chunk.text or "")
        self.chunks.append(StreamChunk(text, chunk.finish_reason, chunk.usage, list(chunk.tool_calls or ())))
        return TokenEvent(text, self.depth) if text else None

    def flush(self) -> TokenEvent | None:
        tail = self.stops.flush()
        if not tail:
            return None
        self.chunks.append(StreamChunk(tail))
        return TokenEvent(tail, self.depth)

    def response(self) -> LLMResponse:
        return collect_stream(iter(self.chunks))


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


_END = object()
_CANCEL = object()


def interruptible(work: Callable[[], Any], control: RunBudget) -> Any:
    """``work()`` in a helper thread; :meth:`RunBudget.cancel` ends the wait at once (the result is dropped)."""
    control.check()
    done = threading.Event()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box.append(_Raised(exc))
        finally:
            done.set()

    remove = control.on_cancel(done.set)
    try:
        threading.Thread(target=run, name="tool-hub-llm", daemon=True).start()
        done.wait()
    finally:
        remove()
    control.check()
    if isinstance(box[0], _Raised):
        raise box[0].error
    return box[0]


def interruptible_iter(open_iter: Callable[[], Iterable[Any]], control: RunBudget) -> Iterator[Any]:
    """The items of ``open_iter()``, read in a helper thread; ``cancel()`` ends the wait for the next one."""
    control.check()
    items: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def run() -> None:
        try:
            source = open_iter()
            try:
                for item in source:
                    if stop.is_set():
                        break
                    items.put(item)
            finally:
                close = getattr(source, "close", None)
                if callable(close):
                    close()
            items.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            items.put(_Raised(exc))

    remove = control.on_cancel(lambda: items.put(_CANCEL))
    try:
        threading.Thread(target=run, name="tool-hub-llm-stream", daemon=True).start()
        while True:
            item = items.get()
            if item is _CANCEL:
                control.check()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        remove()


async def one(awaitable: Any) -> AsyncIterator[Any]:
    yield await awaitable


async def cancellable(source: AsyncIterator[Any], control: RunBudget | None) -> AsyncIterator[Any]:
    """The items of ``source``; with a ``control``, its ``cancel()`` (from any thread) abandons the wait
    and raises :class:`RunCancelled`."""
    if control is None:
        async for item in source:
            yield item
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

    remove = control.on_cancel(lambda: loop.call_soon_threadsafe(wake))
    try:
        while True:
            item = await items.get()
            if item is _CANCEL:
                control.check()
                continue
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        remove()
        if not task.done():
            task.cancel()
