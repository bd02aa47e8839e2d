"""MCP servers as tools: ``load_mcp_tools(server) -> list[Tool]``.

``server`` is a stdio command (``"npx -y @modelcontextprotocol/server-filesystem /data"``
or an argv list), a streamable HTTP URL (``"http://127.0.0.1:8000/mcp"``), or a
dict ``{"command": [...], "env": {...}, "cwd": ...}`` / ``{"url": ..., "headers": {...}}``.

The engine is synchronous, so each server connection runs its MCP client
session on a dedicated event-loop thread (:class:`._async_bridge.LoopThread`)
and keeps it open while the tools live. ``close()`` on any of the server's
tools (or interpreter exit) ends the session and stops a stdio child. A crash
or a timeout becomes a ``ToolExecutionError`` observation and the next call
reconnects once. The stdio child gets a scrubbed environment: ``PATH``,
``HOME``, ``LANG`` and the ``env`` given, never the parent's API keys.

An MCP tool can do anything, so each one is ``dangerous`` (an app with an
approver asks it before every call) unless the server annotates it
``readOnlyHint: true``; the ``dangerous`` option overrides that per server.
A result longer than ``max_result_chars`` keeps its head and tail.

Needs the optional ``mcp`` package: ``pip install "chatgpt-tool-hub[mcp]"``.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import binascii
import contextlib
import copy
import json
import logging
import os
import re
import shlex
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigError, ToolExecutionError, UserError
from ...textutil import clip_text, strip_control
from ..base import Tool
from ._danger import DangerRule

__all__ = ["load_mcp_tools", "MCPTool", "MCPConnection", "ServerSpec", "parse_server", "render_result", "INSTALL_HINT"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")

INSTALL_HINT = 'MCP servers need the optional "mcp" package: pip install "chatgpt-tool-hub[mcp]"'
_CHILD_ENV_KEYS = ("PATH", "HOME", "LANG")
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK uses for a dropped connection
MAX_RESULT_CHARS = 20_000  # the default of mcp_max_result_chars
_SCRIPT = re.compile(r"^(?:[\w./-]*/)?[\w.-]+\.(?:py|js|mjs|cjs|ts)$|^@[\w.-]+/[\w.-]+(?:@[\w.-]+)?$")
_OPEN: set["MCPConnection"] = set()
_OPEN_LOCK = threading.Lock()


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
        from mcp import ClientSession  # noqa: F401
    except ImportError as exc:
        raise UserError(INSTALL_HINT) from exc


# ---- what to connect to -----------------------------------------------------------


@dataclass
class ServerSpec:
    """A parsed ``server`` argument."""

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A name for messages: the program, or the URL without credentials or query."""
        if self.url:
            parts = urlsplit(self.url)
            host = parts.hostname or ""
            netloc = f"{host}:{parts.port}" if parts.port else host
            return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        if not self.command:
            return "?"
        label = os.path.basename(self.command[0])
        for arg in self.command[1:4]:  # a script or package name, never other arguments (they may be keys)
            if _SCRIPT.match(arg):
                return f"{label} {os.path.basename(arg)}"
        return label


def parse_server(server: str | list[str] | Mapping[str, Any], env: Mapping[str, Any] | None = None) -> ServerSpec:
    """Turn the ``server`` argument into a :class:`ServerSpec` or raise ``ConfigError``."""
    spec = ServerSpec()
    if isinstance(server, Mapping):
        unknown = set(server) - {"command", "args", "url", "env", "cwd", "headers"}
        if unknown:
            raise ConfigError(f"MCP server entry has unknown keys: {', '.join(sorted(unknown))}; options go next "
                              "to it: {\"server\": {\"command\": [...]}, \"timeout\": 60, \"name_prefix\": \"fs\"}",
                              key="mcp_servers")
        if bool(server.get("command")) == bool(server.get("url")):
            raise ConfigError("an MCP server entry needs exactly one of 'command' or 'url'", key="mcp_servers")
        if server.get("url"):
            spec.url = str(server["url"])
        else:
            spec.command = _argv(server["command"]) + [str(a) for a in server.get("args") or []]
        spec.env.update(_str_map(server.get("env"), "env"))
        spec.headers.update(_str_map(server.get("headers"), "headers"))
        spec.cwd = str(server["cwd"]) if server.get("cwd") else None
    elif isinstance(server, str) and re.match(r"^https?://", server.strip(), flags=re.I):
        spec.url = server.strip()
    elif isinstance(server, (str, list, tuple)):
        spec.command = _argv(server)
    else:
        raise ConfigError(f"an MCP server must be a command, a URL or a dict, not {type(server).__name__}",
                          key="mcp_servers")
    spec.env.update(_str_map(env, "env"))
    if spec.url and spec.env:
        log.debug("env is ignored for the HTTP MCP server %s", spec.label)
    return spec


