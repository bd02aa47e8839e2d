"""``arxiv``: search arXiv papers through its Atom API (parsed with the standard library).

The answer is XML from the network, so it is read defensively: any DOCTYPE or
ENTITY declaration is refused before parsing (no entity expansion, no external
entities), and a size cap applies in :mod:`._http`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from ...errors import ConfigError, ToolExecutionError
from ...runtime.http import HttpSettings, clean_query, get_text, host_of, query_schema
from ..base import Tool

__all__ = ["ArxivTool", "parse_feed", "SORT_BY", "SORT_ORDER"]

API_URL = "http://export.arxiv.org/api/query"
SORT_BY = ("relevance", "lastUpdatedDate", "submittedDate")
SORT_ORDER = ("ascending", "descending")
MAX_QUERY_CHARS = 300
SIMPLE_SUMMARY_CHARS = 300

_NS = {"a": "http://www.w3.org/2005/Atom", "arxiv": "http://arxiv.org/schemas/atom"}
_DECLARATION = re.compile(r"<!\s*(DOCTYPE|ENTITY)", flags=re.I)
_ARXIV_ID = re.compile(
    r"^(?:arxiv:\s*|https?://(?:export\.)?arxiv\.org/(?:abs|pdf)/)?"
    r"(?P<id>\d{4}\.\d{4,5}(?:v\d+)?|[a-z][a-z.\-]*/\d{7}(?:v\d+)?)(?:\.pdf)?$",
    flags=re.I,
)


def parse_feed(text: str, host: str = "arXiv") -> list[dict[str, Any]]:
    """Entries of an arXiv Atom feed as dicts; refuses DTDs/entities and invalid XML."""
    if _DECLARATION.search(text):
        raise ToolExecutionError(f"refused the answer from {host}: the XML declares a DOCTYPE or ENTITY "
                                 f"(entity expansion is not allowed)")
    try:
        root = ET.fromstring(text.lstrip("\ufeff"))
    except ET.ParseError as err:
        raise ToolExecutionError(f"{host} answered with invalid XML ({err}); is arxiv_api_url right?") from None
    if root.tag != f"{{{_NS['a']}}}feed":
        raise ToolExecutionError(f"{host} answered XML that is not an Atom feed; is arxiv_api_url right?")
    entries = []
    for entry in root.findall("a:entry", _NS):
        item: dict[str, Any] = {
            "id": _text(entry, "a:id"),
            "title": _text(entry, "a:title"),
            "summary": _text(entry, "a:summary"),
            "published": _text(entry, "a:published"),
            "updated": _text(entry, "a:updated"),
            "authors": [_text(a, "a:name") for a in entry.findall("a:author", _NS) if _text(a, "a:name")],
            "categories": [c.get("term") for c in entry.findall("a:category", _NS) if c.get("term")],
            "comment": _text(entry, "arxiv:comment"),
            "journal_ref": _text(entry, "arxiv:journal_ref"),
            "doi": _text(entry, "arxiv:doi"),
            "abs_url": "",
            "pdf_url": "",
        }
        for link in entry.findall("a:link", _NS):
            if link.get("rel") == "alternate" and not item["abs_url"]:
                item["abs_url"] = link.get("href") or ""
            elif link.get("title") == "pdf" or link.get("type") == "application/pdf":
                item["pdf_url"] = link.get("href") or ""
        item["abs_url"] = item["abs_url"] or item["id"]
        entries.append(item)
    return entries


def _text(node: ET.Element, path: str) -> str:
    found = node.find(path, _NS)
    return " ".join((found.text or "").split()) if found is not None else ""


class ArxivTool(Tool):
    name = "arxiv"
    reads_untrusted = True  # content from the internet
    description = (
        "Search arXiv for scientific papers (physics, mathematics, computer science, biology, finance, "
        "statistics...). Input: a search query, an arXiv id such as 1706.03762, or a field query such as "
        "'au:hinton AND ti:dropout'."
    )
    parameters = query_schema("keywords, an arXiv id, or an arXiv field query (ti:, au:, abs:, cat:)")

    def __init__(self, *, api_url: str = API_URL, top_k_results: int = 2, sort_by: str = "relevance",
                 sort_order: str = "descending", simple: bool = True, max_chars: int = 4000,
                 http: HttpSettings | None = None):
        self.api_url = api_url
        self.top_k_results = max(1, min(50, int(top_k_results)))
        self.sort_by = _choice("arxiv_sort_by", sort_by, SORT_BY)
        self.sort_order = _choice("arxiv_sort_order", sort_order, SORT_ORDER)
        self.simple = bool(simple)
        self.max_chars = max(200, int(max_chars))
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "ArxivTool":
        settings = context.settings
        return cls(
            api_url=settings.get("arxiv_api_url", API_URL),
            top_k_results=settings.get("arxiv_top_k_results", 2),
            sort_by=settings.get("arxiv_sort_by", "relevance"),
            sort_order=settings.get("arxiv_sort_order", "descending"),
            simple=settings.get("arxiv_simple", True),
            max_chars=settings.get("arxiv_max_chars", 4000),
            http=context.http,
        )

    def _run(self, query: str, **_ignored: Any) -> str:
        query = clean_query(query, self.name, "'large language model agents'")[:MAX_QUERY_CHARS]
        params: dict[str, Any] = {"start": 0, "max_results": self.top_k_results}
        id_match = _ARXIV_ID.match(query)
        if id_match:
            params["id_list"] = id_match.group("id")
        else:
            params.update(search_query=query, sortBy=self.sort_by, sortOrder=self.sort_order)
        text = get_text(self.api_url, params, timeout=self.http.timeout, proxy=self.http.proxy)
        entries = parse_feed(text, host_of(self.api_url))
        errors = [e for e in entries if "/api/errors" in e["id"]]
        if errors:
            raise ToolExecutionError(f"arXiv rejected the query: {errors[0]['summary'] or errors[0]['title']}")
        entries = [e for e in entries if e["title"]][: self.top_k_results]
        if not entries:
            return f"No arXiv paper matches '{query}'. Try other keywords."
        blocks = [self._render(i, e) for i, e in enumerate(entries, 1)]
        output = "\n\n".join(blocks)
        if len(output) > self.max_chars:
            output = output[: self.max_chars - 1].rstrip() + "…"
        return output

    def _render(self, index: int, entry: dict[str, Any]) -> str:
        authors = entry["authors"]
        lines = [f"{index}. {entry['title']}"]
        if self.simple:
            shown = ", ".join(authors[:5]) + (f" and {len(authors) - 5} more" if len(authors) > 5 else "")
            summary = entry["summary"]
            if len(summary) > SIMPLE_SUMMARY_CHARS:
                summary = summary[:SIMPLE_SUMMARY_CHARS].rsplit(" ", 1)[0] + " …"
            lines += [f"   Authors: {shown or 'unknown'}", f"   Published: {entry['published'][:10] or 'unknown'}",
                      f"   URL: {entry['abs_url']}", f"   Summary: {summary}"]
            return "\n".join(lines)
        lines += [f"   Authors: {', '.join(authors) or 'unknown'}",
                  f"   Published: {entry['published'][:10] or 'unknown'}; updated: {entry['updated'][:10] or '-'}"]
        for label, key in (("Categories", "categories"), ("Comment", "comment"),
                           ("Journal reference", "journal_ref"), ("DOI", "doi")):
            value = ", ".join(entry[key]) if isinstance(entry[key], list) else entry[key]
            if value:
                lines.append(f"   {label}: {value}")
        lines.append(f"   URL: {entry['abs_url']}")
        if entry["pdf_url"]:
            lines.append(f"   PDF: {entry['pdf_url']}")
        lines.append(f"   Summary: {entry['summary']}")
        return "\n".join(lines)


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> str:
    for option in allowed:
        if str(value).strip().lower() == option.lower():
            return option
    raise ConfigError(f"setting '{key}' must be one of {', '.join(allowed)}, got {str(value)[:40]!r}", key=key)
