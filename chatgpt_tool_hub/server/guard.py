"""The server's front door: which requests reach the app at all.

A server on 127.0.0.1 is reachable by every web page the user's browser
visits: a page can POST to it (a ``text/plain`` form needs no preflight) and,
through DNS rebinding (``evil.example`` resolving to 127.0.0.1), read its
answers. :class:`Boundary` is an ASGI middleware, outside everything else, that
closes those doors the way Jupyter does:

* **Host allow-list.** Every request (HTTP and WebSocket) must name an allowed
  host: ``localhost``, ``127.0.0.1``, ``[::1]``, the bound address and
  ``serve_allowed_hosts``. A rebinding page names its own host and gets
  HTTP 400. A server bound to a wildcard address (``0.0.0.0``) has keys (it
  refuses to start without) and takes any host unless the setting lists them.
* **Origin.** A state-changing request (anything but GET, HEAD, OPTIONS) that
  a browser sends from a page of another host gets HTTP 403, unless its origin
  is in ``serve_allowed_origins``; ``Origin: null`` (sandboxed frames, files)
  never passes.
* **A secret even on loopback.** Without ``serve_api_keys`` the server makes a
  random token at start (``serve_local_token=auto``). ``tool-hub serve`` prints
  the page's link with ``?token=...``; the first visit moves it into an
  HttpOnly, SameSite=Strict cookie and redirects to the same page without it,
  so it stays out of the history and the address bar. The API wants it as the
  bearer key (the routes check it through ``ServerState.user_of``).
* **A browser id.** The page's tabs belong to the browser that opened them: a
  random id in an HttpOnly cookie (``tool_hub_browser``) is part of a tab's key,
  so a client that knows (or chooses) another tab's session id cannot take it
  over.

**JARVIS's web client** (``serve_jarvis_origins``). JARVIS's routes
(``/hugginggpt``, ``/tasks``, ``/results``) answer CORS for the origins listed
there, and only for them: the preflight ``OPTIONS`` gets its ``Access-Control-*``
answer, a ``POST`` from such an origin passes the origin check and its answer
carries ``Access-Control-Allow-Origin``. Every other route, and every other
origin, is treated as above. The files of JARVIS's answers
(``/images/``, ``/audios/``, ``/videos/``) check their link's signature
themselves, as ``/files/`` does.

JSON routes also refuse a body that is not ``application/json``
(:func:`~chatgpt_tool_hub.server.asgi.read_json`): a cross-site form cannot be
made to look like an API call.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit

from .asgi import ApiError, send_json

__all__ = ["Boundary", "BoundaryPolicy", "TOKEN_COOKIE", "BROWSER_COOKIE", "host_name", "browser_id"]

TOKEN_COOKIE = "tool_hub_token"
BROWSER_COOKIE = "tool_hub_browser"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# routes that check their own credentials (a bearer key through user_of; /files: the link's signature) and
# routes a probe may call without one
SELF_CHECKED_UNDER = ("/v1/", "/files/", "/images/", "/audios/", "/videos/")
SELF_CHECKED = frozenset({"/hugginggpt", "/tasks", "/results", "/healthz"})
JARVIS_ROUTES = frozenset({"/hugginggpt", "/tasks", "/results"})  # the only routes that answer CORS
CORS_HEADERS_ALLOWED = frozenset({"content-type", "authorization", "accept", "x-requested-with"})


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an origin's netloc, lower-case, without port or brackets."""
    value = (value or "").strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value[1:]
    if value.count(":") > 1:  # a bare IPv6 address
        return value
    return value.rsplit(":", 1)[0] if ":" in value else value


