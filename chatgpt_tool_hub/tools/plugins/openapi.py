"""OpenAPI 3.x documents and ChatGPT plugin manifests as tools.

``load_openapi_tools(source, ...)`` turns each operation (path + method) of an
OpenAPI 3.x document (JSON or YAML; a path, an http(s) URL or a dict) into a
:class:`Tool`. A ChatGPT-plugin manifest (``ai-plugin.json``) is followed to its
``api.url``. Arguments: the operation's path, query, header and cookie
parameters by name, plus the JSON request body nested under ``body`` (never
flattened: no clash with parameter names, and array bodies work too).

These tools call URLs taken from a third-party document, so targets that
resolve to private, loopback or link-local addresses are refused unless
``allow_private=True``; a call ends after 4 x ``timeout`` in all, and a
document fetched from the web can only point to http(s) URLs, never to a
local file. Path parameters are percent-encoded as one segment, so
an argument can never change the path or add a query. Auth secrets are sent,
never shown: they are redacted from observations, errors and logs.

Operations that can change something (POST, PUT, PATCH, DELETE) are
``dangerous``: an app with an approver asks it before every call. The
``dangerous`` option overrides that (``True``/``False`` for every operation,
or a list of the operations that are).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from typing import Any, Mapping, NamedTuple
from urllib.parse import quote, urljoin, urlsplit

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ...redact import Redactor
from ..base import Tool
from ..builtin._netguard import BlockedURLError, DeadlineExceeded, check_url, describe_network_error, pinned_session
from ._danger import DangerRule
from ...textutil import decode_text, strip_control as clean_text

__all__ = ["load_openapi_tools", "OpenAPITool"]

log = logging.getLogger("chatgpt_tool_hub.tools.openapi")

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
_SAFE_METHODS = ("get", "head", "options", "trace")  # RFC 9110 "safe": they change nothing on the server
_PARAM_PLACES = ("path", "query", "header", "cookie")
_MAX_DOC_BYTES = 5 * 1024 * 1024
_MAX_BODY_BYTES = 2 * 1024 * 1024
_OBSERVATION_LIMIT = 8000
_MAX_REF_DEPTH = 12
_TOTAL_TIMEOUTS = 4  # a whole exchange may take this many times the per-read timeout
_KEY = "openapi_plugins"


def _bad(label: str, problem: str) -> ConfigError:
    return ConfigError(f"OpenAPI source {label}: {problem}", key=_KEY)


# ---- network ------------------------------------------------------------------------


class _Reply(NamedTuple):
    status: int
    reason: str
    content_type: str
    text: str
    truncated: bool
    url: str


def _safe_url(url: str) -> str:
    """The URL without credentials, query or fragment: safe for messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}{parts.path}"


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port


def _send(method: str, url: str, *, timeout: float, proxy: str | None, allow_private: bool, limit: int,
          auth: Any = None, auth_origin: str | None = None, **kwargs: Any) -> _Reply:
    """One request to checked, pinned addresses (``_netguard``); GET/HEAD follow up to 5
    redirects, each hop re-checked. Auth goes only to ``auth_origin``. The whole
    exchange ends after ``_TOTAL_TIMEOUTS * timeout``. Raises ``BlockedURLError`` /
    ``HostResolutionError`` or a ``requests`` error (``DeadlineExceeded`` included)."""
    session = pinned_session(proxy=proxy)
    try:
        with session.deadline(_TOTAL_TIMEOUTS * timeout):  # a dripping server cannot hold the call longer
            for _ in range(6):
                checked = session.pin(check_url(url, allow_private=allow_private))
                same = auth is not None and auth_origin is not None and _origin(url) == _origin(auth_origin)
                resp = session.request(method, checked.url, timeout=timeout, allow_redirects=False, stream=True,
                                       **(auth.apply(kwargs) if same else kwargs))
                location = resp.headers.get("Location")
                if resp.status_code in (301, 302, 303, 307, 308) and location and method in ("GET", "HEAD"):
                    resp.close()
                    url, kwargs = urljoin(url, location), {k: v for k, v in kwargs.items() if k != "params"}
                    continue
                data, truncated = bytearray(), False
                for chunk in resp.iter_content(64 * 1024):
                    data += chunk
                    if len(data) > limit:
                        truncated = True
                        break
                resp.close()
                if session.aborted:  # the answer "ended" only because the deadline cut the connection
                    raise DeadlineExceeded(_TOTAL_TIMEOUTS * timeout)
                return _Reply(resp.status_code, resp.reason or "", resp.headers.get("Content-Type") or "",
                              decode_text(bytes(data[:limit]), resp.encoding), truncated,
                              url)
        raise BlockedURLError("refused: more than 5 redirects")
    finally:
        session.close()


