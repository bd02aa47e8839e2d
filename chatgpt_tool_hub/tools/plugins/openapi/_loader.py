"""``load_openapi_tools``: a source → its document → one tool per operation, each checked."""

from __future__ import annotations

import logging
import re
from typing import Any

from ....errors import ConfigError
from ....runtime.netguard import parse_allow_private
from .._danger import DangerRule
from . import _budget, _swagger2
from ._auth import make_auth
from ._common import KEY, METHODS, SAFE_METHODS, OperationError, bad, log, object_at
from ._fetch import is_http, join, load, server_url
from ._operations import build_operation
from ._refs import RefError, Resolver
from ._repair import repair
from ._tool import OpenAPITool

_BROKEN = (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError)
_WARNED = 25  # operations left out that get a warning each; the rest are counted


def _clean(name: str) -> str:
    return re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]+", "_", name)).strip("_")


def _manifest(doc: dict, location: str | None, label: str, net: dict) -> tuple[dict, str | None, str, dict]:
    """A ChatGPT plugin manifest followed to its ``api.url``: (document, location, label, manifest info)."""
    api_url = doc["api"].get("url")
    if not isinstance(api_url, str) or not api_url.strip():
        raise bad(label, "the plugin manifest has no api.url")
    auth = object_at(doc, "auth")
    info = {"name": str(doc.get("name_for_model") or "") or None,
            "text": str(doc.get("description_for_model") or "").strip(),
            "auth": str(auth.get("type") or "none").lower(),
            "authorization_type": str(auth.get("authorization_type") or "").lower()}
    loaded, location, label = load(join(location, api_url.strip(), label, "api.url"), net)
    return loaded, location, label, info


def _openapi3(doc: dict, label: str) -> tuple[dict, bool]:
    """The document as OpenAPI 3 (Swagger 2.0 converted), and whether it was converted."""
    if str(doc.get("swagger") or "").startswith("2"):
        try:
            return _swagger2.convert(doc), True
        except _BROKEN as exc:
            raise bad(label, f"this Swagger 2.0 document could not be converted ({type(exc).__name__}: "
                             f"{str(exc)[:120]})") from None
    version = str(doc.get("openapi") or "")
    if not version.startswith("3."):
        found = f"'swagger: {doc['swagger']}'" if "swagger" in doc else (
            f"'openapi: {version[:20]}'" if version else "no 'openapi: 3.x' or 'swagger: \"2.0\"' field")
        raise bad(label, f"not an OpenAPI 3.x or Swagger 2.0 document ({found})")
    return doc, False


