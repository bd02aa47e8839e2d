"""What to connect to: the ``server`` argument of an ``mcp_servers`` entry as a :class:`ServerSpec`.

A stdio command (a string split like a shell would, or an argv list), an HTTP
URL, or a dict ``{"command": [...], "args": [...], "env": {...}, "cwd": ...}`` /
``{"url": ..., "headers": {...}, "transport": "sse"}``. A URL speaks streamable
HTTP unless its path ends in ``/sse`` or ``transport`` says ``"sse"`` (the
legacy HTTP+SSE transport of protocol 2024-11-05).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from ....errors import ConfigError

__all__ = ["ServerSpec", "parse_server", "child_environment", "TRANSPORTS", "normalize_transport"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")

TRANSPORTS = ("stdio", "streamable-http", "sse")
_ALIASES = {"stdio": "stdio", "http": "streamable-http", "streamable-http": "streamable-http",
            "streamable_http": "streamable-http", "streamablehttp": "streamable-http", "sse": "sse"}
_CHILD_ENV_KEYS = ("PATH", "HOME", "LANG")
_SCRIPT = re.compile(r"^(?:[\w./-]*/)?[\w.-]+\.(?:py|js|mjs|cjs|ts)$|^@[\w.-]+/[\w.-]+(?:@[\w.-]+)?$")
_SERVER_KEYS = {"command", "args", "url", "env", "cwd", "headers", "transport"}


@dataclass
class ServerSpec:
    """A parsed ``server`` argument."""

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    transport: str = ""  # "stdio", "streamable-http" or "sse" once parsed

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

    @property
    def short_name(self) -> str:
        """A name made from the command or URL, for servers that do not name themselves."""
        if self.url:
            parts = urlsplit(self.url)
            return parts.hostname or "mcp"
        name = self.label.split()[-1]
        name = re.sub(r"^@[\w.-]+/", "", name)
        return re.sub(r"\.(?:py|js|mjs|cjs|ts)$", "", name) or "mcp"


def normalize_transport(value: Any) -> str:
    """``"http"``, ``"streamable-http"``, ``"sse"`` or ``"stdio"`` (any case) -> the canonical spelling."""
    if value in (None, ""):
        return ""
    key = str(value).strip().lower()
    if key not in _ALIASES:
        raise ConfigError(f"MCP 'transport' must be one of {', '.join(TRANSPORTS)} (or 'http'), got "
                          f"{str(value)[:40]!r}", key="mcp_servers")
    return _ALIASES[key]


def parse_server(server: str | list[str] | Mapping[str, Any], env: Mapping[str, Any] | None = None,
                 transport: str | None = None) -> ServerSpec:
    """Turn the ``server`` argument into a :class:`ServerSpec` or raise ``ConfigError``."""
    spec = ServerSpec()
    wanted = normalize_transport(transport)
    if isinstance(server, Mapping):
        unknown = set(server) - _SERVER_KEYS
        if unknown:
            raise ConfigError(f"MCP server entry has unknown keys: {', '.join(sorted(unknown))}; options go next "
                              "to it: {\"server\": {\"command\": [...]}, \"call_timeout\": 60, \"name_prefix\": \"fs\"}",
                              key="mcp_servers")
        if bool(server.get("command")) == bool(server.get("url")):
            raise ConfigError("an MCP server entry needs exactly one of 'command' or 'url'", key="mcp_servers")
        if server.get("url"):
            spec.url = str(server["url"]).strip()
        else:
            spec.command = _argv(server["command"]) + [str(a) for a in server.get("args") or []]
        spec.env.update(_str_map(server.get("env"), "env"))
        spec.headers.update(_str_map(server.get("headers"), "headers"))
        spec.cwd = str(server["cwd"]) if server.get("cwd") else None
        inner = normalize_transport(server.get("transport"))
        if inner and wanted and inner != wanted:
            raise ConfigError(f"MCP server entry says transport {inner!r} inside 'server' and {wanted!r} next to it",
                              key="mcp_servers")
        wanted = wanted or inner
    elif isinstance(server, str) and re.match(r"^https?://", server.strip(), flags=re.I):
        spec.url = server.strip()
    elif isinstance(server, (str, list, tuple)):
        spec.command = _argv(server)
    else:
        raise ConfigError(f"an MCP server must be a command, a URL or a dict, not {type(server).__name__}",
                          key="mcp_servers")
    spec.env.update(_str_map(env, "env"))
    spec.transport = _transport(spec, wanted)
    if spec.url and spec.env:
        log.debug("env is ignored for the HTTP MCP server %s", spec.label)
    return spec


def _transport(spec: ServerSpec, wanted: str) -> str:
    if spec.command:
        if wanted and wanted != "stdio":
            raise ConfigError(f"MCP server {spec.label}: transport {wanted!r} needs a URL, not a command",
                              key="mcp_servers")
        return "stdio"
    if wanted == "stdio":
        raise ConfigError(f"MCP server {spec.label}: transport 'stdio' needs a command, not a URL", key="mcp_servers")
    if wanted:
        return wanted
    path = urlsplit(spec.url or "").path.rstrip("/")
    return "sse" if path.endswith("/sse") else "streamable-http"


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
