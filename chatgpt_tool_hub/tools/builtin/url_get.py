"""The ``url-get`` tool: fetch a public web page and return its readable text.

Safety (see ``_netguard``): http(s) only, no credentials in URLs, every
resolved address of the host must be public (unless ``url_get_allow_private``),
the connection goes to the address that was checked (no DNS rebinding),
redirects are followed by hand (at most 5) and each hop is checked again.
The body is streamed and reading stops at ``url_get_max_bytes``; the whole
fetch (redirects, headers, body) ends after 4 x ``url_get_timeout``, however
slowly the server drips its answer.

Output: HTML becomes title + text (scripts and styles dropped), JSON is
pretty-printed, text stays text, binary content is described, not returned.
Longer than ``url_get_max_chars``: head and tail are kept, or, with
``url_get_use_summary``, an LLM summarises it (:func:`chatgpt_tool_hub.llm.summarize.summarize`,
the map-reduce the ``summary`` tool runs too).
Every failure is returned as an observation, never raised.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import requests

from ...errors import ConfigError, ToolHubError
from ...llm.summarize import summarize
from ...runtime.netguard import (
    BlockedURLError,
    CheckedURL,
    DeadlineExceeded,
    HostResolutionError,
    PinnedSession,
    check_url,
    describe_network_error,
    pinned_session,
)
from ...textutil import clip_text, content_type, decode_text, strip_control, text_codec
from ..base import DEFAULT_CONTEXT, Tool, ToolContext, ToolFailure
from ..context import AppContext, pure_context

__all__ = ["UrlGetTool", "html_to_text", "clean_text", "clip_text"]

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


@dataclass
class Page:
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


class UrlGetTool(Tool):
    """Fetch a public http(s) URL and return readable text (see the module docstring)."""

    name = "url-get"
    description = (
        "Fetch a web page or API URL (http/https) and return its readable text: title and text for HTML, "
        "pretty-printed JSON, plain text. Input: the URL, e.g. https://example.com/page. "
        "Only public addresses can be fetched."
    )
    parameters = None
    needs_context = True

    def __init__(self, *, allow_private: bool = False, max_bytes: int = 2_000_000, timeout: float = 15.0,
                 max_chars: int = 8000, use_summary: bool = False, include_links: bool = False,
                 summary_max_segment_length: int = 2500, summary_max_segments: int = 8,
                 proxy: str | None = None, app: AppContext | None = None):
        for key, value in (("url_get_max_bytes", max_bytes), ("url_get_timeout", timeout),
                           ("url_get_max_chars", max_chars), ("summary_max_segment_length", summary_max_segment_length),
                           ("url_get_summary_max_segments", summary_max_segments)):
            if value <= 0:
                raise ConfigError(f"setting '{key}' must be > 0", key=key)
        self.allow_private = bool(allow_private)
        self.max_bytes = int(max_bytes)
        self.timeout = float(timeout)
        self.max_chars = int(max_chars)
        self.use_summary = bool(use_summary)
        self.include_links = bool(include_links)
        self.segment_tokens = int(summary_max_segment_length)
        self.max_segments = int(summary_max_segments)
        self.proxy = proxy or None
        self.app = app  # outside an engine, the summary LLM is built by the app (pure mode: from the keywords)
        self._llm: Any = None

    @classmethod
    def from_context(cls, context: AppContext) -> "UrlGetTool":
        settings = context.settings
        return cls(
            allow_private=settings.get("url_get_allow_private", False),
            max_bytes=settings.get("url_get_max_bytes", 2_000_000),
            timeout=settings.get("url_get_timeout", 15.0),
            max_chars=settings.get("url_get_max_chars", 8000),
            use_summary=settings.get("url_get_use_summary", False),
            include_links=settings.get("url_get_include_links", False),
            summary_max_segment_length=settings.get("summary_max_segment_length", 2500),
            summary_max_segments=settings.get("url_get_summary_max_segments", 8),
            proxy=context.http.proxy,
            app=context,
        )

    def __repr__(self) -> str:
        return f"<UrlGetTool allow_private={self.allow_private} max_bytes={self.max_bytes}>"

    # ---- run ---------------------------------------------------------------------------

    def _run(self, text: str, context: ToolContext = DEFAULT_CONTEXT) -> str:
        try:
            url, links = _parse_input(text, self.include_links)
            page = self.fetch(url)
            output = self._render(page, links, context or DEFAULT_CONTEXT)
        except (BlockedURLError, HostResolutionError, FetchError) as exc:
            return ToolFailure(clip_text(clean_text(f"url-get: {exc}"), self.max_chars))
        except Exception as exc:  # never a traceback in an observation
            return ToolFailure(clip_text(clean_text(f"url-get: failed ({type(exc).__name__}: {exc})"), self.max_chars))
        return clip_text(clean_text(output), self.max_chars)

    # ---- fetching ----------------------------------------------------------------------

    def fetch(self, url: str) -> Page:
        """GET ``url`` following at most 5 checked redirects; raise on refusal or network failure."""
        session = pinned_session(proxy=self.proxy)
        redirects: list[str] = []
        try:
            # per-read timeouts cannot stop a server that drips a byte at a time: bound the whole fetch
            with session.deadline(self.total_timeout):
                current = url
                for _ in range(MAX_REDIRECTS + 1):
                    checked = session.pin(check_url(current, self.allow_private))
                    response = self._request(session, checked)
                    location = response.headers.get("Location") if response.status_code in REDIRECT_CODES else None
                    if not location:
                        page = self._read(response, checked, session)
                        page.redirects = redirects
                        return page
                    response.close()
                    redirects.append(checked.url)
                    current = urljoin(checked.url, location.strip())
            raise FetchError(f"too many redirects: {url} redirected more than {MAX_REDIRECTS} times "
                             f"(stopped before {current})")
        finally:
            session.close()

    @property
    def total_timeout(self) -> float:
        """Seconds a whole fetch (all redirects, headers and body) may take: 4 x ``url_get_timeout``."""
        return 4 * self.timeout

    def _request(self, session: PinnedSession, checked: CheckedURL) -> requests.Response:
        try:
            response = session.get(checked.url, headers=HEADERS, stream=True, allow_redirects=False,
                                   timeout=(self.timeout, self.timeout))
        except requests.RequestException as exc:
            error = DeadlineExceeded(self.total_timeout) if session.aborted else exc
            raise FetchError(describe_network_error(error, checked.host, self.timeout)) from None
        if session.aborted:  # the headers "ended" only because the deadline cut the connection
            response.close()
            raise FetchError(describe_network_error(DeadlineExceeded(self.total_timeout), checked.host,
                                                    self.timeout))
        return response

    def _read(self, response: requests.Response, checked: CheckedURL, session: PinnedSession) -> Page:
        ctype, charset = content_type(response.headers.get("Content-Type", ""))
        page = Page(response.url or checked.url, response.status_code, response.reason or "", ctype, charset)
        length_header = response.headers.get("Content-Length", "").strip()
        length = int(length_header) if length_header.isdigit() else None
        try:
            if _declared_binary(ctype) and response.status_code < 400:
                page.binary, page.size = ctype, length
                return page
            self._stream_body(response, page, checked.host, session)
        finally:
            response.close()
        if ctype in _SNIFF_TYPES:
            page.binary = _sniff_binary(page.body, ctype)
        if page.truncated and length:
            page.size = max(length, page.size or 0)
        return page

    def _stream_body(self, response: requests.Response, page: Page, host: str, session: PinnedSession) -> None:
        chunks: list[bytes] = []
        total = 0
        deadline = time.monotonic() + self.total_timeout
        try:
            for chunk in response.iter_content(CHUNK_BYTES):
                chunks.append(chunk)
                total += len(chunk)
                if total > self.max_bytes:
                    page.truncated = True
                    page.notes.append(f"the body is larger than {self.max_bytes} bytes; only the first "
                                      f"{self.max_bytes} bytes were read")
                    break
                if time.monotonic() > deadline:
                    page.truncated = True
                    page.notes.append(f"the download took longer than {self.total_timeout:g} s; stopped early")
                    break
        except requests.RequestException:
            if session.aborted:
                exc = DeadlineExceeded(self.total_timeout)
            if not chunks:
                raise FetchError(describe_network_error(exc, host, self.timeout)) from None
            page.truncated = True
            page.notes.append(f"the download broke off ({describe_network_error(exc, host, self.timeout)})")
        else:
            if session.aborted and not page.truncated:  # cut at the deadline, seen as a normal end
                page.truncated = True
                page.notes.append(f"the download took longer than {self.total_timeout:g} s; stopped early")
        page.body = b"".join(chunks)[: self.max_bytes]
        page.size = total

    # ---- rendering ---------------------------------------------------------------------

    def _render(self, page: Page, links: bool, context: ToolContext) -> str:
        head = [f"URL: {page.url}"] + ([f"Redirected from: {page.redirects[0]}"] if page.redirects else [])
        if page.status >= 400:
            readable = page.body and not (_declared_binary(page.content_type) or _sniff_binary(page.body, ""))
            snippet = clip_text(_body_text(page, links)[1].strip(), 300) if readable else ""
            return (f"url-get: HTTP {page.status} {page.reason} from {page.url}"
                    + (f"\nThe page says: {snippet}" if snippet else ""))
        if page.binary:
            size = f"{page.size} bytes" if page.size is not None else "size unknown"
            if page.truncated:
                size = f"more than {self.max_bytes} bytes"
            return "\n".join(head + [f"This is binary content ({page.binary}, {size}); url-get returns text only."])
        title, text = _body_text(page, links)
        if title:
            head.append(f"Title: {title}")
        notes = list(page.notes)
        if page.charset and not text_codec(page.charset):
            notes.append(f"the declared charset {page.charset[:40]!r} is not a text encoding url-get decodes; "
                         "the page was read as UTF-8 (or its own <meta> charset, or a guess)")
        text = self._fit(clean_text(text).strip(), context, notes)
        tail = "".join(f"\n[note: {n}]" for n in notes)
        return "\n".join(head) + "\n\n" + (text or "(the page has no text)") + tail

    def _fit(self, text: str, context: ToolContext, notes: list[str]) -> str:
        """``text`` as is, or summarised when it is too long and summaries are on."""
        if len(text) <= self.max_chars or not self.use_summary:
            return text
        llm, why = self._summary_llm(context)
        if llm is None:
            notes.append(f"no LLM is available for a summary ({why}); the text was shortened instead")
            return text
        partial: list[str] = []
        try:  # the same map-reduce as the summary tool, charged to the run's budget
            summary = summarize(text, llm, max_segment_length=self.segment_tokens, max_segments=self.max_segments,
                                budget=context.budget, usage=context.usage, notes=partial)
        except Exception as exc:
            notes.append(f"the summary failed ({exc}); the text was shortened instead")
            return text
        extra = " (only its first part was summarised)" if partial else ""
        notes.append(f"summary of {len(text)} characters of text{extra}")
        return "Summary:\n" + summary.strip()

    def _summary_llm(self, context: ToolContext) -> tuple[Any, str]:
        if context.llm is not None:
            return context.llm, ""
        if self._llm is None:
            try:
                self._llm = (self.app or pure_context({})).build_llm()
            except ConfigError as exc:
                return None, f"no LLM is configured; set {exc.key or 'llm_api_key'}"
            except Exception as exc:
                return None, type(exc).__name__
        return self._llm, ""


# ---- text helpers --------------------------------------------------------------------------


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


clean_text = strip_control  # the name other tools import


def _parse_input(text: str, default_links: bool) -> tuple[str, bool]:
    raw = (text or "").strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict):
            url = data.get("url") or data.get("link") or data.get("href") or ""
            links = data.get("links", data.get("include_links", default_links))
            return str(url).strip(), bool(links)
    found = re.search(r"https?://[^\s\"'`<>]+", raw, re.I) if re.search(r"\s", raw) else None
    return (found.group(0) if found else raw.strip("\"'`<> ")), default_links


def _body_text(page: Page, links: bool) -> tuple[str, str]:
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


def _declared_binary(ctype: str) -> bool:
    return not (ctype in _SNIFF_TYPES or _TEXT_TYPE.fullmatch(ctype))


def _sniff_binary(body: bytes, ctype: str) -> str | None:
    head = body[:1024]
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            return what
    if b"\x00" in head:
        return ctype or "binary data"
    return None

