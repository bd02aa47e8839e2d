"""SSRF guard for network tools: check a URL, then connect only to the address that was checked.

* :func:`check_url` parses an http(s) URL, refuses other schemes and embedded
  credentials, resolves the host (``getaddrinfo``; numeric spellings such as
  ``127.1`` or ``0x7f000001`` are normalised the way ``inet_aton`` reads them)
  and checks **every** resolved address with :func:`is_blocked_address`.
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

import ipaddress
import re
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Union
from urllib.parse import SplitResult, urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy

from ..errors import ToolExecutionError, ToolInputError

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
]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

_SHARED_V4 = ipaddress.ip_network("100.64.0.0/10")       # carrier-grade NAT (RFC 6598)
_THIS_NET_V4 = ipaddress.ip_network("0.0.0.0/8")         # "this network" (RFC 791)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")            # well-known NAT64 prefix (RFC 6052)
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")    # local-use NAT64 (RFC 8215)
_V4_COMPAT = ipaddress.ip_network("::/96")               # deprecated IPv4-compatible IPv6
_SITE_LOCAL_V6 = ipaddress.ip_network("fec0::/10")       # deprecated site-local
_UNSAFE_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_NON_HTTP = ("file", "data", "javascript", "mailto", "ftp", "gopher", "dict", "ldap", "jar", "netdoc")


class BlockedURLError(ToolInputError):
    """A URL the network tools refuse to fetch; the message says why."""


class HostResolutionError(ToolExecutionError):
    """The host name could not be resolved."""


class DeadlineExceeded(requests.exceptions.Timeout):
    """A whole exchange took longer than its deadline (see :meth:`PinnedSession.deadline`)."""

    def __init__(self, seconds: float):
        super().__init__(f"no complete answer within {seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True)
class CheckedURL:
    """A URL that passed :func:`check_url`: normalised URL, ASCII host, port, scheme, checked addresses."""

    url: str
    host: str
    port: int
    scheme: str
    addresses: tuple[str, ...]

    @property
    def pin_address(self) -> str:
        """The address to connect to: the first IPv4 one (IPv6 routes are often missing), else the first."""
        for address in self.addresses:
            if ":" not in address:
                return address
        return self.addresses[0]

    @property
    def netloc(self) -> str:
        """``host[:port]`` as the ``Host`` header spells it (port omitted when it is the default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"


# ---- addresses -----------------------------------------------------------------------


def is_blocked_address(ip: str | IPAddress) -> str | None:
    """Why ``ip`` must not be fetched (loopback, private, ...), or ``None`` when it is public."""
    try:
        addr = ip if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) \
            else ipaddress.ip_address(str(ip).strip("[]"))
    except ValueError:
        return f"'{ip}' is not an IP address"
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = _embedded_v4(addr)
        if embedded is not None:
            reason = is_blocked_address(embedded[1])
            if reason:
                return f"{addr} is {embedded[0]} embedding {embedded[1]}, a {reason}"
            if addr in _NAT64:
                return None  # DNS64 networks give public hosts 64:ff9b::/96 addresses
        if addr.scope_id:
            return "an IPv6 address with a zone index (link-local)"
    return _own_reason(addr)


