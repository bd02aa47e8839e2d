"""``ToolHost``: an app's tools offered to MCP hosts (``tool-hub mcp``), every call through ``dispatch``.

The tools are an app's (``AppFactory.create_app`` with the usual settings and
``tools_list``), so the tool set follows the configuration as ``tool-hub ask``
and ``serve`` do; their names and input schemas are the ones the engine sends
a model for native tool calls (``engine.native.tool_schemas``). Each call runs
through :func:`~chatgpt_tool_hub.engine.dispatch.dispatch` like a call the
engine makes: the input is checked against the schema, a failure becomes an
error result, the output has control characters stripped, configured secrets
replaced by ``***`` and is cut to ``observation_max_chars`` (head and tail).

An MCP host has no approver of ours, so dangerous tools (``write-file``,
``terminal``, MCP server tools that are not read-only ...) are left out unless
``allow_dangerous`` (``--allow-dangerous``, ``mcp_host_allow_dangerous``) is
given; then the host is the one that asks its user before each call. Calls of
a dangerous tool left out are refused with a message that names the option.

Files a call writes into the workspace and names in its output are named in
the result with their absolute paths (and images attached by the MCP glue).
No LLM is needed; a tool that asks one (``summary``) uses the configured LLM,
or fails with an error that says how to configure one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..apps.factory import AppFactory
from ..engine.dispatch import dispatch, drive
from ..engine.native import tool_schemas
from ..engine.prompts import detect_language, load_prompts
from ..errors import ConfigError, ToolHubError, UserError
from ..llm.base import LLM, BaseLLM, LLMResponse, Message
from ..run.context import ToolContext
from ..tools.base import Tool
from .files import find_files

__all__ = ["ToolHost", "HostResult", "UnknownTool", "SESSION_ID", "DANGEROUS_HINT"]

log = logging.getLogger("chatgpt_tool_hub.server")

SESSION_ID = "mcp"  # the session the tools keep their state in (a python worker's variables)
DANGEROUS_HINT = "--allow-dangerous, or MCP_HOST_ALLOW_DANGEROUS=true (mcp_host_allow_dangerous)"


class UnknownTool(ToolHubError):
    """A call of a tool the host does not offer; the message says which tools it does (an MCP protocol error)."""


class _NoLLM(BaseLLM):
    """Stands in for the LLM when none is configured: ``tool-hub mcp`` needs none until a tool asks one."""

    model_name = "none"

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        raise UserError("this tool asks an LLM and tool-hub mcp has none configured: set LLM_API_KEY (and "
                        "LLM_API_BASE_URL for another OpenAI-compatible server), or MODEL_NAME=local:smollm2")


@dataclass
class HostResult:
    """How one call ended: the text for the MCP host, whether it failed, the files it wrote."""

    text: str
    is_error: bool
    files: list[Path] = field(default_factory=list)  # absolute paths inside the workspace


class ToolHost:
    """The tools of ``app`` an MCP host may call (``allow_dangerous``: the dangerous ones too)."""

    def __init__(self, app: Any, config: Mapping[str, Any], *, allow_dangerous: bool = False):
        self.app = app
        self.config = config
        self.allow_dangerous = bool(allow_dangerous)
        tools: list[Tool] = list(app.tools)
        offered = [tool for tool in tools if self.allow_dangerous or not tool.dangerous]
        self.left_out = [tool.name for tool in tools if tool not in offered]
        self.schemas, self._names = tool_schemas(offered)
        self._tools = {tool.name: tool for tool in offered}
        self.redactor = app.context.redactor
        self.workspace = Path(app.context.workspace)
        self.max_chars = int(config.get("observation_max_chars") or 0)
        self.prompts = load_prompts(detect_language("", str(config.get("prompt_language") or "auto")))

    @classmethod
    def build(cls, tools: Sequence[str | Tool] | str | None = None, *, allow_dangerous: bool | None = None,
              factory: AppFactory | None = None, **settings: Any) -> "ToolHost":
        """The host of the app ``create_app(tools_list=tools, **settings)`` would build; ``allow_dangerous``
        (default: the ``mcp_host_allow_dangerous`` setting) offers the dangerous tools too."""
        factory = factory if factory is not None else AppFactory()
        config = factory.resolve_settings(**settings)
        allow = bool(config["mcp_host_allow_dangerous"] if allow_dangerous is None else allow_dangerous)
        app = factory.create_app(tools_list=tools, llm=_llm(factory, config), approve=_Approver(allow), **settings)
        return cls(app, config.values, allow_dangerous=allow)

    def listing(self) -> list[dict[str, Any]]:
        """``{"name", "description", "input_schema", "dangerous"}`` per offered tool."""
        out = []
        for schema in self.schemas:
            function = schema["function"]
            tool = self._tools[self._names[function["name"]]]
            out.append({"name": function["name"], "description": function.get("description") or tool.name,
                        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
                        "dangerous": bool(tool.dangerous)})
        return out

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> HostResult:
        """Run one call through ``dispatch``; raises :class:`UnknownTool` for a tool not offered."""
        tool_name = self._names.get(name)
        if tool_name is None:
            raise UnknownTool(self._unknown(name))
        started = time.time()
        context = ToolContext(session_id=SESSION_ID, approve=_Approver(self.allow_dangerous), redactor=self.redactor)
        outcome = drive(dispatch(self._tools, tool_name, dict(arguments or {}), context, prompts=self.prompts,
                                 max_chars=self.max_chars, native=True, start=None, end=None), None)
        files = self._written(outcome.text, started)
        text = outcome.observation
        if files:
            text += "\n[files written: " + ", ".join(str(path) for path in files) + "]"
        return HostResult(text, outcome.status != "ok", files)

    def summary(self) -> str:
        """What the host offers, for the person starting it (stderr)."""
        names = ", ".join(self._tools) or "(none)"
        text = f"offering {len(self._tools)} tool(s): {names}; workspace {self.workspace}"
        if self.left_out:
            text += (f". Left out as dangerous (an MCP host has no approver of ours): {', '.join(self.left_out)}; "
                     f"offer them with {DANGEROUS_HINT}")
        elif self.allow_dangerous and any(tool.dangerous for tool in self._tools.values()):
            text += ". Dangerous tools are offered: the MCP host must ask you before each call"
        return text

    def close(self) -> None:
        self.app.close()

    def _unknown(self, name: str) -> str:
        if name in self.left_out:
            return f"the tool {name!r} is dangerous and tool-hub mcp does not offer it: start it with {DANGEROUS_HINT}"
        return f"there is no tool named {name!r}; the tools are: {', '.join(self._names) or '(none)'}"

    def _written(self, text: str, since: float) -> list[Path]:
        """The workspace files ``text`` names that were written since ``since``."""
        if not self.workspace.is_dir():
            return []
        root = self.workspace.resolve()
        return [root / name for name in find_files([text], root, since=since)]


class _Approver:
    """The host's answer for a dangerous tool: yes when they are offered, no otherwise (a tool that is not
    listed is not called, this is the second lock)."""

    def __init__(self, allow: bool):
        self.allow = allow

    def __call__(self, tool_name: str, tool_input: Any = None, **_: Any) -> bool:
        return self.allow


def _llm(factory: AppFactory, config: Any) -> LLM:
    """The configured LLM, or a stand-in that explains when a tool asks it (no LLM is needed to serve tools)."""
    try:
        return factory.create_llm(config)
    except ConfigError as exc:
        if exc.key not in ("llm_api_key", "model_name", "llm_api_base_url"):
            raise
        log.debug("tool-hub mcp: no LLM (%s)", exc)
        return _NoLLM()
