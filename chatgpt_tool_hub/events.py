"""Typed events a run emits (dataclasses only).

``app.stream()`` yields them and callbacks receive them. Every event has a
``kind`` literal, so ``Event`` is a discriminated union: consumers dispatch on
``event.kind`` without isinstance checks, and a type checker narrows on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

__all__ = [
    "ThoughtEvent",
    "ActionEvent",
    "ObservationEvent",
    "TokenEvent",
    "AnswerEvent",
    "ErrorEvent",
    "Event",
]


@dataclass(frozen=True)
class ThoughtEvent:
    text: str
    depth: int = 0
    kind: Literal["thought"] = field(default="thought", init=False)


@dataclass(frozen=True)
class ActionEvent:
    tool: str
    tool_input: Any
    depth: int = 0
    kind: Literal["action"] = field(default="action", init=False)


@dataclass(frozen=True)
class ObservationEvent:
    tool: str
    observation: str
    depth: int = 0
    kind: Literal["observation"] = field(default="observation", init=False)


@dataclass(frozen=True)
class TokenEvent:
    text: str
    depth: int = 0
    kind: Literal["token"] = field(default="token", init=False)


@dataclass(frozen=True)
class AnswerEvent:
    text: str
    stopped_by: str = "answer"
    depth: int = 0
    kind: Literal["answer"] = field(default="answer", init=False)


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    error_type: str = ""
    depth: int = 0
    kind: Literal["error"] = field(default="error", init=False)


Event = Union[ThoughtEvent, ActionEvent, ObservationEvent, TokenEvent, AnswerEvent, ErrorEvent]
