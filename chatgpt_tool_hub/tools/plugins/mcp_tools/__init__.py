"""MCP servers as tools: ``load_mcp_tools(server) -> list[Tool]``.

``server`` is a stdio command (``"npx -y @modelcontextprotocol/server-filesystem /data"``
or an argv list), an HTTP URL (``"http://127.0.0.1:8000/mcp"``: streamable HTTP;
a URL ending in ``/sse``, or ``transport="sse"``: the older HTTP+SSE transport),
or a dict ``{"command": [...], "env": {...}, "cwd": ...}`` / ``{"url": ..., "headers": {...}}``.

Modules: :mod:`.spec` (the ``server`` argument), :mod:`.connection` (one
session per server on a background event-loop thread; new sessions after a
lost session, a dropped connection or a timeout, with bounded retries),
:mod:`.results` (results as text; images, audio and binary resources saved into
the workspace), :mod:`.tools` (the tool classes, the resource and prompt tools,
unique names).

The stdio child gets a scrubbed environment: ``PATH``, ``HOME``, ``LANG`` and
the ``env`` given, never the parent's API keys. An MCP tool can do anything, so
each one is ``dangerous`` (an app with an approver asks it before every call)
unless the server annotates it ``readOnlyHint: true``; the ``dangerous`` option
overrides that per server. A result longer than ``max_result_chars`` keeps its
head and tail.

An entry with ``"shared": true`` uses the process's one connection to its
server (:mod:`.shared`): every app of the process (every user of ``tool-hub
serve``) shares it instead of starting the server again. Only for stateless
servers; the default is a connection per app.

Needs the optional ``mcp`` package: ``pip install "chatgpt-tool-hub[mcp]"``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable, Iterable, Mapping

from ....config import get_typed
from ....errors import ConfigError, UserError
from ...base import Tool
from .._danger import DangerRule
from .connection import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    ConnectFailure,
    Listing,
    MCPConnection,
)
from .results import MAX_RESULT_CHARS, FileSaver, render_result
from .shared import SHARED, SharedConnections, close_leases
from .spec import ServerSpec, child_environment, parse_server
from .tools import (
    MCPPromptTool,
    MCPResourceTool,
    MCPTool,
    NameBook,
    input_schema,
    read_only,
    tool_name,
)

__all__ = ["load_mcp_tools", "load_mcp_servers", "MCPTool", "MCPResourceTool", "MCPPromptTool", "MCPConnection",
           "ServerSpec", "NameBook", "parse_server", "render_result", "child_environment", "INSTALL_HINT",
           "MAX_RESULT_CHARS", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_CALL_TIMEOUT", "ENTRY_OPTIONS",
           "SharedServers", "SharedConnections", "SHARED"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")

INSTALL_HINT = 'MCP servers need the optional "mcp" package: pip install "chatgpt-tool-hub[mcp]"'
# the keys of an ``mcp_servers`` entry dict: the keyword arguments of load_mcp_tools an entry may set
ENTRY_OPTIONS = ("server", "env", "timeout", "connect_timeout", "call_timeout", "transport", "name_prefix", "prefix",
                 "dangerous", "max_result_chars", "resources", "prompts", "shared")


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
        from mcp import ClientSession  # noqa: F401
    except ImportError as exc:
        raise UserError(INSTALL_HINT) from exc


def load_mcp_tools(server: str | list[str] | dict, *, env: dict | None = None, timeout: float | None = None,
                   connect_timeout: float | None = None, call_timeout: float | None = None,
                   transport: str | None = None, name_prefix: str | None = None, prefix: str | None = None,
                   dangerous: bool | list[str] | None = None, max_result_chars: int = MAX_RESULT_CHARS,
                   resources: bool = True, prompts: bool = True, workspace: str | os.PathLike | None = None,
                   taken: NameBook | Mapping[str, str] | Iterable[str] | None = None,
                   shared: bool = False) -> list[Tool]:
    """Connect to an MCP server and return one :class:`MCPTool` per server tool, plus
    ``<server>-read-resource`` / ``<server>-get-prompt`` when it offers resources / prompts.

    ``connect_timeout`` covers start, initialize and the lists (default 30 s), ``call_timeout`` each
    request (default 60 s); ``timeout`` is the older name of ``call_timeout`` (and the connect
    timeout is then at least as long). ``dangerous``: ``None`` (every tool not annotated
    ``readOnlyHint: true``), ``True``/``False`` (every tool), or a list of the tools that are.
    ``workspace``: where images, audio and binary resources are saved (without one they are only
    described). ``taken``: tool names already in use (a :class:`NameBook` shared across servers);
    a clashing tool is named ``<prefix>-<tool>`` with a warning (``prefix`` defaults to the name the
    server gives itself). ``shared``: use the process's one connection to this server (:mod:`.shared`;
    only for stateless servers) instead of a connection of these tools' own. Raises ``UserError`` when the ``mcp`` package is missing and
    ``ConfigError`` when the entry is malformed or the server cannot be started/reached.
    """
    return _load(locals(), DEFAULT_CONNECT_TIMEOUT, DEFAULT_CALL_TIMEOUT)


def load_mcp_servers(entries: Iterable[Any], settings: Mapping[str, Any] | None = None, *,
                     workspace: str | os.PathLike | None = None, taken: Mapping[str, str] | Iterable[str] = (),
                     into: list[Tool] | None = None) -> list[Tool]:
    """The tools of every ``mcp_servers`` entry (a server, or a dict of ``load_mcp_tools`` options with a
    ``"server"`` key), with the app's ``mcp_max_result_chars``, ``mcp_connect_timeout`` and
    ``mcp_call_timeout`` settings as defaults and names unique across the servers and ``taken``.
    Each tool is appended to ``into`` as soon as it exists, so a caller can close them after a failure."""
    settings = settings or {}
    limit = get_typed(settings, "mcp_max_result_chars", MAX_RESULT_CHARS)
    connect_default = _seconds(get_typed(settings, "mcp_connect_timeout", DEFAULT_CONNECT_TIMEOUT),
                               "mcp_connect_timeout")
    call_default = _seconds(get_typed(settings, "mcp_call_timeout", DEFAULT_CALL_TIMEOUT), "mcp_call_timeout")
    book = NameBook(taken)
    tools: list[Tool] = into if into is not None else []
    start = len(tools)
    for entry in entries:
        if isinstance(entry, Mapping) and "server" in entry:
            unknown = sorted(set(entry) - set(ENTRY_OPTIONS))
            if unknown:
                raise ConfigError(f"mcp_servers entry has unknown options: {', '.join(map(str, unknown))}; "
                                  f"the options are {', '.join(ENTRY_OPTIONS)}", key="mcp_servers")
            options = {"max_result_chars": limit, **entry}
        else:
            options = {"server": entry, "max_result_chars": limit}
        tools.extend(_load({**options, "workspace": workspace, "taken": book}, connect_default, call_default))
    return tools[start:]


def _launch(options: Mapping[str, Any], connect_default: float, call_default: float) -> tuple[ServerSpec, float, float]:
    """The server an entry names and its (connect, call) timeouts."""
    spec = parse_server(options["server"], options.get("env"), options.get("transport"))
    connect_s, call_s = _timeouts(options.get("timeout"), options.get("connect_timeout"), options.get("call_timeout"),
                                  connect_default, call_default)
    return spec, connect_s, call_s


def _load(options: Mapping[str, Any], connect_default: float, call_default: float) -> list[Tool]:
    _require_mcp()
    spec, connect_s, call_s = _launch(options, connect_default, call_default)
    try:
        limit: Any = options.get("max_result_chars")
        max_result_chars = MAX_RESULT_CHARS if _unset(limit) else int(limit)
    except (TypeError, ValueError):
        raise ConfigError("MCP 'max_result_chars' must be a number of characters", key="mcp_servers") from None
    if max_result_chars <= 0:
        raise ConfigError("MCP 'max_result_chars' must be positive", key="mcp_servers")
    danger = DangerRule(options.get("dangerous"), key="mcp_servers", owner="MCP server", names="tools",
                        default_means="every tool the server does not annotate readOnlyHint: true")
    wants = {what: _flag(options.get(what, True), what) for what in ("resources", "prompts")}
    taken = options.get("taken")
    book = taken if isinstance(taken, NameBook) else NameBook(taken or ())
    files = FileSaver(options["workspace"]) if options.get("workspace") is not None else None
    connection, closer = _open(spec, connect_s, call_s, _flag(options.get("shared", False), "shared"))
    try:
        tools = _tools(connection, connection.listing, book, danger, wants, files, max_result_chars,
                       options.get("name_prefix"), options.get("prefix"), closer)
        danger.check_listed(spec.label)
    except BaseException:
        closer()
        raise
    return tools


def _open(spec: ServerSpec, connect_s: float, call_s: float, shared: bool) -> tuple[MCPConnection, Callable[[], None]]:
    """The connected connection and what closes this app's use of it: the process's shared connection and
    a lease of it, or a connection of its own."""
    try:
        if shared:
            lease = SHARED.acquire(spec, connect_s, call_s)
            return lease.connection, lease.close
        connection = MCPConnection(spec, connect_s, call_s)
        try:
            connection.connect()
        except ConnectFailure:
            connection.close()
            raise
        return connection, connection.close
    except ConnectFailure as exc:
        raise ConfigError(f"MCP server {spec.label}: could not connect: {exc}", key="mcp_servers") from None


class SharedServers:
    """The process's hold on the shared ``mcp_servers`` entries (``"shared": true``) of a configuration:
    :meth:`start` opens them in the background, :meth:`close` gives them back (each is closed when no app
    holds it any more). ``tool-hub serve`` holds them from its start to its shutdown, so every user's app
    finds them started and users coming and going never restart them."""

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = settings
        self.leases: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def entries(self) -> list[Mapping[str, Any]]:
        """The shared entries of ``mcp_servers`` (a list, or JSON text from the environment)."""
        value = self.settings.get("mcp_servers")
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return []
        items = value if isinstance(value, list) else [value] if value else []
        return [item for item in items if isinstance(item, Mapping) and "server" in item
                and _shared_flag(item.get("shared"))]

    def start(self) -> "SharedServers":
        """Open the shared servers, each in a background thread of its own (nothing when there are none)."""
        for entry in self.entries():
            thread = threading.Thread(target=self._open, args=(entry,), name="mcp-shared-start", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the starts (at most ``timeout`` seconds for each)."""
        for thread in self._threads:
            thread.join(timeout)

    def _open(self, entry: Mapping[str, Any]) -> None:
        try:
            _require_mcp()
            connect_default = _seconds(get_typed(self.settings, "mcp_connect_timeout", DEFAULT_CONNECT_TIMEOUT),
                                       "mcp_connect_timeout")
            call_default = _seconds(get_typed(self.settings, "mcp_call_timeout", DEFAULT_CALL_TIMEOUT),
                                    "mcp_call_timeout")
            spec, connect_s, call_s = _launch(entry, connect_default, call_default)
            lease = SHARED.acquire(spec, connect_s, call_s)
        except (ConnectFailure, ConfigError, UserError) as exc:
            log.warning("shared MCP server %s did not start: %s (apps will try again when they are built)",
                        _entry_label(entry), exc)
            return
        with self._lock:
            self.leases.append(lease)

    def close(self) -> None:
        """Give the shared servers back (after the start, when it is still running)."""
        self.wait()
        with self._lock:
            leases, self.leases = self.leases, []
        close_leases(leases)


