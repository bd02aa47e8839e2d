"""Connection pools for many concurrent requests from one event loop (the async client's HTTP transport).

The HTTP package's connection pool looks at every connection it holds when a
request starts and when one ends, and asks the socket of each idle one whether
the server has closed it (a system call each). With a hundred connections that
is a good part of a short streamed request's CPU time. :func:`pooled_async_client`
is the ``openai`` package's default async HTTP client over a transport that
spreads the requests over several smaller pools: another pool is opened (up to
``MOST_POOLS``) only when each one has ``PER_POOL`` requests in flight, so a few
concurrent requests use one pool, as before, and each pool stays small.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.request import getproxies

__all__ = ["pooled_async_client", "PER_POOL", "MOST_POOLS"]

PER_POOL = 16  # requests in flight on every pool before another is opened
MOST_POOLS = 16
MAX_CONNECTIONS, MAX_KEEPALIVE = 1000, 100  # the openai package's limits, shared out among the pools


def pooled_async_client(timeout: float | None) -> Any:
    """``openai.DefaultAsyncHttpxClient`` over several pools; None when the environment names a proxy (the
    default client, which honours it, is used then) or the HTTP package is not one this knows."""
    proxies = getproxies()
    if any(proxies.get(scheme) for scheme in ("http", "https", "all")):
        return None
    import openai

    client_class = openai.DefaultAsyncHttpxClient
    module = sys.modules.get(_http_module(client_class))
    transport_class = _transport_class(module)
    if transport_class is None:
        return None
    return client_class(timeout=timeout, transport=transport_class(module))


def _http_module(client_class: type) -> str:
    for klass in client_class.__mro__:
        if klass.__name__ == "AsyncClient":
            return klass.__module__.partition(".")[0]
    return ""


_CLASSES: dict[str, type] = {}


def _transport_class(module: Any) -> type | None:
    """The spreading transport built on ``module`` (httpx2, or httpx), made once."""
    needed = ("AsyncBaseTransport", "AsyncHTTPTransport", "AsyncByteStream", "Limits")
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
        a new pool is opened when every pool has ``PER_POOL`` requests in flight (up to ``MOST_POOLS``)."""

        def __init__(self, http: Any):
            self._http = http
            per = max(PER_POOL, MAX_KEEPALIVE // MOST_POOLS)
            self._limits = http.Limits(max_connections=max(PER_POOL, MAX_CONNECTIONS // MOST_POOLS),
                                       max_keepalive_connections=per)
            self.pools: list[Any] = []
            self.busy: list[int] = []
            self._tls: dict[str, Any] = {}  # one TLS context for all pools (loading the CA file takes ~20 ms)

        def _new_pool(self) -> Any:
            make_context = getattr(self._http, "create_ssl_context", None)
            if callable(make_context) and "context" not in self._tls:
                self._tls["context"] = make_context()  # verify=True, trust_env=True: the default transport's
            extra = {"verify": self._tls["context"]} if "context" in self._tls else {}
            return self._http.AsyncHTTPTransport(limits=self._limits, **extra)

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

            try:
                response = await self.pools[index].handle_async_request(request)
            except BaseException:
                done()
                raise
            response.stream = _Counted(response.stream, done)
            return response

        async def aclose(self) -> None:
            for pool in self.pools:
                await pool.aclose()

    _CLASSES[module.__name__] = SpreadTransport
    return SpreadTransport
