"""``dispatch``: the one way a tool call runs, whoever asks for it.

The ReAct loop (text protocol and native tool calls), the planner's task DAG,
subtrees (their own engine calls this too) and front ends all run a tool
through :func:`dispatch`, which does, in this order and nowhere else:

1. the start event (``ActionEvent``, or the caller's own kind such as the
   planner's ``TaskStartEvent``), its input with the configured secrets hidden
   (the tool itself gets the input as the model wrote it);
2. name resolution (exact, then case-insensitive);
3. the shared budget (``BudgetExceeded`` propagates: it ends the run);
4. untrusted content (:mod:`.egress`): after the run read content nobody here
   controls (a tool with ``reads_untrusted``), an egress call goes through the
   run's ``untrusted_egress`` policy -- the approver is asked, told the
   provenance, or the call is refused with an observation that says why;
   otherwise the approver, for dangerous tools;
5. the call, with every failure mapped to an observation: ``ModelFeedbackError``
   (bad input, an explained failure) as ``Error: ...``, any other exception
   (even ``SystemExit``) as the ``tool_error`` prompt; a ``ToolFailure`` output (a
   failure the tool tells as text) is its own observation, with the status ``error``;
6. the events of engines nested in the tool (subtrees), when the caller buffers them;
7. cleaning: control, bidi and zero-width characters stripped, then every form
   of every configured secret replaced by ``***`` (the redactor travels in the
   ``ToolContext``), then head + tail truncation; the result of an untrusted
   tool taints the run and reaches the model fenced as data
   (``Outcome.for_llm``);
8. the end event (``ObservationEvent``), and an :class:`Outcome`.

It is a generator: events are yielded as they happen (the start event before
the tool runs) and the outcome is its return value; :func:`drive` drives it
for callers that push events somewhere instead of yielding them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterable, Literal, Mapping

from ..errors import ModelFeedbackError
from ..events import ActionEvent, Event, ObservationEvent
from ..run.taint import RunTaint
from ..textutil import strip_control
from ..tools.base import Tool, ToolContext, ToolFailure, render_output, value_of
from .egress import ask, egress_of, fence, fetched_host, redact_value, source_of, taint_of
from .prompts import PromptSet

__all__ = ["Outcome", "dispatch", "drive", "resolve_tool", "clean_observation", "truncate_observation",
           "redact_value"]

log = logging.getLogger("chatgpt_tool_hub.engine")
Status = Literal["ok", "error", "unknown_tool", "denied"]
StartEvent = Callable[[str, Any, int], Event]
EndEvent = Callable[[str, str, int], Event]


@dataclass(slots=True)
class Outcome:
    """How one tool call ended."""

    tool: str          # the tool's own name (the name as asked when no tool has it)
    observation: str   # what the LLM sees: cleaned, redacted, truncated
    text: str          # the same before truncation (the planner hands it to dependent tasks)
    status: Status
    seconds: float
    error: str = ""    # for a call that failed: why, in a few words (cleaned like the observation)
    value: str = ""    # the bare result (``ToolResult.value``; else ``text``), cleaned, not truncated
    untrusted: bool = False  # the result is content nobody here controls (the tool ``reads_untrusted``)

    @property
    def for_llm(self) -> str:
        """The observation as the model is shown it: an untrusted result fenced as data."""
        return fence(self.tool, self.observation) if self.untrusted else self.observation


def resolve_tool(tools: Mapping[str, Tool], name: str) -> Tool | None:
    """The tool called ``name``: exact, then case-insensitive."""
    if not isinstance(name, str):
        return None
    tool = tools.get(name)
    if tool is not None:
        return tool
    low = name.strip().lower()
    return next((t for known, t in tools.items() if known.lower() == low), None)


def dispatch(tools: Mapping[str, Tool], name: str, tool_input: Any, context: ToolContext, *,
             prompts: PromptSet, max_chars: int, native: bool = False,
             start: StartEvent | None = ActionEvent, end: EndEvent | None = ObservationEvent,
             nested: Callable[[], Iterable[Event]] | None = None) -> Generator[Event, None, Outcome]:
    """Run the call ``name(tool_input)`` among ``tools`` (see the module docstring).

    ``start`` / ``end`` make the events (``None``: no event); ``nested`` returns
    the events that engines inside the tool buffered meanwhile.
    """
    if start is not None:
        yield start(name, redact_value(tool_input, context.redactor), context.depth)
    started = time.perf_counter()
    tool = resolve_tool(tools, name)
    untrusted = False
    if tool is None:
        known = ", ".join(tools) or "(none)"
        raw = prompts.render("unknown_tool_native" if native else "unknown_tool", tool=name, tool_names=known)
        status: Status = "unknown_tool"
        tool_name, error = name, f"there is no tool named {name!r}"
    else:
        tool_name = tool.name
        if context.budget is not None:
            context.budget.charge_tool()
        taint = taint_of(context)
        step = taint.next_step() if taint is not None else 0
        refusal = _gate(tool, tool_input, context, taint, prompts)
        if refusal is not None:
            raw, status, error = refusal
        else:
            raw, status, error = _call(tool, tool_input, context, prompts)
            untrusted = _note(tool, tool_input, context, taint, step)
    if nested is not None:
        yield from nested()
    text, observation = clean_observation(raw, context.redactor, max_chars)
    if error:
        error = clean_observation(error, context.redactor, 0)[0]
    bare = value_of(raw) if status == "ok" else raw
    value = text if bare is raw else clean_observation(bare, context.redactor, 0)[0]
    outcome = Outcome(tool_name, observation, text, status, time.perf_counter() - started, error, value, untrusted)
    if end is not None:
        yield end(tool_name, observation, context.depth)
    return outcome


def drive(gen: Generator[Event, None, Any], emit: Callable[[Event], None] | None) -> Any:
    """Drive an event generator (:func:`dispatch`, ``Engine.iter_run``), handing its events to ``emit``;
    its return value."""
    while True:
        try:
            event = next(gen)
        except StopIteration as stop:
            return stop.value
        if emit is not None:
            emit(event)


def _call(tool: Tool, tool_input: Any, context: ToolContext, prompts: PromptSet) -> tuple[str, Status, str]:
    try:
        result = tool.run(tool_input, context)
    except ModelFeedbackError as exc:  # bad input or a failure the tool explained
        return f"Error: {exc}", "error", str(exc)
    except (Exception, SystemExit) as exc:  # a tool bug (even sys.exit) must not end the run
        log.debug("tool %s raised", tool.name, exc_info=True)
        error = f"{type(exc).__name__}: {exc}"
        return prompts.render("tool_error", tool=tool.name, error=error), "error", error
    if isinstance(result, ToolFailure):  # a failure the tool told as its output
        return result, "error", str(result)
    return (result if isinstance(result, str) else render_output(result)), "ok", ""  # run() overridden


def _gate(tool: Tool, tool_input: Any, context: ToolContext, taint: RunTaint | None,
          prompts: PromptSet) -> tuple[str, Status, str] | None:
    """Why the call must not run (observation, status, error), or None: the untrusted-egress policy after
    untrusted content, else the approver of a dangerous tool."""
    reason = egress_of(tool, tool_input, taint) if taint is not None and taint.tainted else None
    if taint is not None and reason is not None and taint.policy.mode != "allow":
        provenance = context.redactor.redact(taint.provenance) if context.redactor else taint.provenance
        why = f"{reason}, after this run read untrusted content from {provenance}"
        if taint.policy.mode == "ask" and context.approve is not None:
            if ask(context.approve, tool, tool_input, provenance):
                return None
            return (prompts.render("untrusted_denied", tool=tool.name, provenance=provenance), "denied",
                    f"the user did not approve it ({why})")
        settings = "untrusted_egress=allow" + (", untrusted_egress_code=false" if tool.egress == "code" else "")
        if taint.policy.mode == "ask":
            settings = "an approver, " + settings
        return (prompts.render("untrusted_refused", tool=tool.name, provenance=provenance, settings=settings),
                "denied", f"refused: {why} (untrusted_egress={taint.policy.mode})")
    if tool.dangerous and context.approve is not None and not ask(context.approve, tool, tool_input):
        return prompts.render("denied", tool=tool.name), "denied", "the user did not approve it"
    return None


def _note(tool: Tool, tool_input: Any, context: ToolContext, taint: RunTaint | None, step: int) -> bool:
    """Record a call that ran in the run's taint state (host fetched, untrusted content read); whether its
    result is untrusted."""
    untrusted = bool(getattr(tool, "reads_untrusted", False))
    if taint is not None:
        host = fetched_host(tool, tool_input)
        if host is not None:
            taint.fetched(host)
        if untrusted:
            taint.mark(source_of(tool, tool_input, step, context.redactor))
    return untrusted


def clean_observation(raw: Any, redactor: Any, max_chars: int) -> tuple[str, str]:
    """``(text, observation)``: control characters stripped, secrets redacted; the observation also
    truncated to ``max_chars`` (head and tail)."""
    text = strip_control(raw if isinstance(raw, str) else render_output(raw))
    if redactor is not None:
        text = redactor.redact(text)
    return text, truncate_observation(text, max_chars)


def truncate_observation(text: str, limit: int) -> str:
    """Keep head and tail of a long observation with a marker in between."""
    text = text if isinstance(text, str) else str(text)
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[-tail:]}"
