"""Requests through the SSRF guard, and reading documents (JSON, or YAML through libyaml when present)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

from ....runtime.netguard import BlockedURLError, DeadlineExceeded, check_url, describe_network_error, pinned_session
from ....textutil import decode_text
from ._common import bad, object_at

MAX_DOC_BYTES = 5 * 1024 * 1024
TOTAL_TIMEOUTS = 4  # a whole exchange may take this many times the per-read timeout
_HTTP = re.compile(r"^https?://", flags=re.I)


class Reply(NamedTuple):
    status: int
    reason: str
    content_type: str
    text: str
    truncated: bool
    url: str


def is_http(text: str) -> bool:
    return bool(_HTTP.match(text))


def safe_url(url: str) -> str:
    """The URL without credentials, query or fragment: safe for messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}{parts.path}"


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port


def send(method: str, url: str, *, timeout: float, proxy: str | None, allow_private: Any, limit: int,
         auth: Any = None, auth_origin: str | None = None, **kwargs: Any) -> Reply:
    """One request to checked, pinned addresses (``_netguard``); GET/HEAD follow up to 5
    redirects, each hop re-checked. Auth goes only to ``auth_origin``. The whole
    exchange ends after ``TOTAL_TIMEOUTS * timeout``. Raises ``BlockedURLError`` /
    ``HostResolutionError`` or a ``requests`` error (``DeadlineExceeded`` included)."""
    session = pinned_session(proxy=proxy)
    try:
        with session.deadline(TOTAL_TIMEOUTS * timeout):  # a dripping server cannot hold the call longer
            for _ in range(6):
                checked = session.pin(check_url(url, allow_private=allow_private))
                same = auth is not None and auth_origin is not None and origin(url) == origin(auth_origin)
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
                    raise DeadlineExceeded(TOTAL_TIMEOUTS * timeout)
                return Reply(resp.status_code, resp.reason or "", resp.headers.get("Content-Type") or "",
                             decode_text(bytes(data[:limit]), resp.encoding), truncated, url)
        raise BlockedURLError("refused: more than 5 redirects")
    finally:
        session.close()


# ---- parsing ----------------------------------------------------------------------------------------

_LOADER: Any = None


def yaml_loader() -> Any:
    """PyYAML's C ``CSafeLoader`` (libyaml) when PyYAML was built with it, else the pure-Python
    ``SafeLoader``; dates and times stay strings, as JSON has them."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
            pass

        Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
        _LOADER = Loader
    return _LOADER


def parse(text: str, label: str) -> dict:
    """A JSON or YAML document as a dict; ``ConfigError`` naming ``label`` when it is neither."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise bad(label, "the document is nested too deeply to read") from None
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise bad(label, "YAML documents need PyYAML (pip install pyyaml)") from None
        try:
            doc = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
        except yaml.YAMLError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise bad(label, f"not valid JSON or YAML ({first})") from None
        except (RecursionError, ValueError, TypeError) as exc:  # absurd nesting, odd scalars
            raise bad(label, f"not a readable YAML document ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise bad(label, "the document is not a JSON/YAML object")
    return doc


def read_file(path: str, label: str) -> dict:
    """A local JSON/YAML file (at most ``MAX_DOC_BYTES``) as a dict."""
    try:
        if os.path.getsize(path) > MAX_DOC_BYTES:
            raise bad(label, f"larger than {MAX_DOC_BYTES // (1024 * 1024)} MB, the limit for one document")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise bad(label, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise bad(label, "is not UTF-8 text") from None
    return parse(text, label)


def load(source: Any, net: dict[str, Any]) -> tuple[dict, str | None, str]:
    """(document, location for relative references, label for messages)."""
    if isinstance(source, Mapping):
        return dict(source), None, "<dict>"
    if not isinstance(source, (str, os.PathLike)) or not str(source).strip():
        raise bad(repr(source)[:60], "an OpenAPI source must be a path, an http(s) URL or a dict")
    text = str(source).strip()
    if is_http(text):
        label = safe_url(text)
        try:
            reply = send("GET", text, headers={"Accept": "application/json, application/yaml, */*"},
                         limit=MAX_DOC_BYTES, **net)
        except BlockedURLError as exc:
            raise bad(label, f"{exc} To load it, set the entry's allow_private (true, or a list of host "
                             f"names and CIDRs).") from None
        except Exception as exc:  # requests' messages may carry the query: describe, never echo the URL
            reason = describe_network_error(exc, urlsplit(text).hostname or "?", net["timeout"])
            raise bad(label, f"could not be fetched ({reason})") from None
        if reply.status != 200:
            raise bad(label, f"HTTP {reply.status}")
        if reply.truncated:
            raise bad(label, f"larger than {MAX_DOC_BYTES // (1024 * 1024)} MB, the limit for one document")
        return parse(reply.text, label), reply.url, label
    path = os.path.abspath(os.path.expanduser(text))
    return read_file(path, text), path, text


def join(location: str | None, ref: str, label: str, what: str) -> str:
    """``ref`` (a URL or a relative reference) against the document's location."""
    if is_http(ref):
        return ref
    if location is None:
        raise bad(label, f"{what} {ref[:200]!r} is relative and the document has no location; "
                         "pass base_url or an absolute URL")
    if is_http(location):
        joined = urljoin(location, ref)
        if not is_http(joined):  # "file:...", "x:/../..": never a local file
            raise bad(label, f"{what} {ref[:200]!r} is not an http(s) URL; a document fetched from the web "
                             "can only point to http(s) URLs")
        return joined
    if ref.startswith("/"):
        raise bad(label, f"{what} {ref[:200]!r} is relative to a web server; pass base_url")
    return os.path.join(os.path.dirname(location), ref)


def server_url(servers: Any, location: str | None, label: str) -> str:
    """The first usable server of a ``servers`` list (variables take their defaults): one that is, or
    resolves against the document's URL to, an http(s) URL. ``ConfigError`` when none is."""
    entries = [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) and servers else []
    if not entries and not (location and is_http(location)):
        raise bad(label, "the document names no server URL ('servers'); pass base_url")
    entries = entries or [{"url": "/"}]  # the spec's default: the host that serves the document
    problem = None
    for entry in entries:
        url = str(entry.get("url") or "/")
        variables = object_at(entry, "variables")
        for name, var in variables.items():
            default = var.get("default", "") if isinstance(var, dict) else ""
            url = url.replace("{" + str(name) + "}", str(default))
        try:
            url = join(location, url, label, "the server URL")
        except Exception as exc:  # a ConfigError: try the next server
            problem = problem or exc
            continue
        if is_http(url) and "{" not in url:
            return url.rstrip("/")
    if problem is not None and len(entries) == 1:
        raise problem
    raise bad(label, "no server URL is an absolute http(s) URL; pass base_url")
