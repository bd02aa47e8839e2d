"""The LLM protocol: messages in, text + finish reason + token usage out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence, runtime_checkable

__all__ = ["Message", "Usage", "LLMResponse", "StreamChunk", "LLM", "BaseLLM", "collect_stream", "call_llm",
           "stream_llm", "as_response"]

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass
class Usage:
    """Token usage of one call (or a sum of calls)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # True when counted locally rather than reported by the server

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
        )


@dataclass
class LLMResponse:
    text: str
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None


@dataclass
class StreamChunk:
    """A piece of a streamed completion. The last chunk carries finish reason and usage."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


@runtime_checkable
class LLM(Protocol):
    """What the engine needs from a language model.

    ``complete`` is required. ``stream`` is optional: without it the engine
    falls back to ``complete`` and emits the whole text as one token event.
    """

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        ...


class BaseLLM:
    """Convenience base: implement ``complete``; ``stream`` defaults to one chunk."""

    model_name: str = "unknown"

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        raise NotImplementedError

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> Iterator[StreamChunk]:
        response = self.complete(messages, stop=stop)
        yield StreamChunk(text=response.text, finish_reason=response.finish_reason, usage=response.usage)


def collect_stream(chunks: Iterator[StreamChunk]) -> LLMResponse:
    """Fold a stream into one :class:`LLMResponse`."""
    parts: list[str] = []
    finish: str | None = None
    usage = Usage()
    for chunk in chunks:
        parts.append(chunk.text or "")
        if chunk.finish_reason:
            finish = chunk.finish_reason
        if chunk.usage is not None:
            usage = chunk.usage
    return LLMResponse(text="".join(parts), finish_reason=finish, usage=usage)


# ---- calling any LLM-like object -------------------------------------------------------------


def as_response(raw: object) -> LLMResponse:
    """An :class:`LLMResponse` from what an LLM object returned (a response, a string, or None)."""
    if isinstance(raw, LLMResponse):
        if raw.text is None:
            raw.text = ""
        if not isinstance(raw.usage, Usage):
            raw.usage = Usage()
        return raw
    if raw is None:
        return LLMResponse(text="", finish_reason="empty")
    if isinstance(raw, str):
        return LLMResponse(text=raw)
    text = getattr(raw, "text", None)
    if isinstance(text, str):
        usage = getattr(raw, "usage", None)
        return LLMResponse(text=text, finish_reason=getattr(raw, "finish_reason", None),
                           usage=usage if isinstance(usage, Usage) else Usage())
    return LLMResponse(text=str(raw))


def _accepts_stop(exc: TypeError) -> bool:
    return "stop" not in str(exc)


def call_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None) -> LLMResponse:
    """``llm.complete`` on a copy of ``messages``, tolerant of LLM objects written loosely.

    A ``complete`` without a ``stop`` keyword is called without it, and a
    plain-string reply is wrapped; stop sequences are then applied here.
    """
    from .stops import cut_at_stop

    try:
        return as_response(llm.complete(list(messages), stop=list(stop) if stop else None))
    except TypeError as exc:
        if _accepts_stop(exc):
            raise
    response = as_response(llm.complete(list(messages)))
    response.text = cut_at_stop(response.text, stop)[0]
    return response


def stream_llm(llm: LLM, messages: Sequence[Message], stop: Sequence[str] | None = None) -> Iterator[StreamChunk]:
    """``llm.stream`` when the object has one (string pieces are wrapped), else one chunk from ``complete``."""
    streamer = getattr(llm, "stream", None)
    if streamer is None:
        response = call_llm(llm, messages, stop)
        yield StreamChunk(text=response.text, finish_reason=response.finish_reason, usage=response.usage)
        return
    try:
        chunks = streamer(list(messages), stop=list(stop) if stop else None)
    except TypeError as exc:  # a stream() without a stop keyword; the caller cuts at stop sequences
        if _accepts_stop(exc):
            raise
        chunks = streamer(list(messages))
    for chunk in chunks:
        yield StreamChunk(text=chunk) if isinstance(chunk, str) else chunk
