"""The LLM protocol: messages in, text + finish reason + token usage out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence, runtime_checkable

__all__ = ["Message", "Usage", "LLMResponse", "StreamChunk", "LLM", "BaseLLM", "collect_stream"]

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
