"""``wikipedia``: search Wikipedia and return the introductions of the best pages.

Two MediaWiki API requests: ``list=search`` finds the top ``k`` titles, then
``prop=extracts`` (intro only, plain text) fetches their summaries and URLs.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote

from ...errors import ToolExecutionError
from ...runtime.http import HttpSettings, clean_query, get_json, json_object, query_schema
from ..base import Tool

__all__ = ["WikipediaTool"]


class WikipediaTool(Tool):
    name = "wikipedia"
    reads_untrusted = True  # content from the internet
    description = (
        "Search Wikipedia and return the summaries of the best matching pages. Useful for facts about "
        "people, places, companies, history and science. Input: a search query, e.g. 'Alan Turing'."
    )
    parameters = query_schema("what to look up on Wikipedia")

    def __init__(self, *, api_url: str | None = None, lang: str = "en", top_k_results: int = 2,
                 max_chars: int = 4000, http: HttpSettings | None = None):
        self.lang = (lang or "en").strip()
        url = api_url or "https://{lang}.wikipedia.org/w/api.php"
        self.api_url = url.replace("{lang}", quote(self.lang, safe=""))
        self.top_k_results = max(1, min(20, int(top_k_results)))
        self.max_chars = max(200, int(max_chars))
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "WikipediaTool":
        settings = context.settings
        return cls(
            api_url=settings.get("wikipedia_api_url", None),
            lang=settings.get("wikipedia_lang", "en"),
            top_k_results=settings.get("wikipedia_top_k_results", 2),
            max_chars=settings.get("wikipedia_max_chars", 4000),
            http=context.http,
        )

    def _get(self, params: dict) -> Mapping[str, Any]:
        params = {"action": "query", "format": "json", "formatversion": "2", "utf8": "1", **params}
        data = get_json(self.api_url, params, timeout=self.http.timeout, proxy=self.http.proxy)
        if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
            info = data["error"].get("info") or data["error"].get("code") or "unknown error"
            raise ToolExecutionError(f"the Wikipedia API refused the request: {str(info)[:200]}")
        return data if isinstance(data, Mapping) else {}

    def _run(self, query: str, **_ignored: Any) -> str:
        query = clean_query(query, self.name, "'Alan Turing'")
        found = self._get({"list": "search", "srsearch": query, "srlimit": self.top_k_results,
                           "srprop": "", "srinfo": "suggestion"})
        block = json_object(found.get("query"))
        hits = [h for h in block.get("search") or [] if isinstance(h, Mapping) and h.get("title")]
        if not hits:
            suggestion = json_object(block.get("searchinfo")).get("suggestion")
            hint = f" Did you mean '{suggestion}'?" if suggestion else " Try other or fewer words."
            return f"No Wikipedia ({self.lang}) page matches '{query}'.{hint}"
        hits = hits[: self.top_k_results]
        titles = [str(h["title"]) for h in hits]
        pages = self._extracts(titles)
        budget = max(200, self.max_chars // len(titles))
        blocks = []
        for title in titles:
            page = pages.get(title, {})
            summary = " ".join(str(page.get("extract") or "").split()) or "(no summary available)"
            if len(summary) > budget:
                summary = summary[: budget - 1].rsplit(" ", 1)[0] + " …"
            url = page.get("fullurl") or self._page_url(title)
            blocks.append(f"Page: {page.get('title') or title}\nSummary: {summary}\nURL: {url}")
        return "\n\n".join(blocks)

    def _extracts(self, titles: list[str]) -> dict[str, Mapping[str, Any]]:
        data = self._get({"prop": "extracts|info", "inprop": "url", "exintro": "1", "explaintext": "1",
                          "exlimit": "max", "redirects": "1", "titles": "|".join(titles)})
        block = json_object(data.get("query"))
        pages = block.get("pages") or []
        if isinstance(pages, Mapping):  # formatversion=1 shape: {pageid: page}
            pages = list(pages.values())
        by_title: dict[str, Mapping[str, Any]] = {}
        for page in pages:
            if isinstance(page, Mapping) and page.get("title"):
                by_title[str(page["title"])] = page
        # a search title that was normalised or redirected maps to its target page
        for key in ("normalized", "redirects"):
            for item in block.get(key) or []:
                if isinstance(item, Mapping) and item.get("to") in by_title:
                    by_title.setdefault(str(item.get("from")), by_title[item["to"]])
        return by_title

    def _page_url(self, title: str) -> str:
        base = self.api_url.split("?", 1)[0]
        for tail in ("/w/api.php", "/api.php"):
            if base.endswith(tail):
                base = base[: -len(tail)]
                break
        return f"{base}/wiki/{quote(title.replace(' ', '_'))}"
