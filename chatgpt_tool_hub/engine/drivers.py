"""One LLM call as the engine's drivers make it, for the ReAct loop and the planner alike.

:func:`complete` and :func:`llm_reply` (sync) and :func:`allm_reply` (async)
call any LLM object (:mod:`chatgpt_tool_hub.llm.base`), apply stop sequences,
and turn a streamed reply into token events and one response
(:class:`StreamFold`). Given the run's :class:`RunBudget` as ``control``, the
wait for the LLM is one that ``cancel()`` from any thread ends at once with
:class:`RunCancelled` (the bridges of :mod:`chatgpt_tool_hub.runtime.bridge`):
the sync driver reads the LLM in a helper thread, the async one through a task
whose wait ``cancel()`` abandons. Charging the call to the budget is the
caller's business.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncGenerator, AsyncIterator, Generator, Iterable, Sequence

from ..events import TokenEvent
from ..llm.base import (
    LLM,
    LLMResponse,
    Message,
    StreamChunk,
    acall_llm,
    astream_llm,
    call_llm,
    collect_stream,
    stream_llm,
)
from ..llm.stops import StopCutter, cut_at_stop
from ..run.control import RunBudget
from ..runtime.bridge import cancellable, interruptible, interruptible_iter

__all__ = ["StreamFold", "complete", "llm_reply", "allm_reply", "control_of"]


def control_of(budget: Any) -> RunBudget | None:
    """The budget as a cancel control: a :class:`RunBudget`, else None (a plain ``Budget`` cannot be cancelled)."""
    return budget if isinstance(budget, RunBudget) else None


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


def complete(llm: LLM, messages: Sequence[Message], *, control: RunBudget | None = None, stop: Sequence[str] = (),
             tools: list | None = None) -> LLMResponse:
    """One LLM call, not streamed; with a ``control`` its ``cancel()`` ends the wait (:class:`RunCancelled`)."""
    def work() -> LLMResponse:
        return call_llm(llm, messages, stop, tools)

    response = work() if control is None else interruptible(work, control)
    response.text = cut_at_stop(response.text, stop)[0]  # a server may ignore the stop sequences
    return response


def llm_reply(llm: LLM, messages: Sequence[Message], *, control: RunBudget | None = None, stream: bool = False,
              stop: Sequence[str] = (), tools: list | None = None,
              depth: int = 0) -> Generator[TokenEvent, None, LLMResponse]:
    """One LLM call for a sync driver: the token events of a stream (none otherwise); returns the response.
    With a ``control`` its ``cancel()`` ends the wait for the reply or the next chunk."""
    if not stream:
        return complete(llm, messages, control=control, stop=stop, tools=tools)
    fold = StreamFold(depth, stop)
    open_stream = lambda: stream_llm(llm, messages, stop, tools)  # noqa: E731
    chunks = open_stream() if control is None else interruptible_iter(open_stream, control)
    try:
        for chunk in chunks:
            token = fold.feed(chunk)
            if token is not None:
                yield token
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()
    tail = fold.flush()
    if tail is not None:
        yield tail
    return fold.response()


async def allm_reply(llm: LLM, messages: Sequence[Message], *, control: RunBudget | None = None,
                     stream: bool = False, stop: Sequence[str] = (), tools: list | None = None, depth: int = 0,
                     executor: Any = None) -> AsyncGenerator[Any, None]:
    """One LLM call for an async driver: token events, then the response as the last item. ``acomplete`` /
    ``astream`` are awaited (an LLM without them runs in ``executor``); ``cancel()`` of a ``control``, from
    any thread, abandons the call and raises :class:`RunCancelled`."""
    if control is not None:
        control.check()
    fold = StreamFold(depth, stop) if stream else None
    if stream:
        source = astream_llm(llm, messages, stop, tools, executor=executor)
    else:
        source = _one(acall_llm(llm, messages, stop, tools, executor=executor))
    async with aclosing(cancellable(source, control)) as items:
        async for item in items:
            if fold is None:
                item.text = cut_at_stop(item.text, stop)[0]
                yield item
                return
            token = fold.feed(item)
            if token is not None:
                yield token
    if fold is not None:
        tail = fold.flush()
        if tail is not None:
            yield tail
        yield fold.response()


async def _one(awaitable: Any) -> AsyncIterator[Any]:
    """An awaitable as an async iterator of its one result."""
    yield await awaitable
