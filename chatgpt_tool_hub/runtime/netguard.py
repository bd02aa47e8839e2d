"""SSRF guard for network tools: check a URL, then connect only to the address that was checked.

* :func:`check_url` (from :mod:`.urlcheck`, re-exported here with the other
  URL-check names) parses an http(s) URL, refuses other schemes and embedded
  credentials, resolves the host and checks **every** resolved address with
  :func:`is_blocked_address`. That part needs no HTTP client, so modules that
  only check URLs import :mod:`.urlcheck` and leave ``requests`` unloaded.
* :func:`pinned_session` returns a ``requests`` session whose adapter connects
  to the checked address (no second DNS lookup, so no DNS rebinding) while the
  ``Host`` header, TLS SNI and certificate verification keep the original
  hostname. Requests to hosts that were not pinned are refused.

* :meth:`PinnedSession.deadline` bounds a whole exchange: per-read timeouts
  alone let a server that drips one byte at a time hold a call for hours, so
  when the deadline passes every socket of the session is shut down and the
  call fails with :class:`DeadlineExceeded`.

Limits: through a proxy the proxy resolves and connects, so pinning cannot
apply (the target's addresses are still checked locally); redirects must be
followed by the caller, re-checking and pinning each hop.
"""

from __future__ import annotations

import re
import socket
import threading
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy

from .urlcheck import (
    ALLOWED_SCHEMES,
    DEFAULT_PORTS,
    BlockedURLError,
    CheckedURL,
    HostResolutionError,
    PrivateAllowList,
    check_url,
    is_blocked_address,
    parse_allow_private,
)

__all__ = [
    "BlockedURLError",
    "HostResolutionError",
    "DeadlineExceeded",
    "CheckedURL",
    "PrivateAllowList",
    "check_url",
    "parse_allow_private",
    "is_blocked_address",
    "PinnedAdapter",
    "PinnedSession",
    "pinned_session",
    "describe_network_error",
    "ALLOWED_SCHEMES",
    "DEFAULT_PORTS",
]


class DeadlineExceeded(requests.exceptions.Timeout):
    """A whole exchange took longer than its deadline (see :meth:`PinnedSession.deadline`)."""

    def __init__(self, seconds: float):
        super().__init__(f"no complete answer within {seconds:g} s")
        self.seconds = seconds


# ---- pinned connections -----------------------------------------------------------------


