"""Run state and steps as plain dataclasses; the prompt is a fold over the steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..llm.base import Message, Usage

if TYPE_CHECKING:
    from ..events import Event

__all__ = ["ToolStep", "ParseFailureStep", "RunUsage", "RunResult", "RunState", "StopReason"]

StopReason = Literal["answer", "think_depth", "parse_error", "budget", "error", "cancelled", "tool_calls"]


@dataclass
class ToolStep:
    """One tool call: what the LLM said, what ran, what came back."""

    tool: str
    tool_input: Any
    observation: str
    thought: str = ""
    llm_output: str = ""
    status: Literal["ok", "error", "unknown_tool", "denied"] = "ok"
    seconds: float = 0.0
    tool_call_id: str | None = None  # the native tool call this step answered (tool_calling="native")

    def render(self, observation_message: str) -> list[Message]:
        return [{"role": "assistant", "content": self.llm_output},
                {"role": "user", "content": observation_message}]


@dataclass
class ParseFailureStep:
    """An output the parser could not read, and the feedback sent back."""

    llm_output: str
    feedback: str

    def render(self) -> list[Message]:
        return [{"role": "assistant", "content": self.llm_output or "(empty reply)"},
                {"role": "user", "content": self.feedback}]


@dataclass
class RunUsage:
    """Token usage per LLM call and in total."""

    calls: list[Usage] = field(default_factory=list)

    @property
    def total(self) -> Usage:
        total = Usage()
        for call in self.calls:
            total = total + call
        return total

    @property
    def llm_calls(self) -> int:
        return len(self.calls)


@dataclass
class RunResult:
    """What ``app.run()`` returns."""

    output: str
    steps: list[ToolStep] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    stopped_by: StopReason = "answer"
    parse_failures: list[ParseFailureStep] = field(default_factory=list)
    # stopped_by="tool_calls": the run called tools its caller runs, and waits for their results
    # (a ``chatgpt_tool_hub.run.external.Paused``: resume it with an ``ExternalTurn``)
    paused: Any = None


@dataclass
class RunState:
    """Everything one run changes; the engine itself holds no per-run state."""

    query: str
    messages: list[Message]
    language: str
    session_id: str = "default"
    nested_events: list[Event] = field(default_factory=list)  # events of engines nested in tools, yielded after the tool

    def emit(self, event: Any) -> None:
        self.nested_events.append(event)

    def drain_nested(self) -> list[Event]:
        events, self.nested_events = self.nested_events, []
        return events
    steps: list[ToolStep] = field(default_factory=list)
    parse_failures: list[ParseFailureStep] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    tool_context: Any = None  # the ToolContext every tool call of this run gets (made on the first call)
    reply_schema: dict[str, Any] | None = None  # constrained decoding: the JSON schema each reply is kept to
    last_call: Any = None  # (call key, outcome) of the last tool call: the same call again gets its result
    scratch_start: int = 0  # where the messages after the question start (what a paused run keeps)
    pending: list[Any] = field(default_factory=list)  # calls of external tools the caller runs (ExternalCall)

    @property
    def tool_calls(self) -> int:
        return len(self.steps)

    def result(self, output: str, stopped_by: StopReason) -> RunResult:
        return RunResult(output, list(self.steps), self.usage, stopped_by, list(self.parse_failures))
