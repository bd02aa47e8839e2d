"""Requests through the SSRF guard, and reading documents (JSON, or YAML through libyaml when present).

A YAML alias (``*name``) stands for the whole node its anchor marks, and the
code that turns a document into tools walks it as a tree: ten aliases of ten
aliases of ... make a document of under 1 KB a tree of a billion nodes. A YAML
document is therefore counted as a tree once it is composed, before anything
is built from it: past ``MAX_YAML_NODES`` nodes (each alias counted as the
nodes it stands for), or with an alias inside the node it refers to, it is
refused with a ``ConfigError``. The count is linear in the document's size.
"""

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
MAX_YAML_NODES = 1_000_000  # nodes of one YAML document as a tree, aliases expanded
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


class YAMLTooLarge(Exception):
    """A composed YAML document that is too large as a tree (aliases expanded), or recursive; the message says why."""


def _split(node: Any) -> tuple[list, int]:
    """(the collections directly under a composed YAML collection node, how many scalars are directly under
    it); a mapping's keys count as well as its values."""
    value = node.value
    parts = [part for pair in value for part in pair] if value and isinstance(value[0], tuple) else value
    collections = [part for part in parts if isinstance(part.value, list)]
    return collections, len(parts) - len(collections)


def tree_size(root: Any, limit: int = MAX_YAML_NODES) -> int:
    """The nodes of a composed YAML document as a tree: an alias counts as every node under its anchor.

    Each distinct node is visited once (sizes are remembered), so the count is linear in the document,
    however far its aliases expand it. ``YAMLTooLarge`` past ``limit``, or when an alias sits inside the
    node it refers to (a tree without end)."""
    if not isinstance(root.value, list):
        return 1
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the collection being counted and those above it
    stack: list[tuple[Any, Any]] = [(root, None)]  # (node, None) to open, (node, (collections, scalars)) to close
    while stack:
        node, split = stack.pop()
        key = id(node)
        if split is not None:
            open_nodes.discard(key)
            size = 1 + split[1] + sum(sizes[id(child)] for child in split[0])
            if size > limit:
                raise YAMLTooLarge(f"read as a tree, each alias counted as the nodes it stands for, it has more than "
                                   f"{limit:,} nodes, the limit for one YAML document; write repeated parts "
                                   f"out or refer to them with $ref")
            sizes[key] = size
        elif key not in sizes:
            if key in open_nodes:
                raise YAMLTooLarge("an alias refers to a node that contains it, so the document has no end "
                                   "as a tree")
            open_nodes.add(key)
            split = _split(node)
            stack.append((node, split))
            stack.extend((child, None) for child in split[0] if id(child) not in sizes)
    return sizes[id(root)]


def yaml_loader() -> Any:
    """PyYAML's C ``CSafeLoader`` (libyaml) when PyYAML was built with it, else the pure-Python
    ``SafeLoader``; dates and times stay strings, as JSON has them; a document past ``MAX_YAML_NODES``
    as a tree (aliases expanded) raises ``YAMLTooLarge`` before anything is built from it."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
            def get_single_node(self) -> Any:
                node = super().get_single_node()
                if node is not None:
                    tree_size(node)
                return node

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
        except YAMLTooLarge as exc:
            raise bad(label, str(exc)) from None
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