class PinnedAdapter(HTTPAdapter):
    """Connects to the checked address of each pinned host; refuses hosts that were not pinned.

    TLS keeps the hostname for SNI and certificate verification
    (urllib3 ``server_hostname`` / ``assert_hostname``). Requests that go
    through a proxy are not pinned: the proxy connects.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self._pins: dict[tuple[str, str, int], CheckedURL] = {}
        self._watched: list[socket.socket] = []  # duplicates of every socket opened, for abort()
        self._watch_lock = threading.Lock()
        self._tracked_classes: dict[type, type] = {}
        self.aborted = False
        super().__init__(*args, **kwargs)

    # ---- aborting: shut every socket down, waking any read blocked on it -------------

    def abort(self) -> None:
        """Shut down every connection this adapter opened (from any thread); later ones at once."""
        with self._watch_lock:
            self.aborted = True
            for sock in self._watched:
                _shutdown(sock)

    def close(self) -> None:
        super().close()
        with self._watch_lock:
            for sock in self._watched:
                sock.close()
            self._watched.clear()

    def _watch(self, sock: socket.socket) -> None:
        # A duplicate stays valid when urllib3 wraps (TLS) or closes its socket, and shutting
        # it down ends the connection under every descriptor.
        with self._watch_lock:
            copy = sock.dup()
            self._watched.append(copy)
            if self.aborted:
                _shutdown(copy)

    def _tracked(self, pool: Any) -> Any:
        """``pool`` with a connection class that reports each new socket to :meth:`_watch`."""
        base = pool.ConnectionCls
        if getattr(base, "_watched_by", None) is self:
            return pool
        cls = self._tracked_classes.get(base)
        if cls is None:
            adapter = self

            def _new_conn(conn: Any) -> socket.socket:
                sock = base._new_conn(conn)
                adapter._watch(sock)
                return sock

            cls = type(f"Watched{base.__name__}", (base,), {"_new_conn": _new_conn, "_watched_by": self})
            self._tracked_classes[base] = cls
        pool.ConnectionCls = cls
        return pool

    def pin(self, checked: CheckedURL) -> None:
        self._pins[(checked.scheme, checked.host, checked.port)] = checked

    def pinned_for(self, url: str, proxies: Any = None) -> CheckedURL | None:
        """The pin for ``url``, or ``None`` when a proxy handles it; unpinned hosts raise."""
        if proxies and select_proxy(url, proxies):
            return None
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").rstrip(".").lower()
        key = (scheme, host, parts.port or DEFAULT_PORTS.get(scheme, 0))
        if key not in self._pins:
            raise BlockedURLError(f"refused: {host} was not checked before connecting")
        return self._pins[key]

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        checked = self.pinned_for(request.url or "", kwargs.get("proxies"))
        if checked is not None:
            request.headers["Host"] = checked.netloc
        return super().send(request, *args, **kwargs)

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):  # requests >= 2.32
        checked = self.pinned_for(request.url, proxies)
        if checked is None:
            return self._tracked(super().get_connection_with_tls_context(request, verify, proxies=proxies,
                                                                         cert=cert))
        if not hasattr(self, "build_connection_pool_key_attributes"):  # requests 2.32.0 and 2.32.1
            return self.get_connection(request.url, proxies)
        host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        host_params["host"] = checked.pin_address
        return self._tracked(self.poolmanager.connection_from_host(**host_params,
                                                                   pool_kwargs=_tls_names(checked, pool_kwargs)))

    def get_connection(self, url, proxies=None):  # requests < 2.32
        checked = self.pinned_for(url, proxies)
        if checked is None:
            return self._tracked(super().get_connection(url, proxies))
        return self._tracked(self.poolmanager.connection_from_host(checked.pin_address, checked.port, checked.scheme,
                                                                   pool_kwargs=_tls_names(checked, {})))


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected (yet), or already closed
        pass


def _tls_names(checked: CheckedURL, pool_kwargs: dict) -> dict:
    if checked.scheme == "https":
        return {**pool_kwargs, "server_hostname": checked.host, "assert_hostname": checked.host}
    return pool_kwargs


class PinnedSession(requests.Session):
    """A ``requests`` session over a :class:`PinnedAdapter`; call :meth:`pin` for each checked URL."""

    def __init__(self, proxy: str | None = None):
        super().__init__()
        self.trust_env = False  # no proxies, CA bundles or .netrc credentials from the environment
        self.adapter = PinnedAdapter(max_retries=0)
        self.mount("http://", self.adapter)
        self.mount("https://", self.adapter)
        if proxy:
            self.proxies = {"http": proxy, "https": proxy}

    def pin(self, checked: CheckedURL) -> CheckedURL:
        self.adapter.pin(checked)
        return checked

    @property
    def aborted(self) -> bool:
        return self.adapter.aborted

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Within the block, every connection of this session is shut down once ``seconds`` have passed.

        Whatever the request was doing (connecting, reading headers or the
        body) then fails; a ``requests`` error raised because of that comes out
        of the block as :class:`DeadlineExceeded`.
        """
        timer = threading.Timer(seconds, self.adapter.abort)
        timer.daemon = True
        timer.start()
        try:
            yield
        except (requests.RequestException, OSError) as exc:
            if self.aborted and not isinstance(exc, DeadlineExceeded):
                raise DeadlineExceeded(seconds) from None
            raise
        finally:
            timer.cancel()


def pinned_session(checked: CheckedURL | None = None, *, proxy: str | None = None) -> PinnedSession:
    """A session that connects only to pinned (checked) addresses; ``checked`` is pinned at once."""
    session = PinnedSession(proxy=proxy)
    if checked is not None:
        session.pin(checked)
    return session


# ---- error messages ------------------------------------------------------------------------


def describe_network_error(exc: BaseException, host: str, timeout: float) -> str:
    """A one-line description of a ``requests`` failure: refused, timed out, TLS, DNS..."""
    chain = _causes(exc)
    names = {type(e).__name__ for e in chain}
    if isinstance(exc, DeadlineExceeded):
        return f"{host} sent no complete answer within {exc.seconds:g} s; stopped"
    if isinstance(exc, requests.exceptions.ProxyError):
        return f"could not reach {host} through the proxy ({_last(chain)})"
    if isinstance(exc, requests.exceptions.SSLError):
        return f"TLS error with {host}: {_last(chain)}"
    if isinstance(exc, requests.exceptions.ConnectTimeout) or "ConnectTimeoutError" in names:
        return f"could not reach {host}: connection timed out after {timeout:g} s"
    if isinstance(exc, requests.exceptions.ReadTimeout) or "ReadTimeoutError" in names:
        return f"{host} did not answer within {timeout:g} s (read timeout)"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in str(exc).lower():
        return f"could not reach {host}: connection refused"
    if "NameResolutionError" in names or any(type(e).__name__ == "gaierror" for e in chain):
        return f"could not resolve host {host}"
    if isinstance(exc, BlockedURLError):
        return str(exc)
    return f"could not reach {host}: {_last(chain)}"


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``__cause__``/``__context__`` and exception ``args``)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if current in seen:
            continue
        seen.append(current)
        todo += [e for e in (current.__cause__, current.__context__, getattr(current, "reason", None))
                 if isinstance(e, BaseException)]
        todo += [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
    return seen


def _last(chain: list[BaseException]) -> str:
    deepest = chain[-1]
    text = str(getattr(deepest, "strerror", None) or getattr(deepest, "reason", None) or deepest)
    return re.sub(r"<urllib3[^>]*>:?\s*", "", text)[:200] or type(deepest).__name__
