"""Requests no route takes: OpenAI's error shape for every 404 and 405 of the API.

:func:`http_error` is the app's handler of Starlette's ``HTTPException``: the
router's "no such path" (404, ``code: "not_found"``) and "no such method"
(405, ``code: "method_not_allowed"``, with its ``Allow`` header) become
``{"error": {"message", "type", "param", "code"}}`` like every other error of
the API, so OpenAI clients raise their usual exceptions.

The web page is mounted at ``/`` and takes every path the API's routes do not:
a request for an unknown API path, or a known one with another method, would
reach the page and get its answer. :func:`add_fallback_routes` (called after
the API's routes, before the page is mounted) routes what is left of the API's
paths (everything under ``/v1/`` and ``/files/``, and the API's other paths
with any method) to the same errors.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match, Route

from .asgi import ApiError, error_response

__all__ = ["http_error", "add_fallback_routes", "API_PREFIXES"]

API_PREFIXES = ("/v1/", "/files/")
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_STATUS_CODES = {404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, exc: Any) -> JSONResponse:
    """The OpenAI-shaped answer to an ``HTTPException`` (the router's 404 and 405 among them)."""
    status = int(getattr(exc, "status_code", 500))
    headers = dict(getattr(exc, "headers", None) or {})
    where = f"{request.method} {request.url.path[:200]}"
    if status == 404:
        message = (f"no route for {where} on this server; the API is POST /v1/chat/completions, POST /v1/responses, GET /v1/models "
                   f"(and /v1/models/<id>), GET /healthz, signed /files links and JARVIS's POST /hugginggpt, "
                   f"/tasks and /results")
    elif status == 405:
        message = f"{request.url.path[:200]} does not take {request.method}; it takes {headers.get('Allow', '')}"
    else:
        message = str(getattr(exc, "detail", "") or f"HTTP {status}")
    return error_response(ApiError(status, message, code=_STATUS_CODES.get(status), headers=headers))


async def _unrouted(request: Request) -> None:
    """A request no API route took: 405 (with ``Allow``) when another method of its path has a route, else 404."""
    allowed: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.endpoint is not _unrouted and route.methods:
            if route.matches(request.scope)[0] is not Match.NONE:
                allowed |= route.methods
    if allowed:
        raise HTTPException(405, headers={"Allow": ", ".join(sorted(allowed))})
    raise HTTPException(404)


def add_fallback_routes(app: Any) -> None:
    """Route the API's paths no route of ``app`` takes to :func:`_unrouted`: everything under
    :data:`API_PREFIXES`, and every other path an API route has, with any method."""
    exact = {route.path for route in app.router.routes
             if isinstance(route, Route) and "{" not in route.path and not route.path.startswith(API_PREFIXES)}
    for path in [*sorted(exact), *(prefix + "{rest:path}" for prefix in API_PREFIXES)]:
        app.router.add_route(path, _unrouted, methods=_METHODS, include_in_schema=False)