def load_openapi_tools(source: str | dict, *, auth: Any = None, base_url: str | None = None,
                       timeout: float = 15, proxy: str | None = None, allow_private: Any = False,
                       name_prefix: str | None = None, operations: list[str] | None = None,
                       dangerous: bool | list[str] | None = None, max_tools: int | None = None,
                       max_schema_bytes: int | None = None) -> list[OpenAPITool]:
    """One :class:`OpenAPITool` per operation of an OpenAPI 3.x or Swagger 2.0 document, or of the document a
    ChatGPT plugin manifest points to (see ``docs/plugins.md``).

    ``auth``: explicit credentials, or a secret for one of the document's
    ``securitySchemes``. ``allow_private``: ``True``/``False``, or host names
    and CIDRs let past the private-address check. ``dangerous``: ``None``
    (POST, PUT, PATCH and DELETE are), ``True``/``False``, or a list of
    operations. ``max_tools`` / ``max_schema_bytes``: the size budget.
    Operations that cannot be made into tools are left out with a warning that
    names them; ``ConfigError`` names the source and the problem when the
    document cannot be loaded or gives no tool at all.
    """
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ConfigError("OpenAPI option 'timeout' must be a number of seconds", key=KEY) from None
    try:
        private = parse_allow_private(allow_private)
    except ValueError as exc:
        raise ConfigError(f"OpenAPI option 'allow_private': {exc}", key=KEY) from None
    net = {"timeout": seconds, "proxy": proxy or None, "allow_private": private}
    danger = DangerRule(dangerous, key=KEY, owner="OpenAPI", names="operations",
                        default_means="by HTTP method: POST, PUT, PATCH and DELETE are dangerous")
    doc, location, label = load(source, net)
    manifest: dict[str, Any] = {}
    if isinstance(doc.get("api"), dict) and ("name_for_model" in doc or "schema_version" in doc):
        doc, location, label, manifest = _manifest(doc, location, label, net)
    doc, converted = _openapi3(doc, label)
    paths = doc.get("paths")
    if paths is not None and not isinstance(paths, dict):
        raise bad(label, "'paths' must be an object")
    if not paths:
        if isinstance(doc.get("webhooks"), dict) and doc["webhooks"]:
            raise bad(label, "the document describes only webhooks -- calls the service makes to you, not "
                             "operations you can call -- so it gives no tools")
        raise bad(label, "the document defines no operations ('paths' is empty)")
    credentials = make_auth(auth, doc, manifest)
    if credentials is None and manifest.get("auth", "none") != "none":
        log.warning("plugin %s declares %r auth but no auth was configured", manifest.get("name"), manifest["auth"])
    local = location is not None and not is_http(location)
    resolver = Resolver(doc, location, local=local, prepare=_swagger2.prepare_file if converted else None)
    if base_url:
        servers: tuple[str | None, ConfigError | None] = (str(base_url).rstrip("/"), None)
    else:
        try:
            servers = (server_url(doc.get("servers"), location, label), None)
        except ConfigError as exc:  # raised when an operation without servers of its own needs it
            servers = (None, exc)
    if name_prefix is None:
        title = doc["info"].get("title") if isinstance(doc.get("info"), dict) else ""
        name_prefix = manifest.get("name") or str(title or "").lower()
    prefix = _clean(str(name_prefix))
    tally = _budget.Tally(label, max_tools, max_schema_bytes)
    count = sum(1 for item in paths.values() if isinstance(item, dict) for m in METHODS if m in item)
    cut: list[str] = []
    wanted = {str(o) for o in operations} if operations is not None else None
    matched: set[str] = set()
    tools: list[OpenAPITool] = []
    names: set[str] = set()
    left_out: list[tuple[set[str], str]] = []
    for path, raw_item in paths.items():
        path = str(path)
        try:
            item, item_base = resolver.deref(raw_item, resolver.root)
        except RefError as exc:
            _leave_out(left_out, {path}, path, str(exc), label)
            continue
        if not isinstance(item, dict):
            _leave_out(left_out, {path}, path, "the path item is not an object", label)
            continue
        for method in METHODS:
            if item.get(method) is None:
                continue
            spelled = f"{method.upper()} {path}"
            problem: str | None
            try:
                op, op_base = resolver.deref(item[method], item_base)
            except RefError as exc:
                op, op_base, problem = None, item_base, str(exc)
            else:
                problem = None if isinstance(op, dict) else "the operation is not an object"
            op_id = str(op.get("operationId") or "") if isinstance(op, dict) else ""
            base = _clean(op_id) or _clean(f"{method}_{path}")
            name = (f"{prefix}-{base}" if prefix else base)[:64]
            unique, n = name, 2
            while unique in names:
                unique, n = f"{name[:60]}_{n}", n + 1
            spellings = {op_id, base, unique, spelled} - {""}
            if wanted is not None:
                hits = wanted & spellings
                if not hits:
                    continue
                matched |= hits
            risky = danger.decide(spellings, default=method not in SAFE_METHODS)
            if problem is None:
                try:
                    tool = _tool(resolver, path, method, op, op_base, item, item_base, unique, servers, location,
                                 label, credentials, net)
                except _NoServer as exc:
                    raise exc.error from None
                except (OperationError, RefError, ConfigError) as exc:
                    problem = str(exc)
                except _BROKEN as exc:
                    log.debug("OpenAPI source %s: %s", label, spelled, exc_info=True)
                    problem = f"it could not be read ({type(exc).__name__}: {str(exc)[:120]})"
            if problem is not None:
                _leave_out(left_out, spellings, f"{spelled} ({op_id})" if op_id else spelled, problem, label)
                continue
            tool.dangerous = risky
            tally.add(tool, count)
            if resolver.cut:
                cut.append(spelled)
            if manifest.get("text") and not tools:
                tool.description = f"{manifest['text'][:2000]}\n\n{tool.description}"
            tools.append(tool)
            names.add(unique)
    if len(left_out) > _WARNED:
        log.warning("OpenAPI source %s: %d more operations are left out (the debug log names them)", label,
                    len(left_out) - _WARNED)
    if cut:
        log.warning("OpenAPI source %s: %d operations have schemas too large to inline whole (%s%s); references "
                    "nested deeper keep only their type", label, len(cut), ", ".join(cut[:3]),
                    ", ..." if len(cut) > 3 else "")
    _finish(tools, left_out, wanted, matched, danger, label, max_tools, max_schema_bytes)
    return tools