def _shared_flag(value: Any) -> bool:
    try:
        return _flag(False if value is None else value, "shared")
    except ConfigError:
        return False


def _entry_label(entry: Mapping[str, Any]) -> str:
    try:
        return parse_server(entry["server"], entry.get("env"), entry.get("transport")).label
    except ConfigError:
        return "?"


def _tools(connection: MCPConnection, listing: Listing, book: NameBook, danger: DangerRule, wants: dict[str, bool],
           files: FileSaver | None, max_result_chars: int, name_prefix: str | None, prefix: str | None,
           closer: Callable[[], None] | None = None) -> list[Tool]:
    server_name = tool_name(None, listing.server_name or connection.spec.short_name)
    clash_prefix = prefix or server_name
    owner = f"MCP server {connection.title}"
    common: dict[str, Any] = {"max_result_chars": max_result_chars, "files": files, "closer": closer}
    tools: list[MCPTool] = []
    for item in listing.tools:
        name = book.claim(tool_name(name_prefix, item.name), owner, clash_prefix, connection)
        description = (item.description or getattr(item, "title", None) or item.name).strip()
        risky = danger.decide({item.name, name}, default=not read_only(item))
        tools.append(MCPTool(connection, item.name, name, description, input_schema(item), dangerous=risky,
                             read_only=read_only(item), **common))
    base = name_prefix or prefix or server_name
    if wants["resources"] and (listing.resources or listing.templates):
        name = book.claim(tool_name(base, "read-resource"), owner, clash_prefix, connection)
        reader = MCPResourceTool(connection, name, listing.resources, listing.templates,
                                 dangerous=danger.decide({name, "read-resource"}, default=False), **common)
        tools.append(reader)
        for tool in tools:
            tool.resource_tool = name
    if wants["prompts"] and listing.prompts:
        name = book.claim(tool_name(base, "get-prompt"), owner, clash_prefix, connection)
        tools.append(MCPPromptTool(connection, name, listing.prompts,
                                   dangerous=danger.decide({name, "get-prompt"}, default=False), **common))
    book.warn(owner, connection)
    if not tools:
        log.warning("the MCP server %s offers no tools", connection.title)
    return list(tools)


def _timeouts(timeout: Any, connect: Any, call: Any, connect_default: float, call_default: float) -> tuple[float, float]:
    """(connect, call) seconds: ``call_timeout``, else the older ``timeout``, else the default; the connect
    timeout is ``connect_timeout``, else the default but never shorter than an older ``timeout``."""
    legacy = None if _unset(timeout) else _seconds(timeout, "timeout")
    call_s = _seconds(call, "call_timeout") if not _unset(call) else legacy if legacy is not None else call_default
    if not _unset(connect):
        return _seconds(connect, "connect_timeout"), call_s
    return max(connect_default, legacy or 0.0), call_s


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _seconds(value: Any, what: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"MCP '{what}' must be a positive number of seconds, got {str(value)[:30]!r}",
                          key=what if what.startswith("mcp_") else "mcp_servers")
    return seconds


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    raise ConfigError(f"MCP option '{what}' must be true or false, got {str(value)[:30]!r}", key="mcp_servers")
