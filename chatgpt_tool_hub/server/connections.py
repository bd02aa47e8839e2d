"""Connections of ``tool-hub serve``: a cap, a deadline for a request's headers, the open-files limit, and
access logs without capabilities.

uvicorn keeps every connection a client opens for as long as the client
likes until its first request is complete: a client that opens a thousand
connections and drips a header byte now and then (slowloris) uses up the
process's file descriptors, and then nobody gets an answer, keys or not.
:func:`guarded_protocol` makes uvicorn's HTTP/1.1 protocol class close such
connections: past ``max_connections`` a new connection is closed at once, and
a connection gets ``header_timeout_s`` seconds to send a whole request head
(the time counts from the first byte of the request, or from the connection
for the first one; dripping does not reset it). :func:`raise_open_files_limit`
lifts the soft ``RLIMIT_NOFILE`` to the hard limit at start, so the cap and
the runs' own files fit. Behind a reverse proxy (nginx, Caddy) its own limits
apply first; see docs/server.md.

:class:`CapabilityFilter` rewrites the access log's request lines so that
session ids, local tokens and link signatures never reach a log file.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

__all__ = ["guarded_protocol", "raise_open_files_limit", "CapabilityFilter", "quiet_access_log"]

log = logging.getLogger("chatgpt_tool_hub.server")
_CAPABILITIES = re.compile(r"(?i)([?&](?:session_hash|token|sig|access_token|api_key|key)=)[^&#\s]*")


def guarded_protocol(max_connections: int, header_timeout_s: float) -> type:
    """uvicorn's h11 protocol class with a connection cap and a header deadline (``http=`` of its Config)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if max_connections > 0 and len(self.connections) > max_connections:
                log.warning("%d connections are open (serve_max_connections): a new one is closed",
                            len(self.connections) - 1)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # part of a request head is here: it has until the deadline for the rest
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None and header_timeout_s > 0:
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
                self.transport.close()

    return GuardedH11Protocol


def raise_open_files_limit(wanted: int) -> tuple[int, int] | None:
    """Lift the soft ``RLIMIT_NOFILE`` towards the hard limit (at least ``wanted`` when the hard limit allows);
    ``(before, after)``, or None where there is no such limit (Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


class CapabilityFilter(logging.Filter):
    """Masks ``session_hash``, ``token``, ``sig`` and key values in log records' arguments (uvicorn's access
    log passes the request path as one of them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_CAPABILITIES.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = _CAPABILITIES.sub(r"\1***", record.msg)
        return True


def quiet_access_log() -> None:
    """Put a :class:`CapabilityFilter` on uvicorn's access log (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, CapabilityFilter) for f in access.filters):
        access.addFilter(CapabilityFilter())