# ---- auth ---------------------------------------------------------------------------


class _Auth:
    """Credentials from config: bearer, header, query or basic."""

    def __init__(self, config: Mapping[str, Any]):
        kind = str(config.get("type") or ("bearer" if "token" in config else "")).lower()
        need = {"bearer": ("token",), "header": ("name", "value"), "query": ("name", "value"),
                "basic": ("username", "password")}.get(kind)
        if need is None:
            raise ConfigError(f"OpenAPI auth type {kind or '(missing)'!r} is not supported; "
                              "use bearer, header, query, basic or none", key=_KEY)
        missing = [k for k in need if config.get(k) in (None, "")]
        if missing:
            raise ConfigError(f"OpenAPI auth of type {kind!r} needs {', '.join(missing)}", key=_KEY)
        self.kind = kind
        self._values = {k: str(config[k]) for k in need}
        secrets = [v for k, v in self._values.items() if k != "name"]
        if kind == "basic":
            pair = f"{self._values['username']}:{self._values['password']}".encode()
            secrets.append(base64.b64encode(pair).decode())
        self._redactor = Redactor(secrets)  # every spelling (percent-encoded, JSON-escaped ...)
        self.secrets = sorted(self._redactor.secrets, key=len, reverse=True)

    def apply(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        v = self._values
        if self.kind == "bearer":
            out["headers"] = {**out.get("headers", {}), "Authorization": f"Bearer {v['token']}"}
        elif self.kind == "header":
            out["headers"] = {**out.get("headers", {}), v["name"]: v["value"]}
        elif self.kind == "query":
            out["params"] = list(out.get("params") or []) + [(v["name"], v["value"])]
        else:
            out["auth"] = (v["username"], v["password"])
        return out

    def redact(self, text: str) -> str:
        return self._redactor.redact(text)


def _make_auth(auth: Mapping[str, Any] | None) -> _Auth | None:
    if auth is None:
        return None
    if not isinstance(auth, Mapping):
        raise ConfigError("OpenAPI 'auth' must be a dict like {\"type\": \"bearer\", \"token\": ...}", key=_KEY)
    if not auth or str(auth.get("type", "")).lower() == "none":
        return None
    return _Auth(auth)


# ---- loading documents ----------------------------------------------------------------


def _parse(text: str, label: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise _bad(label, "YAML documents need PyYAML (pip install pyyaml)") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise _bad(label, f"not valid JSON or YAML ({first})") from None
    if not isinstance(doc, dict):
        raise _bad(label, "the document is not a JSON/YAML object")
    return doc


def _load(source: Any, net: dict[str, Any]) -> tuple[dict, str | None, str]:
    """(document, location for relative references, label for messages)."""
    if isinstance(source, Mapping):
        return dict(source), None, "<dict>"
    if not isinstance(source, (str, os.PathLike)) or not str(source).strip():
        raise ConfigError("an OpenAPI source must be a path, an http(s) URL or a dict", key=_KEY)
    text = str(source).strip()
    if re.match(r"^https?://", text, flags=re.I):
        label = _safe_url(text)
        try:
            reply = _send("GET", text, headers={"Accept": "application/json, application/yaml, */*"},
                          limit=_MAX_DOC_BYTES, **net)
        except BlockedURLError as exc:
            raise _bad(label, str(exc)) from None
        except Exception as exc:  # requests' messages may carry the query: describe, never echo the URL
            reason = describe_network_error(exc, urlsplit(text).hostname or "?", net["timeout"])
            raise _bad(label, f"could not be fetched ({reason})") from None
        if reply.status != 200:
            raise _bad(label, f"HTTP {reply.status}")
        if reply.truncated:
            raise _bad(label, f"larger than {_MAX_DOC_BYTES} bytes")
        return _parse(reply.text, label), reply.url, label
    path = os.path.abspath(os.path.expanduser(text))
    try:
        if os.path.getsize(path) > _MAX_DOC_BYTES:
            raise _bad(text, f"larger than {_MAX_DOC_BYTES} bytes")
        with open(path, encoding="utf-8") as fh:
            return _parse(fh.read(), text), path, text
    except OSError as exc:
        raise _bad(text, f"cannot be read ({exc.strerror or type(exc).__name__})") from None


def _join(location: str | None, ref: str, label: str, what: str) -> str:
    if re.match(r"^https?://", ref, flags=re.I):
        return ref
    if location is None:
        raise _bad(label, f"{what} {ref!r} is relative and the document has no location; "
                          "pass base_url or an absolute URL")
    if re.match(r"^https?://", location, flags=re.I):
        joined = urljoin(location, ref)
        if not re.match(r"^https?://", joined, flags=re.I):  # "file:...", "x:/../..": never a local file
            raise _bad(label, f"{what} {ref[:200]!r} is not an http(s) URL; a document fetched from the web "
                              "can only point to http(s) URLs")
        return joined
    if ref.startswith("/"):
        raise _bad(label, f"{what} {ref!r} is relative to a web server; pass base_url")
    return os.path.join(os.path.dirname(location), ref)


def _server_url(doc: dict, base_url: str | None, location: str | None, label: str) -> str:
    if base_url:
        return str(base_url).rstrip("/")
    servers = doc.get("servers") or [{"url": "/"}]
    first = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], dict) else {}
    url = str(first.get("url") or "/")
    for name, var in (first.get("variables") or {}).items():
        url = url.replace("{" + name + "}", str((var or {}).get("default", "")))
    url = _join(location, url, label, "servers[0].url")
    if not re.match(r"^https?://", url, flags=re.I):
        raise _bad(label, "the server URL is not http(s); pass base_url")
    return url.rstrip("/")


