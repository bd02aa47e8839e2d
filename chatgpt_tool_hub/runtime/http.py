"""HTTP for plugin tools: one request helper whose every failure is a clear observation.

``request`` (any method, a body, bytes back: audio, SSML, forms) and the GET
helpers ``get_json`` / ``get_text`` / ``fetch`` wrap ``requests`` with a timeout, the
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

import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from ..config import get_typed, is_secret_key
from ..errors import ToolExecutionError, ToolInputError
from ..redact import Redactor
from ..textutil import content_type, decode_text

__all__ = ["HttpSettings", "HttpResponse", "RawResponse", "request", "fetch", "get_json", "get_text", "scrub", "host_of",
           "DEFAULT_TIMEOUT", "USER_AGENT", "numbered_results", "query_schema", "clean_query", "json_object",
           "json_list"]

log = logging.getLogger("chatgpt_tool_hub.tools.plugins")

MAX_BYTES = 5_000_000
USER_AGENT = "chatgpt-tool-hub/1.0 (tool engine; +https://pypi.org/project/chatgpt-tool-hub/)"


DEFAULT_TIMEOUT = 15.0


@dataclass(frozen=True)
class HttpSettings:
    """``plugin_timeout`` (seconds per request, default 15) and ``proxy`` of the tools that call services."""

    timeout: float = DEFAULT_TIMEOUT
    proxy: str | None = None

    @classmethod
    def from_config(cls, settings: Mapping[str, Any]) -> "HttpSettings":
        timeout = float(get_typed(settings, "plugin_timeout", DEFAULT_TIMEOUT))
        return cls(timeout=timeout if timeout > 0 else DEFAULT_TIMEOUT, proxy=get_typed(settings, "proxy", None))

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
    return values


_QUERY = re.compile(r"\?[^\s'\")\]]*")
_USERINFO = re.compile(r"(\w+://)[^/\s@]+@")


def scrub(text: Any, secrets: Iterable[str] | Redactor = ()) -> str:
    """``text`` with secret values (in every spelling), query strings and URL credentials removed."""
    redactor = secrets if isinstance(secrets, Redactor) else Redactor(secrets)
    result = _QUERY.sub("?…", redactor.redact(str(text)))
    return _USERINFO.sub(r"\1***@", result)


class _RequestFilter(logging.Filter):
    """Hides one request's keys in urllib3's DEBUG lines (they show each request's URL with its query)."""

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return True
        redacted = self.redactor.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


@contextlib.contextmanager
def hidden_in_urllib3_logs(redactor: Redactor) -> Iterator[None]:
    """While a request with keys in its URL is sent, and only when urllib3's DEBUG log is on (someone turned
    it on), that logger carries a filter hiding this request's keys; it is removed when the request is sent."""
    logger = logging.getLogger("urllib3.connectionpool")
    if not redactor or not logger.isEnabledFor(logging.DEBUG):
        yield
        return
    guard = _RequestFilter(redactor)
    logger.addFilter(guard)
    try:
        yield
    finally:
        logger.removeFilter(guard)


def _connection_reason(err: Exception, secrets: Redactor) -> str:
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


def _decode(body: bytes, header: str) -> str:
    """The body in its declared charset when that is a text codec (``textutil.TEXT_CODECS``), else UTF-8."""
    return decode_text(body, content_type(header)[1])


def _error_detail(text: str, secrets: Redactor) -> str:
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


@dataclass
class RawResponse:
    status: int
    content: bytes
    content_type: str

    @property
    def text(self) -> str:
        return _decode(self.content, self.content_type)


def request(method: str, url: str, *, params: Mapping[str, Any] | None = None, data: bytes | str | None = None,
            json_body: Any = None, headers: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
            proxy: str | None = None, secrets: Iterable[Any] = (), key_names: str = "the key settings",
            hints: Mapping[int, str] | None = None, allow_status: Iterable[int] = (),
            max_bytes: int = MAX_BYTES) -> RawResponse:
    """Send one request (a body as ``data`` or ``json_body``) and return the raw answer; every failure
    raises ``ToolExecutionError`` (see the module).

    Statuses in ``allow_status`` are returned instead of raised (e.g. Wolfram's
    501 "could not interpret"). ``key_names`` names the settings a 401/403 hint
    points to; ``hints`` replaces the hint of a status.
    """
    import requests  # local import: keeps ``import chatgpt_tool_hub`` light

    secrets_seen = Redactor(_secret_values(params, headers, secrets))
    host = host_of(url)
    sent_headers = {"User-Agent": USER_AGENT}
    sent_headers.update(headers or {})
    proxies = {"http": proxy, "https": proxy} if proxy else None
    timeout = float(timeout)
    started = time.monotonic()

    def fail(reason: str) -> ToolExecutionError:
        return ToolExecutionError(f"could not reach {host}: {reason}")

    try:
        with hidden_in_urllib3_logs(secrets_seen):
            response = requests.request(method, url, params=dict(params or {}), data=data, json=json_body,
                                        headers=sent_headers, proxies=proxies, timeout=timeout, stream=True,
                                        allow_redirects=True)
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
        raise fail("TLS/SSL error: " + scrub(err, secrets_seen)[:200]) from None
    except requests.exceptions.ConnectionError as err:
        raise fail(_connection_reason(err, secrets_seen)) from None
    except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
            requests.exceptions.InvalidURL) as err:
        raise ToolExecutionError(f"the URL configured for {host} is invalid: "
                                 + scrub(err, secrets_seen)[:200]) from None
    except requests.exceptions.TooManyRedirects:
        raise fail("too many redirects") from None
    except requests.exceptions.RequestException as err:
        raise fail(f"{type(err).__name__}: " + scrub(err, secrets_seen)[:200]) from None

    raw = RawResponse(status=response.status_code, content=body, content_type=response.headers.get("Content-Type", ""))
    log.debug("%s %s%s -> %s (%d bytes, %.2f s)", method, host, urlsplit(url).path, raw.status, len(body),
              time.monotonic() - started)
    if not 200 <= raw.status < 300 and raw.status not in set(allow_status):
        reason = f" ({response.reason})" if response.reason else ""
        hint = (hints or {}).get(raw.status) or _STATUS_HINTS.get(raw.status, "")
        hint = f"; {hint.format(keys=key_names)}" if hint else ""
        detail = _error_detail(raw.text, secrets_seen)
        raise ToolExecutionError(f"{host} answered HTTP {raw.status}{reason}{hint}"
                                 + (f": {detail}" if detail else ""))
    return raw


def fetch(url: str, params: Mapping[str, Any] | None = None, *, timeout: float = DEFAULT_TIMEOUT,
          proxy: str | None = None, headers: Mapping[str, str] | None = None, secrets: Iterable[Any] = (),
          allow_status: Iterable[int] = (), key_names: str = "the key settings",
          hints: Mapping[int, str] | None = None, max_bytes: int = MAX_BYTES) -> HttpResponse:
    """GET ``url`` and return status and decoded text; failures raise ``ToolExecutionError`` (options as
    :func:`request`)."""
    sent_headers = {"Accept": "application/json, application/xml;q=0.9, */*;q=0.5"}
    sent_headers.update(headers or {})
    raw = request("GET", url, params=params, headers=sent_headers, timeout=timeout, proxy=proxy, secrets=secrets,
                  key_names=key_names, hints=hints, allow_status=allow_status, max_bytes=max_bytes)
    clean_url = scrub(url.split("?", 1)[0], Redactor(_secret_values(params, headers, secrets)))
    return HttpResponse(status=raw.status, text=raw.text, content_type=raw.content_type, url=clean_url)


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


def json_object(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one: a service's answer may give any field any shape."""
    return value if isinstance(value, Mapping) else {}


def json_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


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
