"""Shared MCP connections: one per launch configuration, for every app of the process.

An ``mcp_servers`` entry with ``"shared": true`` does not start a server per
app: every app of the process (every user of ``tool-hub serve``) that lists the
same launch configuration (command or URL, env, cwd, headers, transport and the
two timeouts) uses one :class:`~.connection.MCPConnection`. Each app holds a
:class:`Lease`; the connection is opened by the first lease (the others wait
for that one start instead of starting servers of their own) and closed when
the last lease is closed. ``tool-hub serve`` holds a lease of each shared entry
from its start to its shutdown (``SharedServers`` in the package), so users
coming and going never restart the server.

Only stateless servers (fetch, time, search ...) should be shared: a server
that keeps state between calls (a memory, an open browser, a working folder)
shares that state between the users too.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from .connection import ConnectFailure, MCPConnection
from .spec import ServerSpec

__all__ = ["SharedConnections", "Lease", "SHARED", "launch_key", "close_leases"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")


def launch_key(spec: ServerSpec, connect_timeout: float, call_timeout: float) -> Hashable:
    """What makes two entries the same server: how it is launched or reached, and its timeouts."""
    return (tuple(spec.command or ()), spec.url, tuple(sorted(spec.env.items())), spec.cwd,
            tuple(sorted(spec.headers.items())), spec.transport, float(connect_timeout), float(call_timeout))


@dataclass(eq=False)
class _Entry:
    connection: MCPConnection
    refs: int = 0
    started: bool = False
    failure: str = ""
    start_lock: threading.Lock = field(default_factory=threading.Lock)


class Lease:
    """One holder's use of a shared connection; ``close()`` gives it back (once)."""

    def __init__(self, release: Callable[[], None], connection: MCPConnection):
        self.connection = connection
        self._release: Callable[[], None] | None = release
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            release()


class SharedConnections:
    """The process's shared connections, reference counted by :class:`Lease`."""

    def __init__(self, make: Callable[[ServerSpec, float, float], MCPConnection] = MCPConnection):
        self._make = make
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()

    def acquire(self, spec: ServerSpec, connect_timeout: float, call_timeout: float) -> Lease:
        """A lease of the connection to ``spec``, opened now by the first holder (the others wait for it);
        raises :class:`ConnectFailure` when the server cannot be started or reached."""
        key = launch_key(spec, connect_timeout, call_timeout)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(self._make(spec, connect_timeout, call_timeout))
            entry.refs += 1
        with entry.start_lock:
            if not entry.started:
                if entry.failure:  # it failed while this holder waited for that start
                    self._release(key, entry)
                    raise ConnectFailure(entry.failure)
                try:
                    entry.connection.connect()
                except ConnectFailure as exc:
                    entry.failure = str(exc)
                    self._forget(key, entry)  # a later holder tries again
                    self._release(key, entry)
                    raise
                except BaseException:
                    entry.failure = "the MCP server could not be started"
                    self._forget(key, entry)
                    self._release(key, entry)
                    raise
                entry.started = True
                log.info("MCP server %s: started, shared by the apps of this process", entry.connection.title)
        return Lease(lambda: self._release(key, entry), entry.connection)

    def open_count(self) -> int:
        """How many shared connections are open or opening."""
        with self._lock:
            return len(self._entries)

    def holders(self, spec: ServerSpec, connect_timeout: float, call_timeout: float) -> int:
        """How many leases the connection to ``spec`` has (0: none is open)."""
        with self._lock:
            entry = self._entries.get(launch_key(spec, connect_timeout, call_timeout))
            return entry.refs if entry is not None else 0

    def _forget(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def _release(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            entry.refs -= 1
            last = entry.refs <= 0
            if last and self._entries.get(key) is entry:
                del self._entries[key]
        if last:
            entry.connection.close()


SHARED = SharedConnections()  # the process's pool: every app's shared entries


def close_leases(leases: list[Any]) -> None:
    """Close each lease, whatever the others do."""
    for lease in leases:
        try:
            lease.close()
        except Exception:  # noqa: BLE001 - closing one must not keep the others open
            log.debug("closing a shared MCP connection failed", exc_info=True)
