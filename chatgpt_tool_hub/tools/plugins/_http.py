"""HTTP for plugin tools: one GET helper whose every failure is a clear observation.

``get_json`` / ``get_text`` / ``fetch`` wrap ``requests`` with a timeout, the
``proxy`` setting and a size cap. No network, a DNS failure, a refused
connection, a timeout, a non-2xx answer and invalid JSON all raise
:class:`~chatgpt_tool_hub.errors.ToolExecutionError` with a message meant for
the model ("could not reach api.example.com: ..."), never a traceback.

Keys are sent in headers or query parameters; they never appear in a message
or a log line: every secret value (parameters and headers whose names look
secret, plus ``secrets=...``) is replaced by ``***`` and query strings are cut
from any exception text before it is used. Logs name the host and path only.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import quote, quote_plus, urlsplit

from ...config import get_typed, is_secret_key
from ...errors import ToolExecutionError, ToolInputError
from ...textutil import decode_text

__all__ = ["HttpSettings", "HttpResponse", "fetch", "get_json", "get_text", "scrub", "host_of",
           "DEFAULT_TIMEOUT", "USER_AGENT", "numbered_results", "query_schema", "clean_query"]

log = logging.getLogger("chatgpt_tool_hub.tools.plugins")

DEFAULT_TIMEOUT = 15.0
MAX_BYTES = 5_000_000
USER_AGENT = "chatgpt-tool-hub/1.0 (tool engine; +https://pypi.org/project/chatgpt-tool-hub/)"


@dataclass(frozen=True)
class HttpSettings:
    """``plugin_timeout`` (seconds per request, default 15) and ``proxy`` of a plugin tool."""

    timeout: float = DEFAULT_TIMEOUT
    proxy: str | None = None

    @classmethod
    def from_config(cls, kwargs: Mapping[str, Any]) -> "HttpSettings":
        timeout = float(get_typed(kwargs, "plugin_timeout", DEFAULT_TIMEOUT))
        return cls(timeout=timeout if timeout > 0 else DEFAULT_TIMEOUT, proxy=get_typed(kwargs, "proxy", None))

    def __repr__(self) -> str:  # a proxy URL may hold credentials
        return f"HttpSettings(timeout={self.timeout:g}, proxy={'set' if self.proxy else None})"


@dataclass
class HttpResponse:
    status: int
    text: str
    content_type: str
    url: str  # without its query string


def host_of(url: str) -> str:
    """``host[:port]`` of ``url``, without any user:password part."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "the configured URL"
    if not host:
        return "the configured URL"
    return f"{host}:{port}" if port else host


def _secret_values(params: Mapping[str, Any] | None, headers: Mapping[str, Any] | None,
                   extra: Iterable[Any]) -> list[str]:
    values: list[str] = [str(v) for v in extra if v]
    for mapping in (params or {}, headers or {}):
        values.extend(str(v) for k, v in mapping.items() if v and is_secret_key(str(k)))
    out: set[str] = set()
    for value in values:
        if len(value.strip()) < 3:
            continue
        out.update({value, quote_plus(value), quote(value, safe="")})
    return sorted(out, key=len, reverse=True)


_QUERY = re.compile(r"\?[^\s'\")\]]*")
_USERINFO = re.compile(r"(\w+://)[^/\s@]+@")


def scrub(text: Any, secrets: Iterable[str] = ()) -> str:
    """``text`` with secret values, query strings and URL credentials removed."""
    result = str(text)
    for secret in secrets:
        if secret:
            result = result.replace(secret, "***")
    result = _QUERY.sub("?…", result)
    return _USERINFO.sub(r"\1***@", result)


