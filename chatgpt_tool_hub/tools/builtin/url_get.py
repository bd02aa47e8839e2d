"""The ``url-get`` tool: fetch a public web page and return its readable text.

The fetch and the text are :mod:`chatgpt_tool_hub.runtime.webpage`'s, which
every tool that reads the web shares. Safety (see :mod:`~chatgpt_tool_hub.runtime.netguard`):
http(s) only, no credentials in URLs, every resolved address of the host must be
public (unless ``url_get_allow_private``), the connection goes to the address
that was checked (no DNS rebinding), redirects are followed by hand (at most 5)
and each hop is checked again; with ``url_get_allowed_hosts`` only the hosts
it names (``*.example.test`` wildcards) may be fetched, redirects included.
The body is streamed and reading stops at
``url_get_max_bytes``; the whole fetch (redirects, headers, body) ends after
4 x ``url_get_timeout``, however slowly the server drips its answer.

Output: HTML becomes title + text (scripts and styles dropped), JSON is
pretty-printed, text stays text, binary content is described, not returned.
Longer than ``url_get_max_chars``: head and tail are kept, or, with
``url_get_use_summary``, an LLM summarises it (:func:`chatgpt_tool_hub.llm.summarize.summarize`,
the map-reduce the ``summary`` tool runs too).
Every failure is returned as an observation, never raised.

What it reads is untrusted (``reads_untrusted``: the run is tainted, the page
reaches the model fenced as data), and a fetch can carry data out in its URL
(``egress = "new-host"``): after untrusted content, a fetch of a host the run
has not fetched yet goes through the ``untrusted_egress`` policy.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...errors import ConfigError
from ...llm.summarize import summarize
from ...runtime.urlcheck import BlockedURLError, HostResolutionError
from ...runtime.webpage import (
    FetchError,
    FetchLimits,
    Page,
    fetch_page,
    html_to_text,
    is_binary_type,
    origin_of,
    page_text,
    parse_host_patterns,
    render_page,
    sniff_binary,
)
from ...textutil import clip_text, strip_control
from ..base import DEFAULT_CONTEXT, Tool, ToolContext, ToolFailure
from ..context import AppContext, pure_context

__all__ = ["UrlGetTool", "html_to_text", "clean_text", "clip_text", "FetchError", "Page"]

clean_text = strip_control  # the name other tools import


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
    reads_untrusted = True
    egress = "new-host"

    def __init__(self, *, allow_private: bool = False, max_bytes: int = 2_000_000, timeout: float = 15.0,
                 max_chars: int = 8000, use_summary: bool = False, include_links: bool = False,
                 summary_max_segment_length: int = 2500, summary_max_segments: int = 8,
                 proxy: str | None = None, app: AppContext | None = None, allowed_hosts: Any = None):
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
        self.allowed_hosts = parse_host_patterns(allowed_hosts)
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
            allowed_hosts=settings.get("url_get_allowed_hosts", None),
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

    @property
    def limits(self) -> FetchLimits:
        """This tool's fetch limits (its settings as they are now)."""
        return FetchLimits(allow_private=self.allow_private, max_bytes=self.max_bytes, timeout=self.timeout,
                           proxy=self.proxy, allowed_hosts=self.allowed_hosts)

    def egress_host(self, tool_input: Any) -> str | None:
        """The ``host:port`` the input's URL names (the run's taint state remembers it)."""
        if isinstance(tool_input, dict) and len(tool_input) == 1:  # a native call's {"input": url}
            tool_input = next(iter(tool_input.values()))
        text = tool_input if isinstance(tool_input, str) else json.dumps(tool_input, default=str)
        return origin_of(_parse_input(text, False)[0])

    def fetch(self, url: str) -> Page:
        """GET ``url`` following at most 5 checked redirects; raise on refusal or network failure."""
        return fetch_page(url, self.limits)

    @property
    def total_timeout(self) -> float:
        """Seconds a whole fetch (all redirects, headers and body) may take: 4 x ``url_get_timeout``."""
        return self.limits.total_timeout

    # ---- rendering ---------------------------------------------------------------------

    def _render(self, page: Page, links: bool, context: ToolContext) -> str:
        if page.status >= 400:
            readable = page.body and not (is_binary_type(page.content_type) or sniff_binary(page.body, ""))
            snippet = clip_text(page_text(page, links)[1].strip(), 300) if readable else ""
            return (f"url-get: HTTP {page.status} {page.reason} from {page.url}"
                    + (f"\nThe page says: {snippet}" if snippet else ""))
        if page.binary:
            head = [f"URL: {page.url}"] + ([f"Redirected from: {page.redirects[0]}"] if page.redirects else [])
            size = f"{page.size} bytes" if page.size is not None else "size unknown"
            if page.truncated:
                size = f"more than {self.max_bytes} bytes"
            return "\n".join(head + [f"This is binary content ({page.binary}, {size}); url-get returns text only."])
        return render_page(page, links, fit=lambda text, notes: self._fit(text, context, notes))

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


def _parse_input(text: str, default_links: bool) -> tuple[str, bool]:
    """(URL, keep links) of the input: a URL, a JSON object with ``url``, or text with a URL in it."""
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
