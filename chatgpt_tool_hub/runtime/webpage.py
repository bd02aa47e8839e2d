"""Read a web page through the SSRF guard and turn it into text: what every tool that reads the web shares.

* :func:`fetch_page` GETs an http(s) URL through :mod:`.netguard`: every hop
  is checked and pinned (at most 5 redirects, followed by hand), the body is
  streamed and reading stops at ``max_bytes``, and the whole fetch (redirects,
  headers, body) ends after 4 x ``timeout``, however slowly the server drips
  its answer. The body of a declared binary type is not downloaded unless
  ``any_type`` asks for it (a PDF for the document tools). With an allow-list
  (``url_get_allowed_hosts``), a host that is not on it -- the first URL's or
  a redirect's -- is refused before it is resolved.
* :func:`page_text` decodes a page by its content type (declared charset,
  ``<meta charset>``, UTF-8 or a guess; only allowed text codecs): HTML becomes
  title + text (:func:`html_to_text`), JSON is pretty-printed, text stays text.
* :func:`render_page` is the readable form the ``url-get`` observation and the
  ``summary`` tool's input share (``URL:``, ``Title:``, the text, ``[note: ...]``);
  :func:`read_page` fetches and renders in one call, raising on what is not a
  readable page (a refusal, a network failure, an HTTP error, binary content).

The limits are a :class:`FetchLimits`, read from the ``url_get_*`` settings and
``proxy`` by :meth:`FetchLimits.from_settings`. Failures raise
:class:`FetchError`, :class:`~.urlcheck.BlockedURLError` or
:class:`~.urlcheck.HostResolutionError`, each with a message meant for the model.
``requests`` (through :mod:`.netguard`) is imported by the first fetch, not with this module.
"""

from __future__ import annotations

import fnmatch
import html as html_lib
import json
import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urljoin, urlsplit

from ..errors import ConfigError, ToolHubError
from ..textutil import clip_text, content_type, decode_text, strip_control, text_codec
from .urlcheck import BlockedURLError, CheckedURL, check_url

if TYPE_CHECKING:  # the fetching functions import requests (through .netguard) when they run
    import requests

    from .netguard import PinnedSession

__all__ = ["FetchError", "FetchLimits", "Page", "fetch_page", "read_page", "render_page", "page_text",
           "html_to_text", "is_binary_type", "sniff_binary", "MAX_REDIRECTS", "HEADERS", "parse_host_patterns",
           "host_allowed", "origin_of"]

MAX_REDIRECTS = 5
REDIRECT_CODES = (301, 302, 303, 307, 308)
CHUNK_BYTES = 64 * 1024
HEADERS = {
    "User-Agent": "Mozilla/5.0 (compatible; chatgpt-tool-hub url-get)",
    "Accept": "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5",
    "Accept-Encoding": "gzip, deflate",  # codecs whose streaming decoders urllib3 bounds
}
_TEXT_TYPE = re.compile(r"text/.*|.*\+(json|xml)|application/(json|xml|(x-)?javascript|ecmascript|(x-)?yaml|toml|csv"
                        r"|sql|x-ndjson)")
_SNIFF_TYPES = ("", "application/octet-stream", "binary/octet-stream", "application/unknown")
_MAGIC = {b"\x89PNG": "PNG image", b"GIF8": "GIF image", b"\xff\xd8\xff": "JPEG image", b"%PDF": "PDF document",
          b"PK\x03\x04": "ZIP archive", b"\x1f\x8b": "gzip archive", b"RIFF": "RIFF media", b"\x7fELF": "executable"}
_DROP = re.compile(r"<(script|style|noscript|template|svg|iframe|object)\b[^>]*(?:>.*?(?:</\1\s*>|$)|$)"
                   r"|<!--.*?(?:-->|$)|<!\[.*?(?:\]>|$)", re.S | re.I)  # unclosed: to the end (linear time)