def _embedded_v4(addr: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """(kind, IPv4 address) for IPv6 forms that carry an IPv4 address."""
    if addr.ipv4_mapped is not None:
        return "an IPv4-mapped address", addr.ipv4_mapped
    if addr.sixtofour is not None:
        return "a 6to4 address", addr.sixtofour
    if addr.teredo is not None:
        return "a Teredo address", addr.teredo[1]
    low32 = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr in _NAT64 or addr in _NAT64_LOCAL:
        return "a NAT64 address", low32
    if addr in _V4_COMPAT and int(addr) > 1:
        return "an IPv4-compatible address", low32
    return None


def _own_reason(addr: IPAddress) -> str | None:
    checks = (
        (addr.is_unspecified, "unspecified address"),
        (addr.is_loopback, "loopback address"),
        (addr.is_link_local, "link-local address"),
        (addr.is_multicast, "multicast address"),
        (addr.version == 4 and addr in _SHARED_V4, "shared address space (100.64.0.0/10, carrier-grade NAT)"),
        (addr.version == 4 and addr in _THIS_NET_V4, "'this network' address (0.0.0.0/8)"),
        (addr.version == 6 and addr in _SITE_LOCAL_V6, "site-local address"),
        (addr.is_reserved, "reserved address"),
        (addr.is_private, "private address"),
        (not addr.is_global, "non-public address"),
    )
    return next((reason for hit, reason in checks if hit), None)


# ---- URLs ------------------------------------------------------------------------------


class PrivateAllowList:
    """Host names and IP networks let past the private-address check of :func:`check_url`.

    Entries: a host name (``api.internal.test``; ``*.internal.test`` for every
    name under it), an IP address or a CIDR network (``10.0.0.0/8``,
    ``fd00::/8``). A host that is listed may resolve to any address; otherwise
    each non-public address must lie in a listed network (an IPv4-mapped IPv6
    address counts as its IPv4 address).
    """

    def __init__(self, entries: Any):
        self.hosts: set[str] = set()
        self.networks: list[Any] = []
        for entry in entries:
            text = str(entry).strip().lower().rstrip(".")
            if not text:
                continue
            try:
                self.networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not re.fullmatch(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*", text):
                raise ValueError(f"{str(entry)[:80]!r} is neither a host name nor an IP address or network (CIDR)")
            self.hosts.add(text)

    def allows(self, host: str, address: str) -> bool:
        name = host.lower().rstrip(".")
        if name in self.hosts or any(h.startswith("*.") and name.endswith(h[1:]) for h in self.hosts):
            return True
        try:
            ip = ipaddress.ip_address(str(address).split("%", 1)[0].strip("[]"))
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == net.version and ip in net for net in self.networks)

    def __repr__(self) -> str:
        return f"PrivateAllowList({sorted(self.hosts) + [str(n) for n in self.networks]})"


_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0", "", "none", "null"}


def parse_allow_private(value: Any) -> "bool | PrivateAllowList":
    """An ``allow_private`` option as :func:`check_url` takes it: ``True`` / ``False`` (also spelt as
    text), or a list of host names and CIDRs (also one comma-separated string). Raises ``ValueError``."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, PrivateAllowList):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE_WORDS or low in _FALSE_WORDS:
            return low in _TRUE_WORDS
        value = [part for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return PrivateAllowList(value)
    raise ValueError(f"allow_private must be true, false or a list of host names and CIDRs; got {repr(value)[:60]}")


def check_url(url: str, allow_private: "bool | PrivateAllowList" = False) -> CheckedURL:
    """Parse, normalise and check ``url``; raise :class:`BlockedURLError` with the reason.

    Every address the host resolves to is checked (unless ``allow_private`` is
    ``True``; a :class:`PrivateAllowList` lets only its hosts and networks through).
    An unresolvable host raises :class:`HostResolutionError`.
    """
    parts = _split(url)
    host = _ascii_host(parts)
    port = _port(parts)
    addresses = _resolve(host, port)
    allowance = allow_private if isinstance(allow_private, PrivateAllowList) else None
    if allowance is not None or not allow_private:
        for address in addresses:
            reason = is_blocked_address(address)
            if reason and allowance is not None and allowance.allows(host, address):
                continue
            if reason:
                shown = host if host == address else f"{host} ({address})"
                raise BlockedURLError(f"refused to fetch {shown}: {reason}. Only public addresses may be fetched.")
    numeric = _numeric_host(host)
    if numeric is not None:
        host = str(numeric)
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{port}"
    normalised = urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", parts.query, ""))
    return CheckedURL(normalised, host, port, parts.scheme.lower(), tuple(addresses))


def _split(url: Any) -> SplitResult:
    text = str(url or "").strip()
    if not text:
        raise BlockedURLError("no URL given: pass an http:// or https:// URL")
    if _UNSAFE_CHARS.search(text):
        raise BlockedURLError("the URL contains spaces, control characters or backslashes; percent-encode them")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise BlockedURLError(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES or not parts.netloc:
        known = scheme and (parts.netloc or text[len(scheme) + 1:].startswith("/") or scheme in _NON_HTTP)
        what = f"the '{scheme}' scheme is not allowed" if known and scheme not in ALLOWED_SCHEMES \
            else "the URL has no http(s) scheme or no host"
        raise BlockedURLError(f"refused: {what}; only http:// and https:// URLs can be fetched "
                              f"(e.g. https://example.com/page)")
    if "@" in parts.netloc:
        raise BlockedURLError("refused: URLs with credentials (user:password@host) are not allowed")
    return parts


def _ascii_host(parts: SplitResult) -> str:
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise BlockedURLError("the URL has no host name")
    if ":" in host or host.isascii():
        return host.lower()
    try:
        import idna

        return idna.encode(host, uts46=True).decode("ascii").lower()
    except Exception:
        try:
            return host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise BlockedURLError(f"'{host}' is not a valid host name") from None


def _port(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:
        raise BlockedURLError("the URL has an invalid port") from None
    if port is None:
        return DEFAULT_PORTS[parts.scheme.lower()]
    if not 0 < port < 65536:
        raise BlockedURLError("the URL has an invalid port")
    return port


def _numeric_host(host: str) -> IPAddress | None:
    """``host`` read as an IP literal, including ``inet_aton`` spellings (``127.1``, ``0x7f000001``)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9a-fA-FxX.]+", host) or not re.match(r"[0-9]", host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def _resolve(host: str, port: int) -> list[str]:
    numeric = _numeric_host(host)
    if numeric is not None:
        return [str(numeric)]
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise HostResolutionError(f"could not resolve host {host} ({_short(exc)})") from None
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])  # an IPv6 zone ("fe80::1%eth0") is kept: it is reported as blocked
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise HostResolutionError(f"could not resolve host {host} (no addresses)")
    return addresses


def _short(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


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
