"""Run control: the limits of one run and its cancel, shared by everything that works on the run.

:class:`RunBudget` is a :class:`~chatgpt_tool_hub.run.budget.Budget` that can
also be cancelled from any thread; :class:`RunCancelled` is what a charge (or a
wait that ``cancel()`` ended) raises after that. It is the cancel signal the
thread <-> event-loop bridges (:mod:`chatgpt_tool_hub.runtime.bridge`) take:
``check()`` and ``on_cancel(hook)``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import RunError
from .budget import Budget
from .taint import EgressPolicy, RunTaint

__all__ = ["RunBudget", "RunCancelled"]

log = logging.getLogger("chatgpt_tool_hub.engine")


class RunCancelled(RunError):
    """The run was cancelled (``app.cancel``, a client that went away); the engine ends the run with it."""


@dataclass
class RunBudget(Budget):
    """A :class:`Budget` that can be cancelled, shared by everything that works on one run.

    After :meth:`cancel`, every charge raises :class:`RunCancelled`, so every
    engine of the run tree (subtrees too) stops at its next LLM or tool call.
    Tools that start processes register a kill hook with :meth:`on_cancel`
    for the time of their call (they find the budget in ``ToolContext.budget``):
    ``cancel()`` runs the hooks at once, from the cancelling thread.

    ``taint`` is the run's :class:`~chatgpt_tool_hub.run.taint.RunTaint` (untrusted content read, hosts
    fetched), shared the same way; :meth:`taint_with` makes it once, with the policy of whoever asks first
    (the app, else the outermost engine).
    """

    reason: str = ""
    taint: RunTaint | None = None
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    _hooks: dict[object, Callable[[], Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel the run; False when it was cancelled already. Hooks that raise are logged."""
        with self._lock:
            if self._cancelled.is_set():
                return False
            self.reason = reason
            self._cancelled.set()
            hooks, self._hooks = list(self._hooks.values()), {}
        for hook in hooks:
            try:
                hook()
            except Exception:
                log.warning("a cancel hook raised", exc_info=True)
        return True

    def on_cancel(self, hook: Callable[[], Any]) -> Callable[[], None]:
        """Run ``hook()`` when the run is cancelled (at once when it is already); returns a remover."""
        key = object()
        with self._lock:
            if not self._cancelled.is_set():
                self._hooks[key] = hook

                def remove() -> None:
                    self._hooks.pop(key, None)

                return remove
        hook()
        return lambda: None

    def taint_with(self, policy: EgressPolicy) -> RunTaint:
        """The run's taint state, made with ``policy`` when the run has none yet."""
        with self._lock:
            if self.taint is None:
                self.taint = RunTaint(policy)
            return self.taint

    def check(self) -> None:
        """Raise :class:`RunCancelled` when the run was cancelled."""
        if self._cancelled.is_set():
            raise RunCancelled(f"the run was cancelled ({self.reason})")

    def charge_llm(self) -> None:
        self.check()
        super().charge_llm()

    def charge_tool(self) -> None:
        self.check()
        super().charge_tool()
