"""HTTP requests with a body (POST of audio, SSML, forms) for plugin tools, failing the way ``_http`` does.

:func:`send` is :func:`._http.fetch` for requests that carry a body and answers
that are bytes (a WAV file): the same timeout, ``proxy`` and size cap, the
same clear ``ToolExecutionError`` for every network failure and non-2xx
answer, and the same rule that keys never appear in a message or a log line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from ...errors import ToolExecutionError
from ...redact import Redactor
from ._http import (DEFAULT_TIMEOUT, MAX_BYTES, USER_AGENT, _STATUS_HINTS, _connection_reason, _decode,
                    _error_detail, _secret_values, hidden_in_urllib3_logs, host_of, scrub)

__all__ = ["RawResponse", "send"]

log = logging.getLogger("chatgpt_tool_hub.tools.plugins")


@dataclass
class RawResponse:
    status: int
    content: bytes
    content_type: str

    @property
    def text(self) -> str:
        return _decode(self.content, self.content_type)


def send(method: str, url: str, *, params: Mapping[str, Any] | None = None, data: bytes | str | None = None,
         json_body: Any = None, headers: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
         proxy: str | None = None, secrets: Iterable[Any] = (), key_names: str = "the key settings",
         hints: Mapping[int, str] | None = None, allow_status: Iterable[int] = (),
         max_bytes: int = MAX_BYTES) -> RawResponse:
    """Send one request and return the raw answer; failures raise ``ToolExecutionError`` (see the module)."""
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
    except requests.exceptions.RequestException as err:
        raise fail(f"{type(err).__name__}: " + scrub(err, secrets_seen)[:200]) from None

    content_type = response.headers.get("Content-Type", "")
    status = response.status_code
    log.debug("%s %s%s -> %s (%d bytes, %.2f s)", method, host, urlsplit(url).path, status, len(body),
              time.monotonic() - started)
    if not 200 <= status < 300 and status not in set(allow_status):
        reason = f" ({response.reason})" if response.reason else ""
        hint = (hints or {}).get(status) or _STATUS_HINTS.get(status, "")
        hint = f"; {hint.format(keys=key_names)}" if hint else ""
        detail = _error_detail(_decode(body, content_type), secrets_seen)
        raise ToolExecutionError(f"{host} answered HTTP {status}{reason}{hint}" + (f": {detail}" if detail else ""))
    return RawResponse(status=status, content=body, content_type=content_type)
