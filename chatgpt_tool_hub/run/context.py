"""``ToolContext``: what a running engine hands a tool, typed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..redact import Redactor
from .budget import Budget
from .steps import RunUsage
from .taint import RunTaint

if TYPE_CHECKING:
    from ..events import Event
    from ..llm.base import LLM

__all__ = ["ToolContext", "DEFAULT_CONTEXT", "Approver"]

# (tool name, tool input) -> allowed; an approver that accepts a ``provenance`` keyword (or ``**kwargs``) is
# also told where the untrusted content came from when it is asked about an egress call after it
Approver = Callable[..., bool]


@dataclass(frozen=True)
class ToolContext:
    """What a running engine hands a tool: the session, the shared budget, the LLM.

    Tools that set ``needs_context = True`` receive it as ``_run(..., context=ctx)``.
    In pure mode (``tool.run(text)`` alone) the context is the default one.
    """

    session_id: str = "default"
    depth: int = 0                                 # nesting depth of the engine that called the tool
    budget: Budget | None = None                   # shared by a run tree (a RunBudget also carries cancel)
    llm: LLM | None = None                         # the calling engine's LLM
    emit: Callable[[Event], None] | None = None    # forwards events of nested engines
    approve: Approver | None = None
    usage: RunUsage | None = None                  # the run's usage: tools that call an LLM add their calls
    redactor: Redactor | None = None               # the app's secret redactor (nested engines use it too)
    taint: RunTaint | None = None                  # untrusted content the run read (shared by nested engines)


DEFAULT_CONTEXT = ToolContext()
