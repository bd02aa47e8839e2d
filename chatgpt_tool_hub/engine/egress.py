"""Untrusted content and egress, as :func:`.dispatch.dispatch` applies them (see :mod:`chatgpt_tool_hub.run.taint`).

* :func:`taint_of`: the run's taint state (the ``ToolContext``'s, else the run budget's).
* :func:`egress_of`: why a call can send data out of the machine, or None.
* :func:`ask`: the approver's answer, told the provenance (a ``provenance`` keyword when the callable
  accepts one; :func:`~chatgpt_tool_hub.run.taint.current_provenance` for every approver).
* :func:`fence`: a result of an untrusted tool between delimiters, as the model sees it; the delimiters
  cannot be forged from inside.
* :func:`redact_value`: a tool input (text or JSON) with the configured secrets hidden, for events.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from typing import Any, Callable, Mapping

from ..run.control import RunBudget
from ..run.taint import EgressPolicy, RunTaint, asking_with
from ..textutil import strip_control
from ..tools.base import Tool, ToolContext

__all__ = ["taint_of", "egress_of", "ask", "fence", "source_of", "redact_value", "FENCE_END", "fence_start"]

log = logging.getLogger("chatgpt_tool_hub.engine")
FENCE_END = "<<end of untrusted content>>"
_FORGED = re.compile(r"<<(\s*(?:end of untrusted content|untrusted content))", re.I)
_SHOWN_INPUT = 120


def fence_start(tool: str) -> str:
    return f"<<untrusted content from {tool}>>"


def taint_of(context: ToolContext) -> RunTaint | None:
    """The run's taint state: the context's, else its :class:`RunBudget`'s (made with the default policy);
    None when the call belongs to no run (a tool called alone)."""
    if context.taint is not None:
        return context.taint
    if isinstance(context.budget, RunBudget):
        return context.budget.taint_with(EgressPolicy())
    return None


def egress_of(tool: Tool, tool_input: Any, taint: RunTaint) -> str | None:
    """Why calling ``tool`` with ``tool_input`` can send data out ("a fetch of a new host x:80" ...), or None."""
    kind = getattr(tool, "egress", "none")
    if kind == "network":
        return f"{tool.name} sends data out of this machine"
    if kind == "code":
        return f"{tool.name} runs code, which can send data out of this machine" if taint.policy.code else None
    if kind == "new-host":
        host = _host(tool, tool_input)
        if host is None or taint.has_fetched(host):
            return None
        return f"{tool.name} would reach {host}, a host this run has not fetched before"
    return None


def fetched_host(tool: Tool, tool_input: Any) -> str | None:
    """The ``host:port`` a ``new-host`` tool's call reached (to remember), else None."""
    return _host(tool, tool_input) if getattr(tool, "egress", "none") == "new-host" else None


def _host(tool: Tool, tool_input: Any) -> str | None:
    try:
        return tool.egress_host(tool_input)
    except Exception:  # a tool's own parsing failed: the host cannot be told, so it counts as a new one
        log.debug("egress_host of %s raised", tool.name, exc_info=True)
        return "(unknown host)"


def ask(approve: Callable[..., bool], tool: Tool, tool_input: Any, provenance: str = "") -> bool:
    """The approver's answer (an approver that raises refuses). With a ``provenance``, an approver that
    takes a ``provenance`` keyword (or ``**kwargs``) gets it; every approver can read it from
    :func:`~chatgpt_tool_hub.run.taint.current_provenance` meanwhile."""
    try:
        with asking_with(provenance):
            if provenance and _takes_provenance(approve):
                return bool(approve(tool.name, tool_input, provenance=provenance))
            return bool(approve(tool.name, tool_input))
    except Exception:
        log.warning("the approval callback raised; treating it as a refusal", exc_info=True)
        return False


def _takes_provenance(approve: Callable[..., bool]) -> bool:
    try:
        parameters = inspect.signature(approve).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: the two-argument contract
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == "provenance" and p.kind in (p.KEYWORD_ONLY,
               p.POSITIONAL_OR_KEYWORD)) for p in parameters)


def source_of(tool: Tool, tool_input: Any, step: int, redactor: Any) -> str:
    """A provenance line: ``"url-get https://x.test/page (step 2)"`` (the input cut short, secrets hidden)."""
    shown = redact_value(tool_input, redactor)
    if isinstance(shown, Mapping) and len(shown) == 1:  # {"url": ...}: the one value says it
        shown = next(iter(shown.values()))
    text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)
    text = " ".join(strip_control(text).split())
    if len(text) > _SHOWN_INPUT:
        text = text[: _SHOWN_INPUT - 3] + "..."
    return f"{tool.name} {text} (step {step})" if text else f"{tool.name} (step {step})"


def fence(tool: str, text: str) -> str:
    """``text`` between the delimiters that mark it as untrusted data; a delimiter spelt inside it is
    broken up (``< <end of ...``), so the content cannot close the fence early."""
    inside = _FORGED.sub(r"< <\1", text)
    return f"{fence_start(tool)}\n{inside}\n{FENCE_END}"


def redact_value(value: Any, redactor: Any) -> Any:
    """``value`` (text, or JSON: dicts, lists) with every configured secret replaced by ``***``."""
    if redactor is None or not redactor:
        return value
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v, redactor) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, redactor) for v in value]
    return value
