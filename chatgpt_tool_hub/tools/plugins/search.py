"""Web search tools: ``bing-search``, ``google-search`` and ``searxng-search``.

Each renders its top ``k`` results as numbered ``title`` / snippet / URL
blocks. Keys travel in headers (``Ocp-Apim-Subscription-Key`` for Bing,
Google's standard ``X-Goog-Api-Key``) and never appear in an observation or a
log line.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ...runtime.http import HttpSettings, clean_query, get_json, numbered_results, query_schema
from ..base import Tool

__all__ = ["BingSearchTool", "GoogleSearchTool", "SearxngSearchTool"]

BING_URL = "https://api.bing.microsoft.com/v7.0/search"
GOOGLE_URL = "https://www.googleapis.com/customsearch/v1"
_QUERY_HELP = "a web search query"


def _present(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _top_k(value: Any, cap: int) -> int:
    return max(1, min(cap, int(value)))


class _SearchTool(Tool):
    parameters = query_schema(_QUERY_HELP)
    label = "web search"
    reads_untrusted = True  # result titles and snippets are written by whoever wrote the pages

    def __init__(self, *, top_k_results: int = 2, http: HttpSettings | None = None):
        self.top_k_results = top_k_results
        self.http = http or HttpSettings()

    def _run(self, query: str, **_ignored: Any) -> str:
        query = clean_query(query, self.name, "'latest Python release'")
        results = list(self.search(query))[: self.top_k_results]
        return numbered_results(results, empty=f"No {self.label} results for '{query}'.")

    def search(self, query: str) -> Iterable[tuple[str, str, str]]:  # pragma: no cover - abstract
        raise NotImplementedError


class BingSearchTool(_SearchTool):
    name = "bing-search"
    label = "Bing"
    description = ("Search the web with Bing for current events and facts. Input: a search query. "
                   "Returns numbered results with title, snippet and URL.")

    def __init__(self, subscription_key: str, *, search_url: str = BING_URL, top_k_results: int = 2,
                 market: str | None = None, http: HttpSettings | None = None):
        super().__init__(top_k_results=_top_k(top_k_results, 50), http=http)
        self._key = _present(subscription_key)
        self.search_url = search_url
        self.market = market

    @classmethod
    def from_context(cls, context: Any) -> "BingSearchTool":
        settings = context.settings
        return cls(
            settings.get("bing_subscription_key", ""),
            search_url=settings.get("bing_search_url", BING_URL),
            top_k_results=settings.get("bing_search_top_k_results", 2),
            market=settings.get("bing_search_mkt", None),
            http=context.http,
        )

    def search(self, query: str) -> Iterable[tuple[str, str, str]]:
        params: dict[str, Any] = {"q": query, "count": self.top_k_results, "textDecorations": "false",
                                  "textFormat": "Raw"}
        if self.market:
            params["mkt"] = self.market
        data = get_json(self.search_url, params, headers={"Ocp-Apim-Subscription-Key": self._key},
                        timeout=self.http.timeout, proxy=self.http.proxy, key_names="bing_subscription_key")
        pages = data.get("webPages") if isinstance(data, Mapping) else None
        for item in (pages.get("value") if isinstance(pages, Mapping) else None) or []:
            if isinstance(item, Mapping):
                yield _present(item.get("name")), _present(item.get("snippet")), _present(item.get("url"))


class GoogleSearchTool(_SearchTool):
    name = "google-search"
    label = "Google"
    description = ("Search the web with Google for current events and facts. Input: a search query. "
                   "Returns numbered results with title, snippet and URL.")

    def __init__(self, api_key: str, cse_id: str, *, search_url: str = GOOGLE_URL, top_k_results: int = 2,
                 http: HttpSettings | None = None):
        super().__init__(top_k_results=_top_k(top_k_results, 10), http=http)  # the API's num is at most 10
        self._key = _present(api_key)
        self._cse_id = _present(cse_id)
        self.search_url = search_url

    @classmethod
    def from_context(cls, context: Any) -> "GoogleSearchTool":
        settings = context.settings
        return cls(
            settings.get("google_api_key", ""),
            settings.get("google_cse_id", ""),
            search_url=settings.get("google_search_url", GOOGLE_URL),
            top_k_results=settings.get("google_top_k_results", 2),
            http=context.http,
        )

    def search(self, query: str) -> Iterable[tuple[str, str, str]]:
        params = {"cx": self._cse_id, "q": query, "num": self.top_k_results}
        # the key travels in Google's standard header (never in a URL); cx must be a parameter
        data = get_json(self.search_url, params, headers={"X-Goog-Api-Key": self._key},
                        secrets=(self._cse_id,), timeout=self.http.timeout, proxy=self.http.proxy,
                        key_names="google_api_key and google_cse_id")
        for item in (data.get("items") if isinstance(data, Mapping) else None) or []:
            if isinstance(item, Mapping):
                yield _present(item.get("title")), _present(item.get("snippet")), _present(item.get("link"))


class SearxngSearchTool(_SearchTool):
    name = "searxng-search"
    label = "SearXNG"
    description = ("Search the web through a SearXNG metasearch instance. Input: a search query. "
                   "Returns numbered results with title, snippet and URL.")

    def __init__(self, host: str, *, top_k_results: int = 2, language: str | None = None,
                 http: HttpSettings | None = None):
        super().__init__(top_k_results=_top_k(top_k_results, 50), http=http)
        base = _present(host).rstrip("/")
        if base and "://" not in base:
            base = "http://" + base
        self.search_url = base if base.endswith("/search") else base + "/search"
        self.language = language

    @classmethod
    def from_context(cls, context: Any) -> "SearxngSearchTool":
        settings = context.settings
        return cls(
            settings.get("searxng_search_host", ""),
            top_k_results=settings.get("searxng_search_top_k_results", 2),
            language=settings.get("searxng_search_language", None),
            http=context.http,
        )

    def _run(self, query: str, **_ignored: Any) -> str:
        query = clean_query(query, self.name, "'latest Python release'")
        data = get_json(self.search_url, self._params(query), timeout=self.http.timeout, proxy=self.http.proxy,
                        hints={403: "the instance refused; it may not allow format=json "
                                    "(add json to search.formats in its settings.yml)"})
        data = data if isinstance(data, Mapping) else {}
        results = [(_present(r.get("title")), _present(r.get("content")), _present(r.get("url")))
                   for r in data.get("results") or [] if isinstance(r, Mapping)][: self.top_k_results]
        answers = []
        for answer in data.get("answers") or []:
            text = answer.get("answer") if isinstance(answer, Mapping) else answer
            if _present(text):
                answers.append(f"Answer: {_present(text)}")
        body = numbered_results(results, empty="" if answers else f"No SearXNG results for '{query}'.")
        return "\n\n".join(part for part in ("\n".join(answers[:2]), body) if part)

    def _params(self, query: str) -> dict[str, Any]:
        params: dict[str, Any] = {"q": query, "format": "json", "pageno": 1}
        if self.language:
            params["language"] = self.language
        return params