def _argv(command: Any) -> list[str]:
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ConfigError(f"MCP server command cannot be split: {exc}", key="mcp_servers") from None
    elif isinstance(command, (list, tuple)):
        argv = [str(a) for a in command]
    else:
        raise ConfigError("an MCP server command must be a string or a list", key="mcp_servers")
    if not argv or not argv[0]:
        raise ConfigError("the MCP server command is empty", key="mcp_servers")
    return argv


def _str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"MCP server '{what}' must be a mapping of names to strings", key="mcp_servers")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The stdio child's environment: PATH, HOME, LANG from ours, plus ``extra``."""
    env = {k: os.environ[k] for k in _CHILD_ENV_KEYS if os.environ.get(k)}
    env.update(extra)
    return env


# ---- one connection ---------------------------------------------------------------


class MCPConnection:
    """One MCP client session kept open on a background event-loop thread."""

    def __init__(self, spec: ServerSpec, timeout: float = 30):
        self.spec = spec
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._bridge: Any = None
        self._held: Any = None
        self._session: Any = None
        self._errlog: Any = None
        self._broken = False
        self._reconnect_failed: str | None = None
        self.closed = False

    @property
    def label(self) -> str:
        return self.spec.label

    def connect(self) -> list[Any]:
        """Open the session and return the server's tool list (MCP ``Tool`` objects)."""
        from ._async_bridge import HeldContext, LoopThread

        with self._lock:
            if self.closed:
                raise ToolExecutionError(f"the MCP server {self.label} connection is closed")
            if self._bridge is None or not self._bridge.alive:
                self._bridge = LoopThread(f"mcp:{self.label}"[:60])
            if self._errlog is None and self.spec.command:
                self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            elif self._errlog is not None:  # a reconnect: only this start's stderr matters
                self._errlog.seek(0)
                self._errlog.truncate()
            with _OPEN_LOCK:
                _OPEN.add(self)
            self._held = HeldContext(self._bridge, self._open_session)
            try:
                self._session, tools = self._held.open(self.timeout)
            except BaseException as exc:
                raise _Failure(self._describe(exc, stderr=True)) from None
            self._broken = False
            return tools

    async def _open_session(self, stack: contextlib.AsyncExitStack) -> tuple[Any, list[Any]]:
        from mcp import ClientSession

        streams = await stack.enter_async_context(await self._transport(stack))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        return session, await _list_all_tools(session)

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        spec = self.spec
        if spec.url:
            try:
                from mcp.client.streamable_http import streamable_http_client  # mcp >= 2
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client  # type: ignore[attr-defined]

                return streamablehttp_client(spec.url, headers=spec.headers or None)
            if not spec.headers:
                return streamable_http_client(spec.url)
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(create_mcp_http_client(headers=spec.headers))
            return streamable_http_client(spec.url, http_client=client)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert spec.command
        params = StdioServerParameters(command=spec.command[0], args=spec.command[1:],
                                       env=child_environment(spec.env), cwd=spec.cwd)
        return stdio_client(params, errlog=self._errlog) if self._errlog is not None else stdio_client(params)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call one tool; connection trouble becomes ``ToolExecutionError``."""
        with self._lock:
            if self.closed:
                raise ToolExecutionError(f"the MCP server {self.label} connection is closed")
            if self._broken or self._held is None or not self._held.alive:
                self._reconnect()
            session, bridge = self._session, self._bridge
        try:
            return bridge.run(asyncio.wait_for(session.call_tool(name, arguments), self.timeout), self.timeout + 5)
        except (TimeoutError, asyncio.TimeoutError):
            self._broken = True
            raise ToolExecutionError(
                f"the MCP server {self.label} did not answer '{name}' within {self.timeout:g} s; "
                "the connection will be restarted on the next call") from None
        except Exception as exc:
            if _is_protocol_error(exc):  # the server answered with a JSON-RPC error: it is alive
                raise ToolExecutionError(f"the MCP server {self.label} refused '{name}': {exc}") from None
            self._broken = True
            raise ToolExecutionError(
                f"the MCP server {self.label} failed during '{name}': {self._describe(exc)}; "
                "it will be reconnected on the next call") from None

    def _reconnect(self) -> None:
        if self._reconnect_failed:
            raise ToolExecutionError(f"the MCP server {self.label} is unavailable: {self._reconnect_failed}")
        log.info("reconnecting to the MCP server %s", self.label)
        self._shutdown_session()
        try:
            self.connect()
        except _Failure as exc:
            self._reconnect_failed = str(exc)
            raise ToolExecutionError(f"could not reconnect to the MCP server {self.label}: {exc}") from None

    def close(self) -> None:
        """End the session and stop a stdio child. Safe to call twice."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._shutdown_session()
            if self._bridge is not None:
                self._bridge.stop()
                self._bridge = None
            if self._errlog is not None:
                self._errlog.close()
                self._errlog = None
        with _OPEN_LOCK:
            _OPEN.discard(self)

    def _shutdown_session(self) -> None:
        if self._held is not None:
            self._held.close()
        self._held = self._session = None

    def _describe(self, exc: BaseException, stderr: bool = False) -> str:
        from ._async_bridge import unwrap_exception

        exc = unwrap_exception(exc)
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            text = f"no answer within {self.timeout:g} s"
        elif isinstance(exc, FileNotFoundError):
            text = f"command not found: {self.spec.command[0] if self.spec.command else exc}"
        else:
            text = str(exc) or type(exc).__name__
        tail = self._stderr_tail() if stderr else ""
        return f"{text} (server stderr: {tail})" if tail else text

    def _stderr_tail(self, limit: int = 600) -> str:
        if self._errlog is None:
            return ""
        try:
            self._errlog.flush()
            size = self._errlog.seek(0, os.SEEK_END)
            self._errlog.seek(max(0, size - 4 * limit))
            text = self._errlog.read()
        except (OSError, ValueError):
            return ""
        return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-limit:]


