"""A thread-safe budget of LLM calls and tool calls, shareable by a tree of engines."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..errors import RunError

__all__ = ["Budget", "BudgetExceeded"]


class BudgetExceeded(RunError):
    """The shared budget of LLM or tool calls is used up."""


@dataclass
class Budget:
    """Limits for a whole run tree; ``None`` means unlimited."""

    max_llm_calls: int | None = None
    max_tool_calls: int | None = None
    llm_calls: int = 0
    tool_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def charge_llm(self) -> None:
        with self._lock:
            if self.max_llm_calls is not None and self.llm_calls >= self.max_llm_calls:
                raise BudgetExceeded(f"the budget of {self.max_llm_calls} LLM calls is used up")
            self.llm_calls += 1

    def charge_tool(self) -> None:
        with self._lock:
            if self.max_tool_calls is not None and self.tool_calls >= self.max_tool_calls:
                raise BudgetExceeded(f"the budget of {self.max_tool_calls} tool calls is used up")
            self.tool_calls += 1
