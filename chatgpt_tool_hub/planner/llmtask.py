"""``conversational`` and ``text-generation`` tasks: answered by the request's own LLM.

HuggingGPT sends them to a hosted chat model; here the app's LLM (the one
that planned) does them, as ordinary tasks: a :class:`LLMTaskTool` runs
through the same DAG and dispatch path as every other tool (events, budget,
redaction, timeout), takes the task's text, and returns the reply as text, so
``<resource>-N`` of such a task is the reply itself. The call is charged to
the request: one more LLM call in ``PlanResult.usage`` (and in the shared
budget's ``max_llm_calls``).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import LLMError, RunError, ToolExecutionError, ToolInputError
from ..llm.base import call_llm
from ..tools.base import Tool, ToolContext, ToolResult
from .catalog import llm_tasks

__all__ = ["LLMTaskTool", "with_llm_tasks", "DEFAULT_SYSTEM"]

DEFAULT_SYSTEM = ("You carry out one step of a plan made for the user's request. Do what the text asks and reply "
                  "with the result only: no preamble, no remarks about the plan. Answer in the language of the text.")


class LLMTaskTool(Tool):
    """A task the app's LLM answers (``needs_context``: it uses ``context.llm`` and ``context.usage``)."""

    needs_context = True
    runs_on_app_llm = True  # model selection: nothing to choose, the app's own LLM answers
    output_kind = "text"
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "what to write or answer"}},
        "required": ["text"],
    }

    def __init__(self, name: str, description: str = "", system: str = DEFAULT_SYSTEM):
        self.name = name
        self.description = description or f"{name}: answered by the assistant's own language model"
        self.system = system

    def _run(self, text: str, context: ToolContext) -> str:
        text = str(text or "").strip()
        if not text:
            raise ToolInputError(f"the {self.name} task needs a text: what to write or answer")
        if context.llm is None:
            raise ToolExecutionError(f"the {self.name} task is answered by the app's LLM, and this run has none")
        if context.budget is not None:
            try:
                context.budget.charge_llm()
            except RunError as exc:
                raise ToolExecutionError(f"the {self.name} task was not run: {exc}") from None
        try:
            response = call_llm(context.llm, [{"role": "system", "content": self.system},
                                              {"role": "user", "content": text}])
        except LLMError as exc:
            raise ToolExecutionError(f"the LLM failed on the {self.name} task: {exc}") from None
        if context.usage is not None:
            context.usage.calls.append(response.usage)  # counted in the request's PlanResult.usage
        reply = ("" if response.text is None else str(response.text)).strip()
        if not reply:
            raise ToolExecutionError(f"the LLM gave an empty reply to the {self.name} task")
        return ToolResult(reply, value=reply)


def with_llm_tasks(tools: Mapping[str, Tool], system: str = DEFAULT_SYSTEM) -> dict[str, Tool]:
    """``tools`` plus an :class:`LLMTaskTool` for each LLM task the app has no tool of that name for."""
    out: dict[str, Any] = dict(tools)
    taken = {name.lower() for name in tools}
    for name, note in llm_tasks().items():
        if name.lower() not in taken:
            out[name] = LLMTaskTool(name, f"{note}. Give it the full instruction in the text argument", system)
    return out