class _Failure(Exception):
    """Connecting failed; the message is safe to show."""


def _is_protocol_error(exc: BaseException) -> bool:
    code = getattr(getattr(exc, "error", None), "code", None)
    return isinstance(code, int) and code != _CONNECTION_CLOSED and type(exc).__name__ in ("MCPError", "McpError")


async def _list_all_tools(session: Any) -> list[Any]:
    tools: list[Any] = []
    cursor = None
    for _ in range(100):  # a server whose pagination never ends cannot hang us
        if cursor is None:
            page = await session.list_tools()
        else:
            try:
                from mcp.types import PaginatedRequestParams

                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            except (ImportError, TypeError):
                page = await session.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = _attr(page, "next_cursor", "nextCursor")
        if not cursor:
            break
    return tools


@atexit.register
def _close_all() -> None:
    with _OPEN_LOCK:
        connections = list(_OPEN)
    for connection in connections:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - interpreter exit
            pass


# ---- tools --------------------------------------------------------------------------


class MCPTool(Tool):
    """One tool of an MCP server. ``close()`` closes the whole server connection."""

    def __init__(self, connection: MCPConnection, remote_name: str, name: str, description: str,
                 parameters: dict, *, dangerous: bool = True, max_result_chars: int = MAX_RESULT_CHARS):
        self.connection = connection
        self.remote_name = remote_name
        self.name = name
        self.description = description
        self.parameters = parameters
        self.dangerous = dangerous
        self.max_result_chars = max_result_chars

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        if not (self.parameters or {}).get("properties") and (
                tool_input is None or (isinstance(tool_input, str) and not tool_input.strip().startswith("{"))):
            tool_input = {}  # a tool without parameters: any text input means "call it"
        return super().parse_arguments(tool_input)

    def _run(self, **arguments: Any) -> str:
        return render_result(self.connection.call_tool(self.remote_name, arguments), self.max_result_chars)

    def close(self) -> None:
        self.connection.close()


