"""The tool of one operation: arguments → an HTTP request (styles, body), the answer → an observation."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping
from urllib.parse import urlsplit

from ....errors import ToolExecutionError, ToolInputError
from ....runtime.netguard import BlockedURLError, describe_network_error
from ....textutil import strip_control as clean_text
from ...base import Tool
from ._common import log
from ._fetch import send
from ._operations import FORM, JSON, MULTIPART, TEXT, Body, Param
from ._style import cookie_pairs, header_value, path_value, query_pairs, text

MAX_BODY_BYTES = 2 * 1024 * 1024
OBSERVATION_LIMIT = 8000
_ACCEPT = "application/json, text/plain;q=0.9, */*;q=0.5"
_TEMPLATE = re.compile(r"\{([^}/]+)\}")


def truncate(value: str, limit: int = OBSERVATION_LIMIT) -> str:
    if len(value) <= limit:
        return value
    half = limit // 2
    return f"{value[:half]}\n... [{len(value) - 2 * half} characters omitted] ...\n{value[-half:]}"


class OpenAPITool(Tool):
    """One OpenAPI operation. ``parameters``: its parameters by name, and its body (see the loader)."""

    def __init__(self, *, name: str, description: str, parameters: dict, method: str, path: str,
                 server: str, params: list[Param], body: Body | None, auth: Any, timeout: float,
                 proxy: str | None, allow_private: Any):
        self.name, self.description, self.parameters = name, description, parameters
        self.method, self.path, self.server = method.upper(), path, server
        # a remote service's reply is untrusted; an operation that writes can carry data out
        self.reads_untrusted = True
        self.egress = "none" if self.method in ("GET", "HEAD") else "network"
        self._params, self._body, self._auth = params, body, auth
        self._net = {"timeout": timeout, "proxy": proxy, "allow_private": allow_private}

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        if not (self.parameters or {}).get("properties") and (
                tool_input is None or (isinstance(tool_input, str) and not tool_input.strip().startswith("{"))):
            tool_input = {}
        return super().parse_arguments(tool_input)

    def _redact(self, value: str) -> str:
        return self._auth.redact(value) if self._auth else value

    def _path(self, arguments: Mapping[str, Any]) -> str:
        by_name = {p.name: p for p in self._params if p.place == "path"}

        def expand(match: re.Match) -> str:
            param = by_name.get(match.group(1))
            if param is None or arguments.get(param.key) is None:
                raise ToolInputError(f"tool '{self.name}' needs the path parameter '{match.group(1)}'")
            return path_value(param.name, arguments[param.key], param.style, param.explode)

        segments = []
        for segment in self.path.split("/"):  # values are encoded inside their segment: no '/', '?' or '#'
            filled = _TEMPLATE.sub(expand, segment)
            if filled != segment and filled in ("", ".", ".."):
                raise ToolInputError(f"a path parameter of tool '{self.name}' must not be empty, '.' or '..'")
            segments.append(filled)
        return "/".join(segments)

    def build_request(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """URL and ``requests`` keyword arguments for ``arguments`` (without auth)."""
        query: list[str] = []
        headers = {"Accept": _ACCEPT}
        cookies: list[str] = []
        for param in self._params:
            value = arguments.get(param.key)
            if value is None or param.place == "path":
                continue
            if param.as_json:
                value = json.dumps(value, ensure_ascii=False)
            if param.place == "query":
                query += query_pairs(param.name, value, param.style, param.explode, param.allow_reserved)
            elif param.place == "header":
                headers[param.name] = header_value(param.name, value, param.explode)
            else:
                cookies += cookie_pairs(param.name, value, param.explode)
        url = self.server + self._path(arguments) + ("?" + "&".join(query) if query else "")
        if cookies:
            headers["Cookie"] = "; ".join(cookies)
        kwargs: dict[str, Any] = {"headers": headers}
        body = self._body_value(arguments)
        if body is not None and self._body is not None:
            media = self._body.media
            if media == FORM:
                pairs = [piece for key, member in body.items() if member is not None
                         for piece in query_pairs(key, member, *self._form_style(key))]
                kwargs["data"] = "&".join(pairs).encode("ascii")
                headers["Content-Type"] = FORM
            elif media == MULTIPART:
                kwargs["files"] = [(key, (None, text(v))) for key, member in body.items() if member is not None
                                   for v in (member if isinstance(member, list) else [member])]
            elif media == TEXT:
                kwargs["data"] = text(body).encode("utf-8")
                headers["Content-Type"] = "text/plain; charset=utf-8"
            else:
                kwargs["data"] = json.dumps(body, ensure_ascii=False).encode("utf-8")
                headers["Content-Type"] = media or JSON
        return {"url": url, **kwargs}

    def _body_value(self, arguments: Mapping[str, Any]) -> Any:
        if self._body is None:
            return None
        if self._body.key is None:  # the arguments are the body's properties
            return dict(arguments) if arguments or self._body.required else None
        return arguments.get(self._body.key)

    def _form_style(self, key: str) -> tuple[str, bool]:
        rule = self._body.encoding.get(key) if self._body else None
        rule = rule if isinstance(rule, dict) else {}
        style = str(rule.get("style") or "form")
        explode = rule.get("explode")
        return style, explode if isinstance(explode, bool) else style == "form"

    def _run(self, **arguments: Any) -> str:
        request = self.build_request(arguments)
        url = request.pop("url")
        log.debug("openapi call %s %s", self.method, self.path)
        try:
            reply = send(self.method, url, auth=self._auth, auth_origin=self.server, limit=MAX_BODY_BYTES,
                         **self._net, **request)
        except BlockedURLError as exc:
            raise ToolExecutionError(f"{self.method} {self.path} refused: {exc}") from None
        except Exception as exc:  # requests' messages may carry the URL: describe, redact
            reason = describe_network_error(exc, urlsplit(url).hostname or "?", self._net["timeout"])
            raise ToolExecutionError(self._redact(f"{self.method} {self.path} failed: {reason}")) from None
        body = reply.text
        if "json" in reply.content_type.lower() and not reply.truncated:
            try:
                body = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        body = clean_text(self._redact(body))  # no terminal escapes or control characters reach the LLM
        if not 200 <= reply.status < 300:
            reason = clean_text(self._redact(reply.reason))
            raise ToolExecutionError(f"HTTP {reply.status} {reason} from {self.method} {self.path}: "
                                     f"{truncate(body, 2000) or '(empty body)'}")
        return truncate(body) if body.strip() else f"HTTP {reply.status} (empty body)"