class _NoServer(Exception):
    """The document's own server URL is unusable (a problem of the whole source, not of one operation)."""

    def __init__(self, error: ConfigError):
        super().__init__(str(error))
        self.error = error


def _tool(resolver: Resolver, path: str, method: str, op: dict, op_base: str, item: dict, item_base: str,
          name: str, servers: tuple[str | None, ConfigError | None], location: str | None, label: str,
          credentials: Any, net: dict) -> OpenAPITool:
    spec = build_operation(resolver, path, method, op, op_base, item, item_base)
    server, problem = servers
    if server is None and spec.servers:  # the operation's or path's own servers
        server = server_url(spec.servers, location, label)
    elif server is None:
        assert problem is not None  # servers is (url, None) or (None, why there is none)
        raise _NoServer(problem)
    tool = OpenAPITool(name=name, description=spec.description[:1000] or f"{method.upper()} {path}",
                       parameters=spec.parameters, method=method, path=path, server=server, params=spec.params,
                       body=spec.body, auth=credentials, **net)
    try:
        _ = tool.parameter_schema  # normalised and checked against the 2020-12 metaschema now
    except ConfigError:
        fixed, dropped = repair(tool.parameters or {})
        if not dropped:
            raise
        tool.parameters = fixed
        _ = tool.parameter_schema  # still invalid: the operation is left out
        log.info("OpenAPI source %s: %s %s: invalid schema keywords dropped: %s", label, method.upper(), path,
                 ", ".join(dropped[:10]))
    return tool


def _leave_out(left_out: list, spellings: set[str], shown: str, problem: str, label: str) -> None:
    """An operation (or a whole path item) that is not made a tool: kept for the summary, and said in a
    warning that names it (the first ``_WARNED``; the rest in the debug log)."""
    left_out.append((spellings, f"{shown}: {problem}"))
    level = logging.WARNING if len(left_out) <= _WARNED else logging.DEBUG
    log.log(level, "OpenAPI source %s: %s is left out: %s", label, shown, problem)


def _finish(tools: list, left_out: list, wanted: set | None, matched: set, danger: DangerRule, label: str,
            max_tools: Any, max_schema_bytes: Any) -> None:
    if wanted is not None and wanted - matched:
        raise bad(label, f"operations not found: {', '.join(sorted(wanted - matched))}")
    danger.check_listed(label)
    if wanted is not None:
        failed = [why for spellings, why in left_out if spellings & wanted]
        if failed:
            raise bad(label, "operations listed in 'operations' cannot be made into tools: " + "; ".join(failed[:5]))
    if not tools:
        shown = "; ".join(why for _, why in left_out[:5]) + ("; ..." if len(left_out) > 5 else "")
        raise bad(label, f"none of its {len(left_out)} operations could be made into a tool: {shown}")
    log.info("OpenAPI source %s: %d tools made, %d operations left out", label, len(tools), len(left_out))
    _budget.apply(tools, label, max_tools, max_schema_bytes)