def render_result(result: Any, max_chars: int = MAX_RESULT_CHARS) -> str:
    """An MCP ``CallToolResult`` as observation text (control characters removed, head and tail of
    ``max_chars``); ``isError`` raises ``ToolExecutionError`` with the same text."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {_attr(block, 'mime_type', 'mimeType')}, {_b64_size(block.data)} bytes]")
        elif kind == "resource":
            res = block.resource
            uri, mime = getattr(res, "uri", ""), _attr(res, "mime_type", "mimeType")
            if getattr(res, "text", None) is not None:
                parts.append(f"[resource: {uri}]\n{res.text}")
            else:
                parts.append(f"[resource: {uri}, {mime or 'binary'}, {_b64_size(getattr(res, 'blob', ''))} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {getattr(block, 'name', '')} {getattr(block, 'uri', '')}]".strip())
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    text = "\n".join(parts)
    structured = _attr(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    text = clip_text(strip_control(text), max_chars)
    if _attr(result, "is_error", "isError"):
        raise ToolExecutionError(text or "the MCP tool reported an error without details")
    return text or "(the MCP tool returned no content)"


def _attr(obj: Any, *names: str) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _b64_size(data: str | bytes | None) -> int:
    if not data:
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _tool_name(prefix: str | None, name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "tool"
    if prefix:
        clean = f"{re.sub(r'[^A-Za-z0-9_-]+', '_', prefix).strip('_')}-{clean}"
    return clean[:64]


def _read_only(item: Any) -> bool:
    """Whether the server annotates the tool ``readOnlyHint: true`` (a hint from the server you configured)."""
    hints = _attr(item, "annotations")
    if isinstance(hints, Mapping):
        return hints.get("readOnlyHint", hints.get("read_only_hint")) is True
    return _attr(hints, "read_only_hint", "readOnlyHint") is True


def _schema(raw: Any) -> dict:
    schema = dict(copy.deepcopy(raw)) if isinstance(raw, Mapping) else {}
    return {"type": "object", "properties": {}, **schema}


def load_mcp_tools(server: str | list[str] | dict, *, env: dict | None = None, timeout: float = 30,
                   name_prefix: str | None = None, dangerous: bool | list[str] | None = None,
                   max_result_chars: int = MAX_RESULT_CHARS) -> list[Tool]:
    """Connect to an MCP server and return one :class:`MCPTool` per server tool.

    ``dangerous``: ``None`` (every tool not annotated ``readOnlyHint: true``),
    ``True``/``False`` (every tool), or a list of the tools that are (server or
    prefixed names). ``max_result_chars``: longer results keep head and tail.
    Raises ``UserError`` when the ``mcp`` package is missing and ``ConfigError``
    when the server entry is malformed or the server cannot be started/reached.
    """
    _require_mcp()
    spec = parse_server(server, env)
    try:
        timeout = float(timeout)
        max_result_chars = int(max_result_chars)
    except (TypeError, ValueError):
        raise ConfigError("MCP 'timeout' must be a number of seconds and 'max_result_chars' a number of "
                          "characters", key="mcp_servers") from None
    if timeout <= 0 or max_result_chars <= 0:
        raise ConfigError("MCP 'timeout' and 'max_result_chars' must be positive", key="mcp_servers")
    danger = DangerRule(dangerous, key="mcp_servers", owner="MCP server", names="tools",
                        default_means="every tool the server does not annotate readOnlyHint: true")
    connection = MCPConnection(spec, timeout)
    try:
        listed = connection.connect()
    except _Failure as exc:
        connection.close()
        raise ConfigError(f"MCP server {spec.label}: could not connect: {exc}", key="mcp_servers") from None
    tools: list[Tool] = []
    seen: set[str] = set()
    for item in listed:
        name = _tool_name(name_prefix, item.name)
        base, n = name, 2
        while name in seen:
            name, n = f"{base[:60]}_{n}", n + 1
        seen.add(name)
        description = (item.description or getattr(item, "title", None) or item.name).strip()
        risky = danger.decide({item.name, name}, default=not _read_only(item))
        tools.append(MCPTool(connection, item.name, name, description,
                             _schema(_attr(item, "input_schema", "inputSchema")), dangerous=risky,
                             max_result_chars=max_result_chars))
    try:
        danger.check_listed(spec.label)
    except ConfigError:
        connection.close()
        raise
    if not tools:
        log.warning("the MCP server %s offers no tools", spec.label)
    return tools
