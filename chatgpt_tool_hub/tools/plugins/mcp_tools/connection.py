"""One MCP client session per server, kept open on a background event-loop thread.

The engine is synchronous, so each connection runs its ``ClientSession`` on a
dedicated :class:`~chatgpt_tool_hub.runtime.bridge.LoopThread` and keeps it open while the tools
live. What happens when the server goes away:

* **Session lost** (HTTP 404 on a request carrying ``Mcp-Session-Id``, e.g. a
  restarted server): the request never ran, so a new session is initialised and
  the request is sent again, once.
* **Not sent** (the HTTP connection was refused): the same, once.
* **Dropped during a request** (a crash, a dropped connection): the request may
  have run, so it is not repeated; the observation says so and the next request
  opens a new session.
* **Dropped while idle** (a stdio child that exited): noticed before the next
  request, which opens a new session first.
* **Timed out**: the session is restarted on the next request.

Reconnecting tries ``reconnect_attempts`` times with growing pauses
(``reconnect_delays``), each attempt logged; a server that stays down gives an
observation naming it and what was tried, and is tried again on a later call
(it is never given up for good). Requests that waited for a failed reconnect
fail with its message instead of trying again at once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ....config import SETTINGS
from ....errors import ToolExecutionError
from .results import _attr
from .spec import ServerSpec, child_environment

__all__ = ["MCPConnection", "Listing", "ConnectFailure", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_CALL_TIMEOUT",
           "CONNECT_TIMEOUT_HINT"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")

DEFAULT_CONNECT_TIMEOUT = SETTINGS["mcp_connect_timeout"].default  # start, initialize and the lists; the default of mcp_connect_timeout
DEFAULT_CALL_TIMEOUT = SETTINGS["mcp_call_timeout"].default  # one request; the default of mcp_call_timeout
# follows "no answer within N s" when a server did not start in time: the settings that raise the limit
CONNECT_TIMEOUT_HINT = ("; raise mcp_connect_timeout (or \"connect_timeout\" in its mcp_servers entry): "
                        "a first npx or uvx run downloads the package before the server answers")
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK uses for a dropped connection
_SESSION_GONE = re.compile(r"session (?:not found|terminated|expired|unknown|does not exist)|unknown session|"
                           r"could not find session|invalid session", re.I)
_MAX_PAGES = {"tools": 100, "resources": 10, "resource_templates": 10, "prompts": 10}
_OPEN: set["MCPConnection"] = set()
_OPEN_LOCK = threading.Lock()


class ConnectFailure(Exception):
    """Connecting failed; the message is safe to show."""


@dataclass
class Listing:
    """What a server offers, read when the session opens."""

    tools: list[Any] = field(default_factory=list)
    resources: list[Any] = field(default_factory=list)
    templates: list[Any] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)
    server_name: str = ""


class MCPConnection:
    """One MCP client session kept open on a background event-loop thread (see the module docstring)."""

    reconnect_attempts = 3
    reconnect_delays: tuple[float, ...] = (0.5, 1.0, 2.0)  # before the 2nd, 3rd ... attempt; the last repeats

    def __init__(self, spec: ServerSpec, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 call_timeout: float = DEFAULT_CALL_TIMEOUT):
        self.spec = spec
        self.connect_timeout = float(connect_timeout)
        self.call_timeout = float(call_timeout)
        self.listing = Listing()
        self.closed = False
        self._lock = threading.RLock()
        self._bridge: Any = None
        self._held: Any = None
        self._session: Any = None
        self._errlog: Any = None
        self._broken = False
        self._generation = 0
        self._gone: set[int] = set()  # generations whose session the server answered 404 for
        self._failed_at = float("-inf")  # when the last reconnect round gave up, and why
        self._failure = ""
        self._http_error: tuple[int, int, str] | None = None  # (generation, status, method) of the last HTTP error

    # ---- names ------------------------------------------------------------------------

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def title(self) -> str:
        """``'name' (label)`` once the server named itself, else the label."""
        name = self.listing.server_name
        return f"'{name}' ({self.label})" if name and name != self.label else self.label

    @property
    def timeout(self) -> float:
        """The older name of :attr:`call_timeout`."""
        return self.call_timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self.call_timeout = float(value)

    # ---- opening ----------------------------------------------------------------------

    def connect(self) -> Listing:
        """Open the session and read what the server offers; raises :class:`ConnectFailure`."""
        from ....runtime.bridge import HeldContext, LoopThread

        with self._lock:
            if self.closed:
                raise ToolExecutionError(f"the MCP server {self.title} connection is closed")
            if self._bridge is None or not self._bridge.alive:
                self._bridge = LoopThread(f"mcp:{self.label}"[:60])
            if self._errlog is None and self.spec.command:
                self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            elif self._errlog is not None:  # a reconnect: only this start's stderr matters
                self._errlog.seek(0)
                self._errlog.truncate()
            with _OPEN_LOCK:
                _OPEN.add(self)
            self._generation += 1
            self._held = HeldContext(self._bridge, functools.partial(self._open_session, self._generation))
            try:
                self._session, listing = self._held.open(self.connect_timeout)
            except BaseException as exc:
                text = self._describe(exc, stderr=True, timeout=self.connect_timeout, hint=CONNECT_TIMEOUT_HINT)
                raise ConnectFailure(text + self._http_hint(self._generation)) from None
            self._broken = False
            self.listing = listing
            return listing

    async def _open_session(self, generation: int, stack: contextlib.AsyncExitStack) -> tuple[Any, Listing]:
        from mcp import ClientSession

        streams = await stack.enter_async_context(await self._transport(stack, generation))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        init = await session.initialize()
        return session, await _read_listing(session, init)

    async def _transport(self, stack: contextlib.AsyncExitStack, generation: int) -> Any:
        spec = self.spec
        if spec.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(spec.url or "", headers=spec.headers or None, timeout=self.connect_timeout,
                              sse_read_timeout=max(300.0, self.call_timeout + 10),
                              httpx_client_factory=functools.partial(self._http_client, generation))
        if spec.url:
            try:
                from mcp.client.streamable_http import (
                    streamable_http_client,  # mcp >= 2
                )
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client  # type: ignore[attr-defined]

                return streamablehttp_client(spec.url, headers=spec.headers or None)
            client = await stack.enter_async_context(self._http_client(generation, headers=spec.headers or None))
            return streamable_http_client(spec.url, http_client=client)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert spec.command
        params = StdioServerParameters(command=spec.command[0], args=spec.command[1:],
                                       env=child_environment(spec.env), cwd=spec.cwd)
        return stdio_client(params, errlog=self._errlog) if self._errlog is not None else stdio_client(params)

    def _http_client(self, generation: int, headers: dict[str, str] | None = None, timeout: Any = None,
                     auth: Any = None) -> Any:
        """The SDK's HTTP client (its timeouts from ours) with a hook that notices a lost session."""
        try:
            import httpx2 as httpx
        except ImportError:  # mcp 1.x
            import httpx  # type: ignore[no-redef]
        from mcp.shared._httpx_utils import create_mcp_http_client

        if timeout is None or self.spec.transport == "sse":
            timeout = httpx.Timeout(max(30.0, self.connect_timeout), connect=self.connect_timeout,
                                    read=max(300.0, self.call_timeout + 10))
        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)

        async def notice_lost_session(response: Any) -> None:
            request = response.request
            if response.status_code >= 400:
                self._http_error = (generation, response.status_code, request.method)
            if response.status_code == 404 and (request.headers.get("mcp-session-id")
                                                 or re.search(r"[?&]session_?id=", str(request.url), re.I)):
                self._gone.add(generation)

        client.event_hooks["response"].append(notice_lost_session)
        return client

    # ---- requests ---------------------------------------------------------------------

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call one tool; connection trouble becomes ``ToolExecutionError``."""
        return self.request(f"'{name}'", lambda session: session.call_tool(name, arguments))

    def read_resource(self, uri: str) -> Any:
        return self.request(f"the resource {uri}", lambda session: session.read_resource(uri))

    def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        return self.request(f"the prompt '{name}'", lambda session: session.get_prompt(name, arguments or None))

    def request(self, what: str, make: Callable[[Any], Awaitable[Any]]) -> Any:
        """Send one request (``make(session)``), opening a new session first when needed and once more
        when the server lost the session or the request could not be sent."""
        started = time.monotonic()
        session, bridge, generation, held = self._ready(started)
        try:
            return self._send(bridge, make(session))
        except Exception as exc:  # noqa: BLE001 - sorted out below
            reason = self._after_failure(exc, what, generation, held, retried=False)
        log.info("MCP server %s: %s; sending %s again on a new session", self.title, reason, what)
        session, bridge, generation, held = self._ready(started, stale=generation)
        try:
            return self._send(bridge, make(session))
        except Exception as exc:  # noqa: BLE001
            self._after_failure(exc, what, generation, held, retried=True)
            raise  # not reached: _after_failure raises when retried

    def _send(self, bridge: Any, coro: Any) -> Any:
        return bridge.run(asyncio.wait_for(coro, self.call_timeout), self.call_timeout + 5)

    def _ready(self, started: float, stale: int | None = None) -> tuple[Any, Any, int, Any]:
        """The session to use, (re)connecting first when it is broken, gone or ``stale``."""
        with self._lock:
            if self.closed:
                raise ToolExecutionError(f"the MCP server {self.title} connection is closed")
            if stale is not None and stale == self._generation:
                self._broken = True
            reason = self._unusable()
            if reason:
                if self._failed_at > started:  # a reconnect round failed while this request waited for it
                    raise ToolExecutionError(self._failure)
                self._reconnect(reason)
            return self._session, self._bridge, self._generation, self._held

    def _unusable(self) -> str:
        """Why the current session cannot take a request ("" when it can)."""
        if self._generation in self._gone:  # also seen on the idle event stream of a restarted server
            return "the server no longer knows the session (HTTP 404)"
        if self._broken:
            return "the last request failed"
        if self._held is None or not self._held.alive or self._session is None:
            return "the connection was closed"
        dispatcher = getattr(self._session, "_dispatcher", None)  # closed once the transport ended (SDK 2.x)
        return "the connection was closed" if getattr(dispatcher, "_closed", False) else ""

    def _usable(self) -> bool:
        return not self._unusable()

    def _after_failure(self, exc: BaseException, what: str, generation: int, held: Any, *, retried: bool) -> str:
        """Raise the observation for a failed request, or return why it may be sent again."""
        from ....runtime.bridge import unwrap_exception

        exc = unwrap_exception(exc)
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            self._mark_broken(generation)
            raise ToolExecutionError(
                f"the MCP server {self.title} did not answer {what} within {self.call_timeout:g} s; "
                "the connection will be restarted on the next call") from None
        if _is_protocol_error(exc):
            if not self._session_gone(exc, generation):  # the server answered with a JSON-RPC error: it is alive
                raise ToolExecutionError(f"the MCP server {self.title} refused {what}: {exc}") from None
            if not retried:
                return "the server no longer knows the session (HTTP 404)"
            self._mark_broken(generation)
            raise ToolExecutionError(f"the MCP server {self.title} lost the new session too ({exc}); "
                                     "a new one will be opened on the next call") from None
        self._mark_broken(generation)
        if not retried and generation in self._gone:  # the session was lost, then closed under this request
            return "the server no longer knows the session (HTTP 404)"
        cause = held.ended(wait=1.0 if self.spec.url else 0.0) if held is not None else None
        if not retried and _not_sent(cause):
            return f"the request could not be sent ({self._describe(cause)})"
        raise ToolExecutionError(
            f"the MCP server {self.title} failed during {what}: {self._describe(cause or exc)}; "
            "it will be reconnected on the next call") from None

    def _session_gone(self, exc: BaseException, generation: int) -> bool:
        if generation in self._gone:
            return True
        return self.spec.url is not None and bool(_SESSION_GONE.search(str(exc)))

    def _mark_broken(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._broken = True

    def _reconnect(self, reason: str) -> None:
        """Open a new session: ``reconnect_attempts`` tries with pauses between them (lock held)."""
        attempts = max(1, int(self.reconnect_attempts))
        started = time.monotonic()
        errors: list[str] = []
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                delays = self.reconnect_delays or (0.0,)
                time.sleep(delays[min(attempt - 2, len(delays) - 1)])
            if self.closed:
                break
            log.info("MCP server %s: %s; opening a new session (attempt %d of %d)", self.title, reason, attempt,
                     attempts)
            old = self.listing
            self._shutdown_session()
            try:
                listing = self.connect()
            except ConnectFailure as exc:
                errors.append(str(exc))
                log.warning("MCP server %s: reconnect attempt %d of %d failed: %s", self.title, attempt, attempts, exc)
                continue
            _report_changes(self.title, old, listing)
            log.info("MCP server %s: reconnected", self.title)
            return
        self._failed_at = time.monotonic()
        self._failure = (f"the MCP server {self.title} is unavailable: {len(errors)} connection attempt"
                         f"{'s' if len(errors) != 1 else ''} over {self._failed_at - started:.1f} s failed "
                         f"(last: {errors[-1] if errors else 'the connection was closed'}); "
                         "it will be tried again on the next call")
        raise ToolExecutionError(self._failure)

    # ---- closing ----------------------------------------------------------------------

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

    # ---- messages ---------------------------------------------------------------------

    def _describe(self, exc: BaseException | None, stderr: bool = False, timeout: float | None = None,
                  hint: str = "") -> str:
        """What went wrong, in a few words; ``hint`` follows a timeout."""
        from ....runtime.bridge import unwrap_exception

        if exc is None:
            return "the connection was closed"
        exc = unwrap_exception(exc)
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            text = f"no answer within {timeout or self.call_timeout:g} s{hint}"
        elif isinstance(exc, FileNotFoundError):
            text = f"command not found: {self.spec.command[0] if self.spec.command else exc}"
        else:
            text = str(exc) or type(exc).__name__
        tail = self._stderr_tail() if stderr else ""
        return f"{text} (server stderr: {tail})" if tail else text

    def _http_hint(self, generation: int) -> str:
        """What an HTTP error status while opening a session says, and a hint for the older SSE servers."""
        if self._http_error is None or self._http_error[0] != generation:
            return ""
        _, status, method = self._http_error
        text = f" (HTTP {status} to {method} {self.label})"
        if self.spec.transport == "streamable-http" and status in (400, 404, 405):
            text += ("; if it is a server with the older HTTP+SSE transport, add \"transport\": \"sse\" to the "
                     "mcp_servers entry (a URL ending in /sse uses it by itself)")
        return text

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


def _is_protocol_error(exc: BaseException) -> bool:
    code = getattr(getattr(exc, "error", None), "code", None)
    return isinstance(code, int) and code != _CONNECTION_CLOSED and type(exc).__name__ in ("MCPError", "McpError")


def _not_sent(cause: BaseException | None) -> bool:
    """Whether the transport ended because it could not reach the server (so the request never left)."""
    if cause is None:
        return False
    if isinstance(cause, ConnectionRefusedError):
        return True
    return type(cause).__name__ == "ConnectError" and type(cause).__module__.split(".")[0] in ("httpx2", "httpx")


def _report_changes(title: str, old: Listing, new: Listing) -> None:
    before = {t.name for t in old.tools}
    after = {t.name for t in new.tools}
    if before and before - after:
        log.warning("MCP server %s no longer offers %s after reconnecting; calls to them will fail",
                    title, ", ".join(sorted(before - after)))


async def _read_listing(session: Any, init: Any) -> Listing:
    caps = _attr(init, "capabilities")
    info = _attr(init, "server_info", "serverInfo")
    listing = Listing(server_name=str(_attr(info, "name") or ""))
    if caps is None or _attr(caps, "tools") is not None:
        listing.tools = await _paged(session.list_tools, "tools")
    if caps is not None and _attr(caps, "resources") is not None:
        listing.resources = await _paged(session.list_resources, "resources", optional=True)
        listing.templates = await _paged(session.list_resource_templates, "resource_templates", optional=True)
    if caps is not None and _attr(caps, "prompts") is not None:
        listing.prompts = await _paged(session.list_prompts, "prompts", optional=True)
    return listing


async def _paged(method: Callable[..., Awaitable[Any]], what: str, optional: bool = False) -> list[Any]:
    """Every page of a list request (bounded: a server whose pagination never ends cannot hang us)."""
    items: list[Any] = []
    cursor = None
    try:
        for _ in range(_MAX_PAGES[what]):
            if cursor is None:
                page = await method()
            else:
                try:
                    from mcp.types import PaginatedRequestParams

                    page = await method(params=PaginatedRequestParams(cursor=cursor))
                except (ImportError, TypeError):
                    page = await method(cursor=cursor)
            items.extend(_attr(page, what, "resourceTemplates") or [])
            cursor = _attr(page, "next_cursor", "nextCursor")
            if not cursor:
                break
    except Exception as exc:
        if not optional or not _is_protocol_error(exc):
            raise
        log.debug("listing %s failed: %s", what, exc)
    return items


@atexit.register
def _close_all() -> None:
    with _OPEN_LOCK:
        connections = list(_OPEN)
    for connection in connections:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - interpreter exit
            pass
