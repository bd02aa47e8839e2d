"""Tools the caller runs: a run that calls one pauses, and a later run resumes it with the results.

A chat client with tools of its own (OpenAI's ``tools`` in a chat request)
hands them to the run as external tools. When the model calls one, the run
does not run it: it ends with ``stopped_by="tool_calls"`` and
``RunResult.paused``, a :class:`Paused` holding the calls (their ids, tools
and arguments) and what the run did so far. The caller runs the calls and asks
again with an :class:`ExternalTurn` whose ``resume`` is that :class:`Paused`
and whose ``results`` answer the calls by id: the run goes on from there, the
app's own tools still at hand.

A caller that kept nothing (a stateless server after a restart) rebuilds the
paused run from the conversation itself: :meth:`Paused.rebuilt` from the calls
the client sent back (``ExternalCall`` rounds), without the steps of the app's
own tools that came before them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..llm.base import Message
from .steps import ToolStep

__all__ = ["ExternalCall", "Paused", "ExternalTurn", "ANY_TOOL"]

ANY_TOOL = "*"  # ExternalTurn.must_call: some external tool, whichever


@dataclass(frozen=True)
class ExternalCall:
    """One call of an external tool: its id (the client answers it), the tool's name, its arguments (a
    dict, or text for a tool that takes text), and the reply it was read from (its thought and text)."""

    id: str
    tool: str
    arguments: Any
    thought: str = ""
    llm_output: str = ""


@dataclass
class Paused:
    """A run paused on external calls: the messages after the question and the steps so far, then
    ``rounds``: the calls the client runs, one list per model reply (the last one is the pause's own).

    ``announced`` is True when ``messages`` already hold the reply that made the last round's calls
    (the run that paused put it there); a rebuilt pause has every round still to write."""

    messages: list[Message] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    rounds: list[list[ExternalCall]] = field(default_factory=list)
    native: bool = False
    announced: bool = False

    @property
    def calls(self) -> list[ExternalCall]:
        """The calls the run is waiting for (the last round)."""
        return list(self.rounds[-1]) if self.rounds else []

    @property
    def call_ids(self) -> list[str]:
        return [call.id for call in self.calls]

    @classmethod
    def rebuilt(cls, rounds: Sequence[Sequence[ExternalCall]]) -> "Paused":
        """A pause rebuilt from the calls a conversation holds (nothing kept from the run that made them)."""
        return cls(rounds=[list(r) for r in rounds if r])


@dataclass
class ExternalTurn:
    """What a run gets from a caller with tools of its own.

    ``tools``: the external tools (``chatgpt_tool_hub.tools.external.ExternalTool``), offered beside the
    app's (one with the name of an app tool takes its place for this run). ``must_call``: the run may not
    end with an answer but must call a tool: ``ANY_TOOL`` or one tool's name (OpenAI's
    ``tool_choice="required"`` / a named function). ``resume`` and ``results``: a paused run and the results
    of its calls by id. ``answer_schema``: the answer must be a JSON value that follows this JSON schema
    (``{"type": "object"}`` for any object; OpenAI's ``response_format``).
    """

    tools: Sequence[Any] = ()
    must_call: str | None = None
    resume: Paused | None = None
    results: Mapping[str, str] = field(default_factory=dict)
    answer_schema: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return not self.tools and self.must_call is None and self.resume is None and self.answer_schema is None
