"""OpenAPI 3.x / Swagger 2.0 documents and ChatGPT plugin manifests as tools.

``load_openapi_tools(source, ...)`` turns each operation (path + method) of a
document (JSON or YAML; a path, an http(s) URL or a dict) into a
:class:`OpenAPITool`. A ChatGPT-plugin manifest (``ai-plugin.json``) is
followed to its ``api.url``; Swagger 2.0 is converted to OpenAPI 3 first
(:mod:`._swagger2`). Arguments are the operation's parameters by name, sent
by their ``style`` / ``explode`` (:mod:`._style`), and its request body
(:mod:`._operations`). References are followed inside the document and, for a
document read from a local file, into the files beside it (:mod:`._refs`).
Every tool's schema is normalised and checked against JSON Schema 2020-12; an
operation that cannot become a tool is left out with a warning naming it.
Credentials come from the ``auth`` option, explicitly or for one of the
document's ``securitySchemes`` (:mod:`._auth`); the size budget
(:mod:`._budget`) keeps a large API from filling every request.

These tools call URLs taken from a third-party document, so targets that
resolve to private, loopback or link-local addresses are refused unless
``allow_private`` is ``True`` or lists them (host names, CIDRs); a call ends
after 4 x ``timeout`` in all, and a document fetched from the web can only
point to http(s) URLs, never to a local file. Path parameters are
percent-encoded inside their segment, so an argument can never change the
path or add a query. Auth secrets are sent, never shown: they are redacted
from observations, errors and logs.

Operations that can change something (POST, PUT, PATCH, DELETE) are
``dangerous``: an app with an approver asks it before every call. The
``dangerous`` option overrides that (``True``/``False`` for every operation,
or a list of the operations that are).
"""

from __future__ import annotations

from ._loader import load_openapi_tools
from ._tool import OpenAPITool

__all__ = ["load_openapi_tools", "OpenAPITool"]