def _split(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host.strip() in ("", "*")


@dataclass(frozen=True)
class BoundaryPolicy:
    """What :class:`Boundary` lets through. ``hosts``: allowed host names (None: any); ``origins``: extra
    allowed origins (``scheme://host[:port]``, lower-case); ``token``: the local token (None: the server has
    keys, or ``serve_local_token=off``); ``jarvis_origins``: the origins JARVIS's routes answer CORS for
    (``*``: any)."""

    hosts: frozenset[str] | None
    origins: frozenset[str]
    token: str | None
    jarvis_origins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *, bind_host: str, allowed_hosts: Any = None, allowed_origins: Any = None,
              token: str | None = None, jarvis_origins: Any = None) -> "BoundaryPolicy":
        listed = [h.lower() for h in _split(allowed_hosts)]
        if "*" in listed or (not listed and _wildcard(bind_host)):
            hosts = None
        else:
            hosts = frozenset({*LOOPBACK_NAMES, host_name(bind_host), *(host_name(h) for h in listed)})
        origins = frozenset(o.lower().rstrip("/") for o in _split(allowed_origins))
        return cls(hosts, origins, token, frozenset(o.lower().rstrip("/") for o in _split(jarvis_origins)))

    def jarvis_origin_allowed(self, origin: str) -> bool:
        """Whether JARVIS's routes answer CORS for a page of ``origin`` (never ``null``)."""
        origin = origin.strip().lower().rstrip("/")
        if origin == "null" or "://" not in origin:
            return False
        return "*" in self.jarvis_origins or origin in self.jarvis_origins

    def host_allowed(self, host: str) -> bool:
        return self.hosts is None or host_name(host) in self.hosts

    def origin_allowed(self, origin: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins:
            return True
        if origin == "null" or "://" not in origin:
            return False
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(parts.netloc) and self.host_allowed(parts.netloc)

    def token_matches(self, value: str | None) -> bool:
        if not self.token or not value:
            return False
        return hmac.compare_digest(str(value).encode("utf-8", "surrogatepass"), self.token.encode())


def _headers(scope: dict) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        key = name.decode("latin-1").lower()
        if key not in found:  # the first of repeated headers
            found[key] = value.decode("latin-1")
    return found


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header or "")
    except Exception:  # noqa: BLE001 - a malformed cookie header is no cookie
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def browser_id(cookies: Any) -> str:
    """The browser's id from a request's cookies (a mapping), or "" when it has none."""
    try:
        value = cookies.get(BROWSER_COOKIE) if cookies is not None else None
    except AttributeError:
        value = None
    return str(value) if value else ""


def _cookie(name: str, value: str, secure: bool) -> tuple[bytes, bytes]:
    flags = "; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return b"set-cookie", f"{name}={value}{flags}".encode("latin-1")