# ---- schemas ------------------------------------------------------------------------


class _Resolver:
    """Inline local ``$ref``s (``#/components/...``) with a cycle and depth guard."""

    def __init__(self, doc: dict, label: str):
        self.doc, self.label = doc, label

    def lookup(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            return None  # external reference: left open
        node: Any = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _bad(self.label, f"$ref {ref!r} points to nothing")
        return node

    def deref(self, obj: Any) -> Any:
        """Follow a chain of ``$ref``s (for parameters and request bodies)."""
        seen: set[str] = set()
        while isinstance(obj, dict) and isinstance(obj.get("$ref"), str):
            ref = obj["$ref"]
            if ref in seen:
                raise _bad(self.label, f"$ref cycle at {ref!r}")
            seen.add(ref)
            obj = self.lookup(ref) or {}
        return obj

    def schema(self, obj: Any, stack: tuple[str, ...] = ()) -> Any:
        if isinstance(obj, list):
            return [self.schema(x, stack) for x in obj]
        if not isinstance(obj, dict):
            return obj
        if isinstance(obj.get("$ref"), str):
            ref = obj["$ref"]
            if ref in stack or len(stack) >= _MAX_REF_DEPTH:
                return {"description": f"(recursive: {ref.rsplit('/', 1)[-1]})"}
            target = self.lookup(ref)
            if target is None:
                return {"description": f"(external reference {ref} not resolved)"}
            out = self.schema(target, stack + (ref,))
            siblings = {k: v for k, v in obj.items() if k != "$ref"}
            return {**out, **self.schema(siblings, stack)} if isinstance(out, dict) else out
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                out[key] = {name: self.schema(sub, stack) for name, sub in value.items()}
            elif key in ("example", "examples", "default", "enum", "const", "xml", "externalDocs"):
                out[key] = value
            elif key != "discriminator":
                out[key] = self.schema(value, stack)
        return _fix_openapi30(out)


def _fix_openapi30(schema: dict) -> dict:
    """OpenAPI 3.0 spellings → JSON Schema 2020-12 (``nullable``, boolean exclusive bounds)."""
    if schema.pop("nullable", False) is True and isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(bound), bool):
            if schema.pop(bound) and limit in schema:
                schema[bound] = schema.pop(limit)
    return schema


