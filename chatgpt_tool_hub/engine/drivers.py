"""One LLM call as the engine's drivers make it, for the ReAct loop and the planner alike.

:func:`complete` and :func:`llm_reply` (sync) and :func:`allm_reply` (async)
call any LLM object (:mod:`chatgpt_tool_hub.llm.base`), apply stop sequences,
and turn a streamed reply into token events and one response
(:class:`StreamFold`; with a redactor, token events hide the configured
secrets, holding back enough text that a secret split over chunks is still
caught). Given the run's :class:`RunBudget` as ``control``, the
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

__all__ = ["StreamFold", "StreamRedactor", "complete", "llm_reply", "allm_reply", "control_of"]

_FORM_GROWTH = 6  # the longest spelling of a secret (escaped, encoded) is at most this many times its length


def control_of(budget: Any) -> RunBudget | None:
    """The budget as a cancel control: a :class:`RunBudget`, else None (a plain ``Budget`` cannot be cancelled)."""
    return budget if isinstance(budget, RunBudget) else None


class StreamRedactor:
    """Streamed text with the configured secrets hidden: the last ``hold`` characters wait for the next
    piece, so a secret (in any spelling the redactor knows, up to ``_FORM_GROWTH`` times its length)
    split over pieces is still replaced whole. Uses only ``Redactor.redact``."""

    def __init__(self, redactor: Any):
        self.redactor = redactor
        longest = max((len(s) for s in getattr(redactor, "secrets", ())), default=0)
        self.hold = _FORM_GROWTH * longest + 8
        self.pending = ""

    def feed(self, text: str) -> str:
        """What of the text so far can be shown now, redacted."""
        self.pending += text
        cut = len(self.pending) - self.hold
        if cut <= 0:
            return ""
        whole = self.redactor.redact(self.pending)
        while cut > 0:  # a cut inside a secret would show its first part: move it before the secret
            head = self.redactor.redact(self.pending[:cut])
            if whole.startswith(head) and head + self.redactor.redact(self.pending[cut:]) == whole:
                self.pending = self.pending[cut:]
                return head
            cut -= 1
        return ""

    def flush(self) -> str:
        """The rest, redacted."""
        text, self.pending = self.pending, ""
        return self.redactor.redact(text)


class StreamFold:
    """A streamed reply: stop sequences applied, token events made (secrets hidden when a ``redactor``
    with secrets is given), the response put together (the raw text: the parser reads it)."""

    def __init__(self, depth: int, stops: Iterable[str], redactor: Any = None):
        self.depth = depth
        self.chunks: list[StreamChunk] = []
        self.stops = StopCutter(list(stops))  # a server may ignore them or split one over chunks
        self.hider = StreamRedactor(redactor) if redactor else None

    def feed(self, chunk: StreamChunk) -> TokenEvent | None:
        text = self.stops.feed(chunk.text or "")
        self.chunks.append(StreamChunk(text, chunk.finish_reason, chunk.usage, list(chunk.tool_calls or ())))
        shown = self.hider.feed(text) if self.hider is not None and text else text
        return TokenEvent(shown, self.depth) if shown else None

    def flush(self) -> TokenEvent | None:
        tail = self.stops.flush()
        if tail:
            self.chunks.append(StreamChunk(tail))
        shown = self.hider.feed(tail) + self.hider.flush() if self.hider is not None else tail
        return TokenEvent(shown, self.depth) if shown else None

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
              stop: Sequence[str] = (), tools: list | None = None, depth: int = 0,
              redactor: Any = None) -> Generator[TokenEvent, None, LLMResponse]:
    """One LLM call for a sync driver: the token events of a stream (none otherwise; secrets hidden with a
    ``redactor``); returns the response. With a ``control`` its ``cancel()`` ends the wait for the reply
    or the next chunk."""
    if not stream:
        return complete(llm, messages, control=control, stop=stop, tools=tools)
    fold = StreamFold(depth, stop, redactor)
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
                     executor: Any = None, redactor: Any = None) -> AsyncGenerator[Any, None]:
    """One LLM call for an async driver: token events, then the response as the last item. ``acomplete`` /
    ``astream`` are awaited (an LLM without them runs in ``executor``); ``cancel()`` of a ``control``, from
    any thread, abandons the call and raises :class:`RunCancelled`."""
    if control is not None:
        control.check()
    fold = StreamFold(depth, stop, redactor) if stream else None
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
