"""The ReAct engine: prompts, parser, loop, memory.

The run control the engine honours (:class:`RunBudget`: limits + cancel, and
:class:`RunCancelled`) lives in :mod:`chatgpt_tool_hub.run.control`; it is
importable from here too.
"""

from ..run.control import RunBudget, RunCancelled

__all__ = ["RunBudget", "RunCancelled"]
