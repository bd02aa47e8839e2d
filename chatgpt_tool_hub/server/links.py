"""Where the links the server makes point: the base URL of one request's links.

A browser shows the answer's links itself, so they must name the server as the
browser reaches it, not as the client that asked did (behind docker-compose a
chat UI asks ``http://toolhub:8000``, a name only the UI's container resolves).
:func:`link_base` decides it, in this order:

1. ``serve_public_url`` (``https://hub.example.test``, a path allowed): every link starts with it;
2. with ``serve_trust_proxy``, the reverse proxy's ``X-Forwarded-Proto``, ``X-Forwarded-Host`` and
   ``X-Forwarded-Prefix`` (the first value of each; one that is malformed is ignored);
3. the scheme, host and root path the request itself came with.
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import urlsplit

from ..errors import ConfigError

__all__ = ["link_base", "parse_public_url"]

_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                   r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")
_PREFIX = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*/?")


def parse_public_url(value: Any) -> str | None:
    """``serve_public_url``: an absolute http(s) URL (a path allowed, no query or fragment), without its
    trailing ``/``; None when unset. Anything else is a :class:`ConfigError` naming the key."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        parts = None
    if (parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or parts.query or parts.fragment or parts.username is not None
            or not _HOST.fullmatch(parts.netloc) or not _PREFIX.fullmatch(parts.path)):
        raise ConfigError(f"serve_public_url must be the http(s) URL browsers reach this server by, like "
                          f"https://hub.example.com or https://example.com/tool-hub (no query, no user), got "
                          f"{text[:80]!r}", key="serve_public_url")
    return text.rstrip("/")


def _first(headers: Mapping[str, str], name: str) -> str:
    """The first of a forwarded header's comma-separated values (the one the outermost proxy set)."""
    return (headers.get(name) or "").split(",", 1)[0].strip()


def _forwarded(headers: Mapping[str, str], fallback: str) -> str:
    """``fallback`` (the request's own base) with what the proxy's well-formed forwarded headers say."""
    own = urlsplit(fallback)
    proto = _first(headers, "x-forwarded-proto").lower()
    host = _first(headers, "x-forwarded-host")
    prefix = _first(headers, "x-forwarded-prefix")
    scheme = proto if proto in ("http", "https") else own.scheme
    netloc = host if host and _HOST.fullmatch(host) else own.netloc
    path = prefix if prefix and _PREFIX.fullmatch(prefix) else own.path
    return f"{scheme}://{netloc}/{path.strip('/')}".rstrip("/") + "/"


def link_base(scope: Mapping[str, Any], public_url: str | None = None, trust_proxy: bool = False) -> str:
    """The base URL (ending in ``/``) of the links made for the request of ``scope`` (an ASGI scope):
    ``public_url`` when set, else the forwarded headers when ``trust_proxy``, else the request's own."""
    if public_url:
        return public_url.rstrip("/") + "/"
    from starlette.requests import Request  # settings parse the URL without the server extra

    request = Request(dict(scope))
    own = str(request.base_url)
    return _forwarded(request.headers, own) if trust_proxy else own