def _body_media(content: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(media type, media object) of a JSON (preferred) or form request body."""
    kinds = {m.split(";")[0].strip().lower(): spec for m, spec in content.items()}
    for media, spec in kinds.items():
        if media == "application/json" or media.endswith("+json"):
            return media, spec
    form = "application/x-www-form-urlencoded"
    return (form, kinds[form]) if form in kinds else None


# ---- tools --------------------------------------------------------------------------


def _clean(name: str) -> str:
    return re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]+", "_", name)).strip("_")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _truncate(text: str, limit: int = _OBSERVATION_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters omitted] ...\n{text[-half:]}"


class OpenAPITool(Tool):
    """One OpenAPI operation. ``parameters``: its parameters by name, plus ``body``."""

    def __init__(self, *, name: str, description: str, parameters: dict, method: str, path: str,
                 server: str, params: list[tuple[str, str, str, bool]], body: tuple[str, str] | None,
                 auth: _Auth | None, timeout: float, proxy: str | None, allow_private: bool):
        self.name, self.description, self.parameters = name, description, parameters
        self.method, self.path, self.server = method.upper(), path, server
        self._params, self._body, self._auth = params, body, auth
        self._net = {"timeout": timeout, "proxy": proxy, "allow_private": allow_private}

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        if not (self.parameters or {}).get("properties") and (
                tool_input is None or (isinstance(tool_input, str) and not tool_input.strip().startswith("{"))):
            tool_input = {}
        return super().parse_arguments(tool_input)

    def _redact(self, text: str) -> str:
        return self._auth.redact(text) if self._auth else text

    def build_request(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """URL and requests keyword arguments for ``arguments`` (without auth)."""
        by_name = {(place, name): key for key, name, place, _ in self._params}

        def segment(match: re.Match) -> str:
            key = by_name.get(("path", match.group(1)))
            if key is None or arguments.get(key) is None:
                raise ToolInputError(f"tool '{self.name}' needs the path parameter '{match.group(1)}'")
            text = _scalar(arguments[key])
            if text in ("", ".", ".."):
                raise ToolInputError(f"path parameter '{key}' must not be empty, '.' or '..'")
            return quote(text, safe="")  # one segment: '/', '?', '#' and '%' are encoded

        url = self.server + re.sub(r"\{([^}/]+)\}", segment, self.path)
        query: list[tuple[str, str]] = []
        headers = {"Accept": "application/json, text/plain;q=0.9, */*;q=0.5"}
        cookies: dict[str, str] = {}
        for key, name, place, explode in self._params:
            value = arguments.get(key)
            if value is None or place == "path":
                continue
            if place == "query":
                if isinstance(value, list) and explode:
                    query.extend((name, _scalar(v)) for v in value)
                elif isinstance(value, list):
                    query.append((name, ",".join(_scalar(v) for v in value)))
                else:
                    query.append((name, _scalar(value)))
            elif place == "header":
                headers[name] = _scalar(value)
            else:
                cookies[name] = _scalar(value)
        kwargs: dict[str, Any] = {"params": query, "headers": headers}
        if cookies:
            kwargs["cookies"] = cookies
        if self._body is not None and arguments.get(self._body[0]) is not None:
            key, media = self._body
            if media == "application/x-www-form-urlencoded":
                kwargs["data"] = arguments[key]
            else:
                kwargs["data"] = json.dumps(arguments[key], ensure_ascii=False).encode("utf-8")
                headers["Content-Type"] = media
        return {"url": url, **kwargs}

    def _run(self, **arguments: Any) -> str:
        request = self.build_request(arguments)
        url = request.pop("url")
        log.debug("openapi call %s %s", self.method, self.path)
        try:
            reply = _send(self.method, url, auth=self._auth, auth_origin=self.server, limit=_MAX_BODY_BYTES,
                          **self._net, **request)
        except BlockedURLError as exc:
            raise ToolExecutionError(f"{self.method} {self.path} refused: {exc}") from None
        except Exception as exc:  # requests' messages may carry the URL: describe, redact
            reason = describe_network_error(exc, urlsplit(url).hostname or "?", self._net["timeout"])
            raise ToolExecutionError(self._redact(f"{self.method} {self.path} failed: {reason}")) from None
        text = reply.text
        if "json" in reply.content_type.lower() and not reply.truncated:
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        text = clean_text(self._redact(text))  # no terminal escapes or control characters reach the LLM
        if not 200 <= reply.status < 300:
            reason = clean_text(self._redact(reply.reason))
            raise ToolExecutionError(f"HTTP {reply.status} {reason} from {self.method} {self.path}: "
                                     f"{_truncate(text, 2000) or '(empty body)'}")
        return _truncate(text) if text.strip() else f"HTTP {reply.status} (empty body)"


def load_openapi_tools(source: str | dict, *, auth: dict | None = None, base_url: str | None = None,
                       timeout: float = 15, proxy: str | None = None, allow_private: bool = False,
                       name_prefix: str | None = None, operations: list[str] | None = None,
                       dangerous: bool | list[str] | None = None) -> list[Tool]:
    """One :class:`OpenAPITool` per operation of an OpenAPI 3.x document or ChatGPT plugin manifest.

    ``dangerous``: ``None`` (by method: POST, PUT, PATCH and DELETE are),
    ``True``/``False`` (every operation), or a list of the operations that are
    (operationIds, tool names or ``"METHOD /path"``, like ``operations``).
    Raises ``ConfigError`` naming the source and the problem when the document
    cannot be loaded or is not a valid OpenAPI 3.x document.
    """
    try:
        net = {"timeout": float(timeout), "proxy": proxy or None, "allow_private": bool(allow_private)}
    except (TypeError, ValueError):
        raise ConfigError("OpenAPI 'timeout' must be a number of seconds", key=_KEY) from None
    credentials = _make_auth(auth)
    danger = DangerRule(dangerous, key=_KEY, owner="OpenAPI", names="operations",
                        default_means="by HTTP method: POST, PUT, PATCH and DELETE are dangerous")
    doc, location, label = _load(source, net)
    plugin_name, plugin_text = None, ""
    if isinstance(doc.get("api"), dict) and ("name_for_model" in doc or "schema_version" in doc):
        api_url = doc["api"].get("url")
        if not isinstance(api_url, str) or not api_url.strip():
            raise _bad(label, "the plugin manifest has no api.url")
        plugin_name = str(doc.get("name_for_model") or "") or None
        plugin_text = str(doc.get("description_for_model") or "").strip()
        manifest_auth = str((doc.get("auth") or {}).get("type") or "none").lower()
        if manifest_auth != "none" and credentials is None:
            log.warning("plugin %s declares %r auth but no auth was configured", plugin_name, manifest_auth)
        doc, location, label = _load(_join(location, api_url.strip(), label, "api.url"), net)
    version = str(doc.get("openapi") or "")
    if not version.startswith("3."):
        problem = ("Swagger/OpenAPI 2.0 is not supported; convert it to OpenAPI 3" if "swagger" in doc
                   else "not an OpenAPI 3.x document (no 'openapi: 3.x' field)")
        raise _bad(label, problem)
    if not isinstance(doc.get("paths"), dict):
        raise _bad(label, "'paths' must be an object")
    server = _server_url(doc, base_url, location, label)
    if name_prefix is None:
        name_prefix = plugin_name or str((doc.get("info") or {}).get("title") or "").lower()
    prefix = _clean(str(name_prefix))
    resolver = _Resolver(doc, label)
    wanted = {str(o) for o in operations} if operations is not None else None
    matched: set[str] = set()
    tools: list[Tool] = []
    for path, item in doc["paths"].items():
        if not isinstance(item, dict):
            raise _bad(label, f"path {path!r} is not an object")
        item = resolver.deref(item)
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            op_id = str(op.get("operationId") or "")
            base = _clean(op_id) or _clean(f"{method}_{path}")
            name = (f"{prefix}-{base}" if prefix else base)[:64]
            unique, n = name, 2
            while any(t.name == unique for t in tools):
                unique, n = f"{name[:60]}_{n}", n + 1
            name = unique
            spellings = {op_id, base, name, f"{method.upper()} {path}"} - {""}
            risky = danger.decide(spellings, default=method not in _SAFE_METHODS)
            if wanted is not None:
                hits = wanted & spellings
                if not hits:
                    continue
                matched |= hits
            tool = _operation_tool(resolver, label, path, method, op, item, name, server, credentials, net)
            tool.dangerous = risky
            if plugin_text and not tools:
                tool.description = f"{plugin_text[:2000]}\n\n{tool.description}"
            tools.append(tool)
    if wanted is not None and wanted - matched:
        raise _bad(label, f"operations not found: {', '.join(sorted(wanted - matched))}")
    danger.check_listed(label)
    if not tools:
        log.warning("OpenAPI source %s defines no operations", label)
    return tools


def _operation_tool(resolver: _Resolver, label: str, path: str, method: str, op: dict, item: dict,
                    name: str, server: str, auth: _Auth | None, net: dict[str, Any]) -> OpenAPITool:
    merged: dict[tuple[str, str], dict] = {}
    for raw in list(item.get("parameters") or []) + list(op.get("parameters") or []):
        param = resolver.deref(raw)
        if not isinstance(param, dict) or "name" not in param or param.get("in") not in _PARAM_PLACES:
            raise _bad(label, f"{method.upper()} {path} has a parameter without valid 'name' and 'in'")
        merged[(param["in"], str(param["name"]))] = param  # operation-level overrides path-level
    props: dict[str, Any] = {}
    required: list[str] = []
    params: list[tuple[str, str, str, bool]] = []
    for (place, pname), param in merged.items():
        if place == "header" and pname.lower() in ("accept", "content-type", "authorization"):
            continue
        schema = param.get("schema")
        if schema is None and isinstance(param.get("content"), dict) and param["content"]:
            schema = next(iter(param["content"].values())).get("schema")
        schema = resolver.schema(schema if isinstance(schema, dict) else {"type": "string"})
        if param.get("description") and "description" not in schema:
            schema["description"] = str(param["description"])
        key = pname if pname not in props else f"{place}_{pname}"
        props[key] = schema
        if place == "path" or param.get("required"):
            required.append(key)
        params.append((key, pname, place, bool(param.get("explode", param.get("style", "form") == "form"))))
    body = None
    request_body = resolver.deref(op.get("requestBody"))
    if isinstance(request_body, dict) and isinstance(request_body.get("content"), dict):
        media = _body_media(request_body["content"])
        if media is not None:
            key = "body" if "body" not in props else "request_body"
            schema = resolver.schema((media[1] or {}).get("schema") or {})
            if request_body.get("description") and "description" not in schema:
                schema["description"] = str(request_body["description"])
            props[key] = schema
            if request_body.get("required"):
                required.append(key)
            body = (key, media[0])
        else:
            log.info("%s %s: only JSON and form request bodies are supported", method.upper(), path)
    summary, details = str(op.get("summary") or "").strip(), str(op.get("description") or "").strip()
    description = summary if not details or details == summary else (
        f"{summary}. {details}" if summary else details)
    parameters = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    return OpenAPITool(name=name, description=description[:1000] or f"{method.upper()} {path}",
                       parameters=parameters, method=method, path=path, server=server, params=params,
                       body=body, auth=auth, **net)
