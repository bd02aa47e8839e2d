"""Check a URL before it is fetched: http(s) only, no credentials, every resolved address public.

* :func:`check_url` parses an http(s) URL, refuses other schemes and embedded
  credentials, resolves the host (``getaddrinfo``; numeric spellings such as
  ``127.1`` or ``0x7f000001`` are normalised the way ``inet_aton`` reads them)
  and checks **every** resolved address with :func:`is_blocked_address`.
* :class:`PrivateAllowList` / :func:`parse_allow_private` read an
  ``allow_private`` option: a yes/no, or the host names and networks let past
  the private-address check.

No HTTP client is imported here: connecting only to the checked address is
:mod:`.netguard`'s job (it re-exports these names).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any, Union
from urllib.parse import SplitResult, urlsplit, urlunsplit

from ..errors import ToolExecutionError, ToolInputError

__all__ = [
    "BlockedURLError",
    "HostResolutionError",
    "CheckedURL",
    "PrivateAllowList",
    "check_url",
    "parse_allow_private",
    "is_blocked_address",
    "ALLOWED_SCHEMES",
    "DEFAULT_PORTS",
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
