"""The LLM client's HTTP transports: pools for many concurrent requests from one event loop, and a
request sent again when it met a kept-alive connection the server had closed.

The HTTP package's connection pool looks at every connection it holds when a
request starts and when one ends, and asks the socket of each idle one whether
the server has closed it (a system call each). With a hundred connections that
is a good part of a short streamed request's CPU time. :func:`pooled_async_client`
is the ``openai`` package's default async HTTP client over a transport that
spreads the requests over several smaller pools: another pool is opened (up to
``MOST_POOLS``) only when each one has ``PER_POOL`` requests in flight, so a few
concurrent requests use one pool, as before, and each pool stays small.

Both clients (this one, and the sync client over :func:`sync_transport`) send a
request again, once and at once, when it failed on a kept-alive connection
before any of the response came: the server closed that connection (its
keep-alive timeout ran out) just before or while the request was written, so
it never saw it. The pool checks an idle connection's socket when it hands it
out, which does not see a close that comes after the check. The request goes
again on a new connection (from a pool that keeps none alive), and this does
not count as one of the client's ``max_retries``. A request that fails on a
connection opened for it is not sent again here. Whether the connection was
opened for the request is told by the HTTP package's ``trace`` extension.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable
from urllib.request import getproxies

__all__ = ["pooled_async_client", "sync_client", "sync_transport", "tls_context", "PER_POOL", "MOST_POOLS"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

PER_POOL = 16  # requests in flight on every pool before another is opened
MOST_POOLS = 16
MAX_CONNECTIONS, MAX_KEEPALIVE = 1000, 100  # the openai package's limits, shared out among the pools


def pooled_async_client(timeout: float | None) -> Any:
    """``openai.DefaultAsyncHttpxClient`` over several pools; None when the environment names a proxy (the
    default client, which honours it, is used then) or the HTTP package is not one this knows."""
    import openai

    client_class = openai.DefaultAsyncHttpxClient
    found = _module_and_classes(client_class)
    if found is None:
        return None
    module, (transport_class, _) = found
    return client_class(timeout=timeout, transport=transport_class(module))


def sync_client(timeout: float | None) -> Any:
    """``openai.DefaultHttpxClient`` (openai's own defaults) with the process's one TLS context
    (:func:`tls_context`) and :func:`sync_transport`, closed when dropped as openai's own client is; None
    (openai builds its default) when the HTTP package is not one this knows."""
    import openai

    base = openai.DefaultHttpxClient
    context = tls_context(sys.modules.get(_http_module(base)))
    if context is None:
        return None
    with _TLS_LOCK:
        klass = _CLOSING.get(base)
        if klass is None:
            klass = _CLOSING[base] = type("ClosedWhenDropped", (base,), {"__del__": _close_when_dropped})
    return klass(timeout=timeout, verify=context, transport=sync_transport(context))


def tls_context(http: Any) -> Any:
    """The process's TLS context for the HTTP package ``http`` (the default verification, the environment's
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once; None when the package has no ``create_ssl_context``.

    A context holds the loaded CA certificates, about 800 KiB and 90 ms of CPU that the default clients
    load again for each client, i.e. for each app; a context is made to be shared by connections."""
    make_context = getattr(http, "create_ssl_context", None)
    if not callable(make_context):
        return None
    key = (http.__name__, os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None)
    with _TLS_LOCK:
        context = _TLS.get(key)
        if context is None:
            context = _TLS[key] = make_context()  # verify=True, trust_env=True: the default transport's
    return context


_TLS: dict[tuple[str, str | None, str | None], Any] = {}
_TLS_LOCK = threading.Lock()
_CLOSING: dict[type, type] = {}


def _close_when_dropped(self: Any) -> None:
    """What openai's own HTTP client does when it is dropped: close its connections."""
    try:
        if not self.is_closed:
            self.close()
    except Exception:
        pass


def sync_transport(verify: Any = True) -> Any:
    """The transport for ``openai.DefaultHttpxClient`` (the sync client): one pool with openai's limits
    whose requests that meet a kept-alive connection the server closed go again on a new connection (see
    the module's doc). ``verify`` is the TLS verification (a shared context). None where
    :func:`pooled_async_client` is None."""
    import openai

    found = _module_and_classes(openai.DefaultHttpxClient)
    if found is None:
        return None
    module, (_, transport_class) = found
    return transport_class(module, verify)


def _module_and_classes(client_class: type) -> tuple[Any, tuple[type, type]] | None:
    proxies = getproxies()
    if any(proxies.get(scheme) for scheme in ("http", "https", "all")):
        return None  # a transport given to the client would keep it from using the environment's proxy
    module = sys.modules.get(_http_module(client_class))
    classes = _transport_classes(module)
    return None if classes is None else (module, classes)


def _http_module(client_class: type) -> str:
    for klass in client_class.__mro__:
        if klass.__name__ in ("AsyncClient", "Client"):
            return klass.__module__.partition(".")[0]
    return ""


class _Watch:
    """Watches one request through the HTTP package's ``trace`` extension: ``opened`` says whether a
    connection was opened for it (else it went on a kept-alive one). A trace callback already there is
    still called."""

    __slots__ = ("opened", "inner")

    def __init__(self, inner: Callable[..., Any] | None) -> None:
        self.opened, self.inner = False, inner

    def note(self, name: str, info: dict) -> Any:
        if name.startswith("connection.connect_"):
            self.opened = True
        return self.inner(name, info) if self.inner is not None else None

    async def anote(self, name: str, info: dict) -> None:
        if name.startswith("connection.connect_"):
            self.opened = True
        if self.inner is not None:
            await self.inner(name, info)


def _watch(request: Any, asynchronous: bool) -> _Watch:
    watch = _Watch(request.extensions.get("trace"))
    request.extensions["trace"] = watch.anote if asynchronous else watch.note
    return watch


def _unwatch(request: Any, watch: _Watch) -> None:
    """The request's trace extension as it was (the response's body is read without the watch)."""
    if watch.inner is None:
        request.extensions.pop("trace", None)
    else:
        request.extensions["trace"] = watch.inner


def _stale(http: Any, request: Any, watch: _Watch, exc: BaseException) -> bool:
    """Whether ``exc`` is a kept-alive connection that the server had closed: the request went on a
    connection not opened for it, no response came (the exception came before one), the connection was
    closed or reset, and the request's body can be sent again."""
    _unwatch(request, watch)
    if watch.opened or not isinstance(request.stream, http.ByteStream):
        return False
    if isinstance(exc, http.RemoteProtocolError):
        stale = "without sending a response" in str(exc)
    else:
        stale = isinstance(exc, (http.ReadError, http.WriteError, http.ConnectError))
    if stale:
        logger.debug("LLM server closed a kept-alive connection (%s); the request goes again on a new one",
                     type(exc).__name__)
    return stale


_CLASSES: dict[str, tuple[type, type]] = {}


def _transport_classes(module: Any) -> tuple[type, type] | None:
    """The async spreading transport and the sync transport built on ``module`` (httpx2, or httpx), made
    once."""
    needed = ("AsyncBaseTransport", "AsyncHTTPTransport", "AsyncByteStream", "BaseTransport", "HTTPTransport",
              "ByteStream", "Limits", "RemoteProtocolError", "ReadError", "WriteError", "ConnectError")
    if module is None or not all(isinstance(getattr(module, name, None), type) for name in needed):
        return None
    found = _CLASSES.get(module.__name__)
    if found is not None:
        return found

    class _Counted(module.AsyncByteStream):
        """A response body that says when it is closed (its request leaves its pool's count)."""

        def __init__(self, stream: Any, done: Any):
            self._stream, self._done = stream, done

        async def __aiter__(self) -> Any:
            async for part in self._stream:
                yield part

        async def aclose(self) -> None:
            done, self._done = self._done, None
            if done is not None:
                done()
            await self._stream.aclose()

    class SpreadTransport(module.AsyncBaseTransport):
        """Requests spread over pools of ``AsyncHTTPTransport``: the least busy one takes the next request;
        a new pool is opened when every pool has ``PER_POOL`` requests in flight (up to ``MOST_POOLS``).
        A request that met a kept-alive connection the server had closed goes again on a new connection."""

        def __init__(self, http: Any):
            self._http = http
            per = max(PER_POOL, MAX_KEEPALIVE // MOST_POOLS)
            self._most = max(PER_POOL, MAX_CONNECTIONS // MOST_POOLS)
            self._limits = http.Limits(max_connections=self._most, max_keepalive_connections=per)
            self.pools: list[Any] = []
            self.busy: list[int] = []
            self._fresh: Any = None  # the pool of the requests sent again: it keeps no connection alive

        def _new_pool(self, limits: Any = None) -> Any:
            context = tls_context(self._http)  # the process's one (loading the CA file is the costly part)
            extra = {"verify": context} if context is not None else {}
            return self._http.AsyncHTTPTransport(limits=limits or self._limits, **extra)

        def _pick(self) -> int:
            busy = self.busy
            best = min(range(len(busy)), key=busy.__getitem__) if busy else -1
            if best == -1 or (busy[best] >= PER_POOL and len(busy) < MOST_POOLS):
                self.pools.append(self._new_pool())
                busy.append(0)
                best = len(busy) - 1
            return best

        async def handle_async_request(self, request: Any) -> Any:
            index = self._pick()
            self.busy[index] += 1

            def done() -> None:
                self.busy[index] -= 1

            watch = _watch(request, asynchronous=True)
            try:
                try:
                    response = await self.pools[index].handle_async_request(request)
                    _unwatch(request, watch)
                except Exception as exc:
                    if not _stale(self._http, request, watch, exc):
                        raise
                    if self._fresh is None:
                        self._fresh = self._new_pool(self._http.Limits(max_connections=self._most,
                                                                       max_keepalive_connections=0))
                    response = await self._fresh.handle_async_request(request)
            except BaseException:
                done()
                raise
            response.stream = _Counted(response.stream, done)
            return response

        async def aclose(self) -> None:
            for pool in self.pools + ([self._fresh] if self._fresh is not None else []):
                await pool.aclose()

    class RetryTransport(module.BaseTransport):
        """The sync client's transport: one ``HTTPTransport`` pool with openai's limits; a request that met
        a kept-alive connection the server had closed goes again on a new connection."""

        def __init__(self, http: Any, verify: Any = True):
            self._http = http
            extra = {"verify": verify}
            self._pool = http.HTTPTransport(limits=http.Limits(max_connections=MAX_CONNECTIONS,
                                                               max_keepalive_connections=MAX_KEEPALIVE), **extra)
            self._fresh = http.HTTPTransport(limits=http.Limits(max_connections=MAX_CONNECTIONS,
                                                                max_keepalive_connections=0), **extra)

        def handle_request(self, request: Any) -> Any:
            watch = _watch(request, asynchronous=False)
            try:
                response = self._pool.handle_request(request)
                _unwatch(request, watch)
                return response
            except Exception as exc:
                if not _stale(self._http, request, watch, exc):
                    raise
            return self._fresh.handle_request(request)

        def close(self) -> None:
            self._pool.close()
            self._fresh.close()

    _CLASSES[module.__name__] = (SpreadTransport, RetryTransport)
    return _CLASSES[module.__name__]