class Boundary:
    """ASGI middleware enforcing a :class:`BoundaryPolicy` (see the module docstring)."""

    def __init__(self, app: Any, policy: BoundaryPolicy | Callable[[], BoundaryPolicy]):
        self.app = app
        self._policy = policy

    @property
    def policy(self) -> BoundaryPolicy:
        return self._policy() if callable(self._policy) else self._policy

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        policy = self.policy
        headers = _headers(scope)
        if not policy.host_allowed(headers.get("host", "")):
            return await self._refuse(scope, send, ApiError(
                400, f"this server does not answer to the host {host_name(headers.get('host', ''))!r}; the operator "
                     f"can allow it (serve_allowed_hosts) if clients reach the server by that name", code="host_not_allowed"))
        origin = headers.get("origin")
        path = str(scope.get("path", ""))
        if kind == "http" and path in JARVIS_ROUTES and origin is not None:
            return await self._jarvis_cors(scope, receive, send, headers, origin, policy)
        changes_state = kind == "websocket" or scope.get("method", "GET") not in SAFE_METHODS
        if origin is not None and changes_state and not policy.origin_allowed(origin):
            return await self._refuse(scope, send, ApiError(
                403, f"requests from pages of {origin[:100]!r} are not allowed; the operator can allow the origin "
                     f"(serve_allowed_origins) if that page is a client of this server", code="origin_not_allowed"))
        if path in SELF_CHECKED or path.startswith(SELF_CHECKED_UNDER):
            return await self.app(scope, receive, send)
        cookies = _cookies(headers.get("cookie", ""))
        extra: list[tuple[bytes, bytes]] = []
        secure = scope.get("scheme") in ("https", "wss")
        if policy.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
            if "token" in query and kind == "http" and policy.token_matches(query["token"]):
                return await self._enter(scope, send, query, cookies, secure)
            scheme, _, bearer = headers.get("authorization", "").partition(" ")
            if not (policy.token_matches(cookies.get(TOKEN_COOKIE))
                    or (scheme.lower() == "bearer" and policy.token_matches(bearer.strip()))):
                return await self._refuse(scope, send, ApiError(
                    401, "this page needs the link tool-hub serve printed when it started (it ends in "
                         "?token=...); open that link once and this browser is remembered",
                    code="invalid_api_key"), page=True)
        if not cookies.get(BROWSER_COOKIE) and kind == "http":
            fresh = secrets.token_urlsafe(18)
            extra.append(_cookie(BROWSER_COOKIE, fresh, secure))
            scope = _with_cookie(scope, BROWSER_COOKIE, fresh)
        if not extra:
            return await self.app(scope, receive, send)

        async def with_cookies(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or []), *extra]}
            await send(message)

        await self.app(scope, receive, with_cookies)

    async def _jarvis_cors(self, scope: dict, receive: Callable, send: Callable, headers: dict[str, str],
                           origin: str, policy: BoundaryPolicy) -> None:
        """A browser's request to a JARVIS route: CORS for the allowed origins, the usual checks for others."""
        preflight = scope.get("method") == "OPTIONS" and "access-control-request-method" in headers
        if not policy.jarvis_origin_allowed(origin):
            if preflight or not policy.origin_allowed(origin):
                return await self._refuse(scope, send, ApiError(
                    403, f"pages of {origin[:100]!r} may not call this route; the operator can allow the origin "
                         f"(serve_jarvis_origins) if that page is JARVIS's web client", code="origin_not_allowed"))
            return await self.app(scope, receive, send)
        allow = [(b"access-control-allow-origin", ("*" if "*" in policy.jarvis_origins else origin).encode("latin-1")),
                 (b"vary", b"Origin")]
        if preflight:
            return await _preflight(send, headers, allow)

        async def with_cors(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or []), *allow]}
            await send(message)

        await self.app(scope, receive, with_cors)

    async def _enter(self, scope: dict, send: Callable, query: dict[str, str], cookies: dict[str, str],
                     secure: bool) -> None:
        """The token came in the link: keep it in a cookie and send the browser to the page without it."""
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        target = (scope.get("root_path", "") + str(scope.get("path", "/"))) or "/"
        headers = [(b"location", (target + ("?" + rest if rest else "")).encode("latin-1")),
                   _cookie(TOKEN_COOKIE, self.policy.token or "", secure), (b"cache-control", b"no-store"),
                   (b"referrer-policy", b"no-referrer"), (b"content-length", b"0")]
        if not cookies.get(BROWSER_COOKIE):
            headers.append(_cookie(BROWSER_COOKIE, secrets.token_urlsafe(18), secure))
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _refuse(self, scope: dict, send: Callable, error: ApiError, page: bool = False) -> None:
        if scope.get("type") == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if page and "text/html" in _headers(scope).get("accept", ""):
            body = (f"<!doctype html><title>tool-hub</title><p>{error.message}</p>").encode()
            await send({"type": "http.response.start", "status": error.status,
                        "headers": [(b"content-type", b"text/html; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await send_json(send, error.status, error.payload())


async def _preflight(send: Callable, headers: dict[str, str], allow: list[tuple[bytes, bytes]]) -> None:
    """Answer a CORS preflight for a JARVIS route: POST with JSON (and, for clients that have one, a key)."""
    method = headers.get("access-control-request-method", "").strip().upper()
    asked = [h.strip().lower() for h in headers.get("access-control-request-headers", "").split(",") if h.strip()]
    refused = [h for h in asked if h not in CORS_HEADERS_ALLOWED]
    if method not in ("POST", "OPTIONS") or refused:
        error = ApiError(403, f"JARVIS's routes take POST with the headers {', '.join(sorted(CORS_HEADERS_ALLOWED))}; "
                              f"this preflight asked for {method or 'no method'} {', '.join(refused)}".rstrip(),
                         code="cors_not_allowed")
        return await send_json(send, error.status, error.payload())
    await send({"type": "http.response.start", "status": 204, "headers": [
        *allow, (b"access-control-allow-methods", b"POST, OPTIONS"),
        (b"access-control-allow-headers", ", ".join(sorted(CORS_HEADERS_ALLOWED)).encode()),
        (b"access-control-max-age", b"600"), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _with_cookie(scope: dict, name: str, value: str) -> dict:
    """``scope`` whose cookie header carries ``name=value`` too (the app sees the id on the very first visit)."""
    others = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"cookie"]
    cookies = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k.lower() == b"cookie" and v]
    joined = "; ".join([*cookies, f"{name}={value}"])
    return {**scope, "headers": [*others, (b"cookie", joined.encode("latin-1"))]}