_UNCLOSED = re.compile(r"<(?=[^<>]*(?:<|\Z))")  # a "<" whose tag never closes: html.parser is quadratic there
_SKIP_TAGS = {"script", "style", "noscript", "template", "svg", "iframe", "object", "title", "canvas", "select"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCK_TAGS = {"p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "ul", "ol", "dl", "dt",
               "dd", "table", "tr", "form", "figure", "figcaption", "address", "blockquote", "pre", "hr", "br",
               "details", "summary", "caption", "fieldset", "body"}
_TITLE_START, _TITLE_END = re.compile(r"<title\b[^>]*>", re.I), re.compile(r"</title", re.I)


class FetchError(ToolHubError):
    """A fetch failed; the message is the observation."""


@dataclass(frozen=True)
class FetchLimits:
    """What a fetch may do: reach private addresses, read ``max_bytes``, wait ``timeout`` s per connect and read,
    reach only the hosts ``allowed_hosts`` names (host names or addresses, ``*.example.test`` wildcards;
    empty: any host the address check lets through)."""

    allow_private: bool = False
    max_bytes: int = 2_000_000
    timeout: float = 15.0
    proxy: str | None = None
    allowed_hosts: tuple[str, ...] = ()

    @property
    def total_timeout(self) -> float:
        """Seconds a whole fetch (all redirects, headers and body) may take: 4 x ``timeout``."""
        return 4 * self.timeout

    @classmethod
    def from_settings(cls, settings: Any, proxy: str | None = None) -> "FetchLimits":
        """The ``url_get_allow_private``, ``url_get_max_bytes``, ``url_get_timeout`` and
        ``url_get_allowed_hosts`` settings (a typed
        settings view: ``settings.get(key, default)``) and ``proxy``; a value <= 0 is a ``ConfigError``."""
        limits = cls(allow_private=bool(settings.get("url_get_allow_private", False)),
                     max_bytes=int(settings.get("url_get_max_bytes", 2_000_000)),
                     timeout=float(settings.get("url_get_timeout", 15.0)), proxy=proxy or None,
                     allowed_hosts=parse_host_patterns(settings.get("url_get_allowed_hosts", None)))
        for key, value in (("url_get_max_bytes", limits.max_bytes), ("url_get_timeout", limits.timeout)):
            if value <= 0:
                raise ConfigError(f"setting '{key}' must be > 0", key=key)
        return limits


@dataclass
class Page:
    """A fetched page: where it ended up, its status and type, the body read (or why not), notes on the read."""

    url: str
    status: int
    reason: str
    content_type: str
    charset: str | None
    body: bytes = b""
    size: int | None = None           # bytes known to exist (Content-Length or bytes read)
    truncated: bool = False
    binary: str | None = None         # what the binary content is, when it is binary
    redirects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- fetching ----------------------------------------------------------------------------------


def fetch_page(url: str, limits: FetchLimits, *, any_type: bool = False) -> Page:
    """GET ``url`` following at most 5 checked redirects; raise on refusal or network failure.

    With ``any_type`` the body of every content type is read (and never sniffed);
    otherwise a declared binary type is described by its headers, not downloaded.
    """
    from .netguard import pinned_session  # imports requests: only a fetch needs it

    session = pinned_session(proxy=limits.proxy)
    redirects: list[str] = []
    try:
        # per-read timeouts cannot stop a server that drips a byte at a time: bound the whole fetch
        with session.deadline(limits.total_timeout):
            current = url
            for _ in range(MAX_REDIRECTS + 1):
                _check_allowed(current, limits.allowed_hosts)
                checked = session.pin(check_url(current, limits.allow_private))
                _check_allowed(checked.url, limits.allowed_hosts)
                response = _request(session, checked, limits)
                location = response.headers.get("Location") if response.status_code in REDIRECT_CODES else None
                if not location:
                    page = _read(response, checked, session, limits, any_type)
                    page.redirects = redirects
                    return page
                response.close()
                redirects.append(checked.url)
                current = urljoin(checked.url, location.strip())
        raise FetchError(f"too many redirects: {url} redirected more than {MAX_REDIRECTS} times "
                         f"(stopped before {current})")
    finally:
        session.close()


# ---- the host allow-list -----------------------------------------------------------------------


def parse_host_patterns(value: Any) -> tuple[str, ...]:
    """An allow-list setting (a comma-separated string or a list) as lower-case patterns; a pattern that
    is not a host name, an address or a ``*.`` wildcard is a ``ConfigError``."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise ConfigError("setting 'url_get_allowed_hosts' must be host names separated by commas",
                          key="url_get_allowed_hosts")
    patterns = tuple(str(p).strip().lower().rstrip(".").strip("[]") for p in items if str(p).strip())
    for pattern in patterns:
        if not re.fullmatch(r"(\*\.)?[a-z0-9_*-]+(\.[a-z0-9_*-]+)*|[0-9a-f:.]+", pattern):
            raise ConfigError(f"setting 'url_get_allowed_hosts': {pattern[:80]!r} is not a host name, an address or "
                              f"a wildcard such as *.example.test", key="url_get_allowed_hosts")
    return patterns


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``host`` matches one of ``patterns`` (none: every host); ``*.example.test`` matches the names
    below example.test, not example.test itself."""
    if not patterns:
        return True
    name = host.lower().rstrip(".").strip("[]")
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def origin_of(url: str) -> str | None:
    """``host:port`` of an http(s) URL (the default port of its scheme when none is given), else None."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except (ValueError, AttributeError):
        return None
    scheme = (parts.scheme or "").lower()
    if not host or scheme not in ("http", "https"):
        return None
    host = host.lower().rstrip(".")
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port or (443 if scheme == 'https' else 80)}"


def _check_allowed(url: str, patterns: tuple[str, ...]) -> None:
    if not patterns:
        return
    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        host = ""
    if not host or not host_allowed(host, patterns):
        raise BlockedURLError(f"refused to fetch {host or url[:80]}: it is not among the hosts this app may fetch "
                              f"(url_get_allowed_hosts: {', '.join(patterns)})")


def _request(session: PinnedSession, checked: CheckedURL, limits: FetchLimits) -> requests.Response:
    import requests

    from .netguard import DeadlineExceeded, describe_network_error

    try:
        response = session.get(checked.url, headers=HEADERS, stream=True, allow_redirects=False,
                               timeout=(limits.timeout, limits.timeout))
    except requests.RequestException as exc:
        error = DeadlineExceeded(limits.total_timeout) if session.aborted else exc
        raise FetchError(describe_network_error(error, checked.host, limits.timeout)) from None
    if session.aborted:  # the headers "ended" only because the deadline cut the connection
        response.close()
        raise FetchError(describe_network_error(DeadlineExceeded(limits.total_timeout), checked.host, limits.timeout))
    return response


def _read(response: requests.Response, checked: CheckedURL, session: PinnedSession, limits: FetchLimits,
          any_type: bool) -> Page:
    ctype, charset = content_type(response.headers.get("Content-Type", ""))
    page = Page(response.url or checked.url, response.status_code, response.reason or "", ctype, charset)
    length_header = response.headers.get("Content-Length", "").strip()
    length = int(length_header) if length_header.isdigit() else None
    try:
        if not any_type and is_binary_type(ctype) and response.status_code < 400:
            page.binary, page.size = ctype, length
            return page
        _stream_body(response, page, checked.host, session, limits)
    finally:
        response.close()
    if any_type:
        return page
    if ctype in _SNIFF_TYPES:
        page.binary = sniff_binary(page.body, ctype)
    if page.truncated and length:
        page.size = max(length, page.size or 0)
    return page


def _stream_body(response: requests.Response, page: Page, host: str, session: PinnedSession,
                 limits: FetchLimits) -> None:
    import requests

    from .netguard import DeadlineExceeded, describe_network_error

    chunks: list[bytes] = []
    total = 0
    deadline = time.monotonic() + limits.total_timeout
    slow = f"the download took longer than {limits.total_timeout:g} s; stopped early"
    try:
        for chunk in response.iter_content(CHUNK_BYTES):
            chunks.append(chunk)
            total += len(chunk)
            if total > limits.max_bytes:
                page.truncated = True
                page.notes.append(f"the body is larger than {limits.max_bytes} bytes; only the first "
                                  f"{limits.max_bytes} bytes were read")
                break
            if time.monotonic() > deadline:
                page.truncated = True
                page.notes.append(slow)
                break
    except requests.RequestException as exc:
        error: BaseException = DeadlineExceeded(limits.total_timeout) if session.aborted else exc
        if not chunks:
            raise FetchError(describe_network_error(error, host, limits.timeout)) from None
        page.truncated = True
        page.notes.append(f"the download broke off ({describe_network_error(error, host, limits.timeout)})")
    else:
        if session.aborted and not page.truncated:  # cut at the deadline, seen as a normal end
            page.truncated = True
            page.notes.append(slow)
    page.body = b"".join(chunks)[: limits.max_bytes]
    page.size = total


# ---- the text of a page ------------------------------------------------------------------------


def page_text(page: Page, links: bool = False) -> tuple[str, str]:
    """(title, text) of a non-binary page by its content type."""
    ctype = page.content_type
    text = decode_text(page.body, page.charset, html="html" in ctype or ctype in _SNIFF_TYPES, guess=True)
    looks_html = ctype in ("text/html", "application/xhtml+xml") or (
        ctype in _SNIFF_TYPES and re.match(r"\s*<(!doctype html|html)", text[:200], re.I))
    if looks_html:
        return html_to_text(text, links)
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            return "", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return "", text
    return "", text


def render_page(page: Page, links: bool = False, fit: Callable[[str, list[str]], str] | None = None) -> str:
    """The readable form of a fetched text page: ``URL:``, ``Redirected from:``, ``Title:``, the text, notes.

    ``fit(text, notes)`` may shorten the text (url-get's summary) and add notes.
    HTTP errors and binary content are the caller's to describe.
    """
    head = [f"URL: {page.url}"] + ([f"Redirected from: {page.redirects[0]}"] if page.redirects else [])
    title, text = page_text(page, links)
    if title:
        head.append(f"Title: {title}")
    notes = list(page.notes)
    if page.charset and not text_codec(page.charset):
        notes.append(f"the declared charset {page.charset[:40]!r} is not a text encoding url-get decodes; "
                     "the page was read as UTF-8 (or its own <meta> charset, or a guess)")
    text = strip_control(text).strip()
    if fit is not None:
        text = fit(text, notes)
    tail = "".join(f"\n[note: {n}]" for n in notes)
    return "\n".join(head) + "\n\n" + (text or "(the page has no text)") + tail


def read_page(url: str, limits: FetchLimits, *, links: bool = False, max_chars: int = 8000) -> str:
    """:func:`render_page` of ``url``, cleaned and cut to ``max_chars`` (head and tail kept).

    Raises :class:`FetchError` for an HTTP error status and for binary content,
    besides the refusals and network failures of :func:`fetch_page`.
    """
    page = fetch_page(url, limits)
    if page.status >= 400:
        raise FetchError(f"HTTP {page.status} {page.reason}")
    if page.binary:
        raise FetchError(f"it is binary content ({page.binary}), not a text page")
    return clip_text(strip_control(render_page(page, links)), max_chars)


def is_binary_type(ctype: str) -> bool:
    """Whether a media type is declared binary (not text, and not one that says nothing and is sniffed)."""
    return not (ctype in _SNIFF_TYPES or _TEXT_TYPE.fullmatch(ctype))


def sniff_binary(body: bytes, ctype: str) -> str | None:
    """What ``body`` is when its first bytes show it is binary (magic numbers, a NUL byte), else ``None``."""
    head = body[:1024]
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            return what
    if b"\x00" in head:
        return ctype or "binary data"
    return None


# ---- HTML -> text ------------------------------------------------------------------------------


def html_to_text(html: str, include_links: bool = False) -> tuple[str, str]:
    """(title, readable text) of an HTML page; scripts, styles and comments are dropped.

    Linear in the input (stdlib parser, no indentation by nesting depth):
    headings become ``# ``, list items ``- ``, links ``[text](href)`` when kept.
    """
    parser = _HTMLText(include_links)
    try:
        parser.feed(_UNCLOSED.sub("&lt;", _DROP.sub(" ", html)))
        parser.close()
        text = "".join(parser.out)
    except Exception:  # a parser failure: fall back to stripping tags
        text = html_lib.unescape(re.sub(r"<[^>]*>", " ", _DROP.sub(" ", html)))
    text = re.sub(r"(?m)^ (?! )|[ \t]+$|^[ \t]*\|[ \t]*", "", text)
    return _title(html), re.sub(r"\n{3,}", "\n\n", text).strip()


class _HTMLText(HTMLParser):
    def __init__(self, links: bool):
        super().__init__(convert_charrefs=True)
        self.links, self.skip, self.pre = links, 0, 0
        self.out: list[str] = []
        self.hrefs: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _SKIP_TAGS:
            self.skip += 1
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in _HEADINGS:
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag in _BLOCK_TAGS:
            self.out.append("\n\n" if tag == "p" else "\n")
        self.pre += tag == "pre"
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") if self.links else None)
            self.out.append("[" if self.hrefs[-1] else "")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag == "a" and self.hrefs:
            href = self.hrefs.pop()
            self.out.append(f"]({href})" if href else "")
        elif tag in _HEADINGS or tag == "p":
            self.out.append("\n\n")
        elif tag in _BLOCK_TAGS:
            self.out.append("\n")
        self.pre = max(0, self.pre - (tag == "pre"))

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.out.append(data if self.pre else re.sub(r"\s+", " ", data))


def _title(html: str) -> str:
    start = _TITLE_START.search(html, 0, 200_000)
    if not start:
        return ""
    end = _TITLE_END.search(html, start.end(), start.end() + 2000)
    raw = html[start.end(): end.start() if end else start.end() + 300]
    return " ".join(html_lib.unescape(re.sub(r"<[^>]*>", "", raw)).split())