class _SecretLogFilter(logging.Filter):
    """Replaces the secrets this module has sent with ``***`` in log records.

    Attached to urllib3's connection-pool logger, whose DEBUG lines show each
    request's URL, query string included (where keys sent as parameters sit).
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets: tuple[str, ...] = ()  # longest first; replaced whole, never mutated (thread safety)
        self._lock = threading.Lock()

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            merged = set(self.secrets) | {s for s in secrets if len(s) >= 3}
            if len(merged) != len(self.secrets):
                self.secrets = tuple(sorted(merged, key=len, reverse=True))

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets
        if secrets:
            try:
                message = record.getMessage()
            except Exception:  # a malformed record: leave it to logging's own error handling
                return True
            redacted = message
            for secret in secrets:
                redacted = redacted.replace(secret, "***")
            if redacted != message:
                record.msg, record.args = redacted, ()
        return True


_log_filter = _SecretLogFilter()
_GUARDED_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry", "requests", log.name)


def _guard_logs(secrets: Iterable[str]) -> None:
    _log_filter.add(secrets)
    for name in _GUARDED_LOGGERS:
        logger = logging.getLogger(name)
        if _log_filter not in logger.filters:
            logger.addFilter(_log_filter)


def _connection_reason(err: Exception, secrets: list[str]) -> str:
    text = str(err)
    low = text.lower()
    if any(s in low for s in ("nameresolution", "name or service not known", "nodename nor servname",
                               "getaddrinfo failed", "temporary failure in name resolution",
                               "no address associated", "failed to resolve")):
        return "the host name could not be resolved (no network, or a DNS failure)"
    if "refused" in low:
        return "connection refused (is the service running, and is its URL right?)"
    if "network is unreachable" in low or "no route to host" in low:
        return "the network is unreachable (no network connection?)"
    if "remotedisconnected" in low or "connection aborted" in low or "connection reset" in low:
        return "the connection was closed without an answer"
    return "connection failed: " + scrub(text, secrets)[:200]


def _charset(content_type: str) -> str | None:
    match = re.search(r"charset=\"?([\w.:-]+)", content_type or "", flags=re.I)
    return match.group(1) if match else None


def _decode(body: bytes, content_type: str) -> str:
    """The body in its declared charset when that is a text codec (``textutil.TEXT_CODECS``), else UTF-8."""
    return decode_text(body, _charset(content_type))


def _error_detail(text: str, secrets: list[str]) -> str:
    """A short, one-line reason from an error body (JSON ``error``/``message`` when present)."""
    detail = text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        err = data.get("error", data.get("message", data.get("detail")))
        if isinstance(err, Mapping):
            err = err.get("message") or err.get("code") or json.dumps(err)[:200]
        if err:
            detail = str(err)
    detail = re.sub(r"<[^>]+>", " ", detail)  # an HTML error page
    detail = " ".join(detail.split())
    return scrub(detail, secrets)[:200]


_STATUS_HINTS = {
    401: "the service refused the credentials; check {keys}",
    403: "the service refused the request; check {keys} (and the plan's limits)",
    404: "not found; check the configured URL",
    429: "rate limited; try again later",
}


def fetch(url: str, params: Mapping[str, Any] | None = None, *, timeout: float = DEFAULT_TIMEOUT,
          proxy: str | None = None, headers: Mapping[str, str] | None = None, secrets: Iterable[Any] = (),
          allow_status: Iterable[int] = (), key_names: str = "the key settings",
          hints: Mapping[int, str] | None = None, max_bytes: int = MAX_BYTES) -> HttpResponse:
    """GET ``url`` and return status and decoded text; failures raise ``ToolExecutionError``.

    Statuses in ``allow_status`` are returned instead of raised (e.g. Wolfram's
    501 "could not interpret"). ``key_names`` names the settings a 401/403 hint
    points to; ``hints`` replaces the hint of a status.
    """
    import requests  # local import: keeps ``import chatgpt_tool_hub`` light

    secret_list = _secret_values(params, headers, secrets)
    if secret_list:
        _guard_logs(secret_list)
    host = host_of(url)
    clean_url = url.split("?", 1)[0]
    sent_headers = {"User-Agent": USER_AGENT, "Accept": "application/json, application/xml;q=0.9, */*;q=0.5"}
    sent_headers.update(headers or {})
    proxies = {"http": proxy, "https": proxy} if proxy else None
    timeout = float(timeout)
    started = time.monotonic()

    def fail(reason: str) -> ToolExecutionError:
        return ToolExecutionError(f"could not reach {host}: {reason}")

    try:
        response = requests.get(url, params=dict(params or {}), headers=sent_headers, proxies=proxies,
                                timeout=timeout, stream=True, allow_redirects=True)
        try:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_content(65536):
                size += len(chunk)
                if size > max_bytes:
                    raise ToolExecutionError(f"{host} answered more than {max_bytes} bytes; the answer was refused")
                if time.monotonic() - started > timeout:
                    raise requests.exceptions.ReadTimeout()
                chunks.append(chunk)
            body = b"".join(chunks)
        finally:
            response.close()
    except ToolExecutionError:
        raise
    except requests.exceptions.Timeout:
        raise fail(f"no answer within {timeout:g} s (timed out; plugin_timeout sets the limit)") from None
    except requests.exceptions.ProxyError:
        raise fail("the proxy failed or refused the connection (check the proxy setting)") from None
    except requests.exceptions.SSLError as err:
        raise fail("TLS/SSL error: " + scrub(err, secret_list)[:200]) from None
    except requests.exceptions.ConnectionError as err:
        raise fail(_connection_reason(err, secret_list)) from None
    except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
            requests.exceptions.InvalidURL) as err:
        raise ToolExecutionError(f"the URL configured for {host} is invalid: "
                                 + scrub(err, secret_list)[:200]) from None
    except requests.exceptions.TooManyRedirects:
        raise fail("too many redirects") from None
    except requests.exceptions.RequestException as err:
        raise fail(f"{type(err).__name__}: " + scrub(err, secret_list)[:200]) from None

    content_type = response.headers.get("Content-Type", "")
    text = _decode(body, content_type)
    status = response.status_code
    log.debug("GET %s%s -> %s (%d bytes, %.2f s)", host, urlsplit(clean_url).path, status, len(body),
              time.monotonic() - started)
    if not 200 <= status < 300 and status not in set(allow_status):
        reason = f" ({response.reason})" if response.reason else ""
        hint = (hints or {}).get(status) or _STATUS_HINTS.get(status, "")
        hint = f"; {hint.format(keys=key_names)}" if hint else ""
        detail = _error_detail(text, secret_list)
        raise ToolExecutionError(f"{host} answered HTTP {status}{reason}{hint}" + (f": {detail}" if detail else ""))
    return HttpResponse(status=status, text=text, content_type=content_type, url=scrub(clean_url, secret_list))


def get_text(url: str, params: Mapping[str, Any] | None = None, **options: Any) -> str:
    """The decoded body of a 2xx answer (see :func:`fetch` for the options)."""
    return fetch(url, params, **options).text


def get_json(url: str, params: Mapping[str, Any] | None = None, **options: Any) -> Any:
    """The parsed JSON body of a 2xx answer; anything else raises ``ToolExecutionError``."""
    response = fetch(url, params, **options)
    try:
        return json.loads(response.text)
    except ValueError:
        secrets = _secret_values(params, options.get("headers"), options.get("secrets", ()))
        start = " ".join(response.text[:80].split())
        kind = response.content_type.split(";")[0] or "no content type"
        raise ToolExecutionError(
            f"{host_of(url)} answered with invalid JSON ({kind}; starts with {scrub(start, secrets)!r}); "
            f"is the URL right?"
        ) from None


def numbered_results(results: Iterable[tuple[str, str, str]], empty: str) -> str:
    """``1. title`` / snippet / url blocks, or ``empty`` when there are none."""
    blocks = []
    for i, (title, snippet, url) in enumerate(results, 1):
        lines = [f"{i}. {(title or '(no title)').strip()}"]
        if snippet and snippet.strip():
            lines.append("   " + " ".join(snippet.split()))
        if url:
            lines.append(f"   {url}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else empty


def query_schema(description: str) -> dict:
    """The JSON schema of a tool whose one input is the text ``query``."""
    return {"type": "object", "properties": {"query": {"type": "string", "description": description}},
            "required": ["query"]}


def clean_query(query: Any, tool_name: str, example: str) -> str:
    """``query`` on one line; empty input raises ``ToolInputError`` with an example."""
    text = " ".join(str(query if query is not None else "").split())
    if not text:
        raise ToolInputError(f"the {tool_name} tool needs a query as its input, e.g. {example}")
    return text
