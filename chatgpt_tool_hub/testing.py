"""Test helpers that ship with the package.

``ScriptedLLM`` is a fake LLM that returns the given replies in order. Use it
to test your own tools and prompts without a network::

    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM(["Thought: Do I need to use a tool? No\\nAI: hello"])
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True)
    assert app.ask("hi") == "hello"
    assert llm.requests[0][-1]["content"] == "hi"

A reply may also be an ``LLMResponse`` (returned as it is), which is how a
test scripts native tool calls::

    from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall

    llm = ScriptedLLM([LLMResponse("", tool_calls=[ToolCall("call_1", "python", {"input": "print(1)"})]),
                       "The program printed 1."])
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence, Union

from .errors import UserError
from .llm.base import BaseLLM, LLMResponse, Message, StreamChunk, Usage

__all__ = ["ScriptedLLM", "ScriptExhaustedError"]

Reply = Union[str, LLMResponse, Callable[[list[Message]], Union[str, LLMResponse]]]


class ScriptExhaustedError(UserError):
    """``ScriptedLLM`` was called more times than it has replies."""


class ScriptedLLM(BaseLLM):
    """A fake LLM: returns ``replies`` in order; a callable reply receives the messages.

    A single string (or callable, or ``LLMResponse``) is one reply; a callable
    that takes no arguments is called without the messages. A reply (or a
    callable's result) that is an :class:`LLMResponse` is returned as it is (a
    copy), tool calls included: that is how tests script native tool calls.

    ``requests`` holds one list of messages per call (deep copies); ``tools``
    holds the ``tools`` each call got (``None`` when none were given). Stop
    sequences are honoured like a real server would (a text reply is cut at
    the first one). Running out of replies raises :class:`ScriptExhaustedError`.
    """

    model_name = "scripted"

    def __init__(self, replies: Iterable[Reply] | Reply | None = (), *, chunk_size: int = 8):
        if replies is None:
            replies = []
        elif isinstance(replies, (str, LLMResponse)) or callable(replies):  # one reply, not a list of characters
            replies = [replies]
        self.replies: list[Reply] = list(replies)
        self.requests: list[list[Message]] = []
        self.stops: list[list[str] | None] = []
        self.tools: list[list[dict[str, Any]] | None] = []
        self.chunk_size = max(1, chunk_size)
        self._lock = threading.Lock()
        self._next = 0

    @property
    def calls(self) -> int:
        return len(self.requests)

    def add(self, *replies: Reply) -> "ScriptedLLM":
        with self._lock:
            self.replies.extend(replies)
        return self

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
                 tools: Sequence[dict[str, Any]] | None = None) -> LLMResponse:
        with self._lock:
            index = self._next
            self._next += 1
            snapshot = copy.deepcopy(list(messages))
            self.requests.append(snapshot)
            self.stops.append(list(stop) if stop else None)
            self.tools.append(copy.deepcopy(list(tools)) if tools is not None else None)
            if index >= len(self.replies):
                raise ScriptExhaustedError(
                    f"ScriptedLLM ran out of replies: call {index + 1} but only {len(self.replies)} "
                    f"scripted; add more replies (ScriptedLLM([...]) or .add(...))"
                )
            reply = self.replies[index]
        text = _call(reply, snapshot) if callable(reply) else reply
        if isinstance(text, LLMResponse):
            return dataclasses.replace(text, tool_calls=list(text.tool_calls or ()))
        text = "" if text is None else str(text)
        finish = "stop"
        for s in stop or ():
            if s and s in text:
                text = text[: text.index(s)]
        return LLMResponse(text=text, finish_reason=finish, usage=_estimate(snapshot, text), model=self.model_name)

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StreamChunk]:
        response = self.complete(messages, stop=stop, tools=tools)
        pieces = re.findall(r"\S+\s*|\s+", response.text or "") or [""]
        for i in range(0, len(pieces), self.chunk_size):
            yield StreamChunk(text="".join(pieces[i:i + self.chunk_size]))
        yield StreamChunk(finish_reason=response.finish_reason, usage=response.usage,
                          tool_calls=list(response.tool_calls))


def _call(reply: Callable[..., Any], messages: list[Message]) -> object:
    """A callable reply gets the messages; one that takes no arguments is called without them."""
    try:
        signature = inspect.signature(reply)
    except (TypeError, ValueError):  # builtins without a signature
        return reply(messages)
    takes_one = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                    for p in signature.parameters.values())
    return reply(messages) if takes_one else reply()


def _estimate(messages: list[Message], text: str) -> Usage:
    from .llm.tokens import count_message_tokens, count_tokens

    return Usage(count_message_tokens(messages), count_tokens(text), estimated=True)
