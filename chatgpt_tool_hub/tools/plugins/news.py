"""``news-api`` (NewsAPI.org) and ``morning-news`` (ALAPI's daily 60-second digest).

``news-api`` reads NewsAPI's ``/v2/top-headlines`` (no query, or a category or
country) and ``/v2/everything`` (keywords): the key travels in the
``X-Api-Key`` header. ``morning-news`` reads ALAPI's ``zaobao`` endpoint, whose
key is the ``token`` query parameter (hidden from every message). Both need
their key only when they are asked for; ``finance-news`` (no key) lives in
:mod:`.finance_news`, and the ``news`` subtree over the three in
:mod:`chatgpt_tool_hub.tools.subtree`.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, ToolExecutionError
from ...runtime.http import HttpSettings, get_json, host_of, json_object, numbered_results
from ..base import Tool, ToolResult, maybe_object

__all__ = ["NewsApiTool", "MorningNewsTool", "NEWS_API_URL", "MORNING_NEWS_URL", "CATEGORIES"]

NEWS_API_URL = "https://newsapi.org/v2"
MORNING_NEWS_URL = "https://v2.alapi.cn/api/zaobao"
CATEGORIES = ("business", "entertainment", "general", "health", "science", "sports", "technology")
OUTPUT_TYPES = ("text", "image")


def _clean(value: Any) -> str:
    return " ".join(str(value if value is not None else "").split())


class NewsApiTool(Tool):
    name = "news-api"
    reads_untrusted = True  # content from the internet
    description = (
        "Current news from more than 80,000 sources (NewsAPI.org). Input: keywords to search recent articles "
        "for, e.g. 'OpenAI' or 'Tesla earnings'; nothing for today's top headlines; or a JSON object "
        '{"query": ..., "category": "technology", "country": "us", "language": "en"} '
        f"(categories: {', '.join(CATEGORIES)})."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "keywords; empty for the top headlines"},
            "category": {"type": "string", "enum": list(CATEGORIES), "description": "top headlines of a category"},
            "country": {"type": "string", "description": "two-letter country code of the top headlines, e.g. us"},
            "language": {"type": "string", "description": "two-letter language code, e.g. en"},
        },
    }

    def __init__(self, api_key: str, *, url: str = NEWS_API_URL, country: str = "us", language: str = "",
                 top_k_results: int = 5, http: HttpSettings | None = None):
        self._key = "" if api_key is None else str(api_key).strip()
        self.url = url.rstrip("/")
        self.country = _clean(country).lower()
        self.language = _clean(language).lower()
        self.top_k_results = max(1, min(100, int(top_k_results)))
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "NewsApiTool":
        settings = context.settings
        return cls(
            settings.get("news_api_key", ""),
            url=settings.get("news_api_url", NEWS_API_URL),
            country=settings.get("news_api_country", "us"),
            language=settings.get("news_api_language", ""),
            top_k_results=settings.get("news_api_top_k_results", 5),
            http=context.http,
        )

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, Mapping):
            arguments = dict(tool_input)
        else:
            text = str(tool_input or "").strip()
            arguments = maybe_object(text) or ({"query": text} if text else {})
        for alias in ("q", "keywords", "input", "text"):
            if "query" not in arguments and alias in arguments:
                arguments["query"] = arguments.pop(alias)
        for key in ("category", "country", "language"):
            if isinstance(arguments.get(key), str):
                arguments[key] = arguments[key].strip().lower()
            if arguments.get(key) in ("", None):
                arguments.pop(key, None)
        return self._prepared(arguments)

    def _run(self, query: str = "", category: str | None = None, country: str | None = None,
             language: str | None = None, **_ignored: Any) -> str:
        query = _clean(query)
        language = language or self.language
        if query and not category and not country:  # keywords alone: search every recent article
            endpoint, params = "everything", {"q": query, "sortBy": "publishedAt", "pageSize": self.top_k_results}
            if language:
                params["language"] = language
        else:
            endpoint = "top-headlines"
            params = {"country": country or self.country, "pageSize": self.top_k_results}
            if category:
                params["category"] = category
            if query:
                params["q"] = query
        data = get_json(f"{self.url}/{endpoint}", params, headers={"X-Api-Key": self._key}, secrets=(self._key,),
                        timeout=self.http.timeout, proxy=self.http.proxy, key_names="news_api_key")
        if not isinstance(data, Mapping):
            raise ToolExecutionError(f"{host_of(self.url)} answered something that is not a NewsAPI result")
        if data.get("status") == "error":
            raise ToolExecutionError(f"NewsAPI refused the request ({_clean(data.get('code')) or 'error'}): "
                                     f"{_clean(data.get('message'))[:300]}")
        results = []
        for article in (data.get("articles") or [])[: self.top_k_results]:
            if not isinstance(article, Mapping):
                continue
            source = json_object(article.get("source"))
            meta = ", ".join(x for x in (_clean(source.get("name")), _clean(article.get("publishedAt"))[:10]) if x)
            title = _clean(article.get("title")) + (f" ({meta})" if meta else "")
            results.append((title, _clean(article.get("description"))[:400], _clean(article.get("url"))))
        what = f"for '{query}'" if query else "in the top headlines" + (f" of {category}" if category else "")
        return numbered_results(results, empty=f"No NewsAPI articles {what}.")


class MorningNewsTool(Tool):
    name = "morning-news"
    reads_untrusted = True  # content from the internet
    description = ("Today's 60-second morning news digest (a list of the day's Chinese headlines). "
                   "No input is needed.")

    def __init__(self, api_key: str, *, url: str = MORNING_NEWS_URL, simple: bool = True,
                 output_type: str = "text", http: HttpSettings | None = None):
        self._key = "" if api_key is None else str(api_key).strip()
        self.url = url
        self.simple = bool(simple)
        output_type = _clean(output_type).lower() or "text"
        if output_type not in OUTPUT_TYPES:
            raise ConfigError(f"morning_news_output_type must be one of {', '.join(OUTPUT_TYPES)}, "
                              f"got {output_type[:20]!r}", key="morning_news_output_type")
        self.output_type = output_type
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "MorningNewsTool":
        settings = context.settings
        return cls(
            settings.get("morning_news_api_key", ""),
            url=settings.get("morning_news_url", MORNING_NEWS_URL),
            simple=settings.get("morning_news_simple", True),
            output_type=settings.get("morning_news_output_type", "text"),
            http=context.http,
        )

    def _run(self, text: str = "") -> str:
        data = get_json(self.url, {"token": self._key, "format": "json"}, secrets=(self._key,),
                        timeout=self.http.timeout, proxy=self.http.proxy, key_names="morning_news_api_key")
        if not isinstance(data, Mapping):
            raise ToolExecutionError(f"{host_of(self.url)} answered something that is not a morning-news result")
        if data.get("code") not in (200, "200") and data.get("msg") != "success":
            raise ToolExecutionError(f"the morning-news service refused the request (code {data.get('code')}): "
                                     f"{_clean(data.get('msg'))[:200]}; check morning_news_api_key")
        body = json_object(data.get("data"))
        date = _clean(body.get("date"))
        news = [_clean(n) for n in (body.get("news") or []) if _clean(n)]
        weiyu = _clean(body.get("weiyu"))
        image = _clean(body.get("image"))
        if self.output_type == "image":
            if not image:
                raise ToolExecutionError("the morning-news service sent no image for today; "
                                         "set morning_news_output_type=text")
            return ToolResult(f"The morning news of {date or 'today'} as an image: {image}", value=image)
        if not news:
            return f"The morning-news service has no news for {date or 'today'} yet."
        if self.simple:
            lines = [date, *news] + ([weiyu] if weiyu else [])
            return "\n".join(line for line in lines if line)
        lines = [f"今日日期：{date}", "今日早报：", *news]
        if weiyu:
            lines.append(f"今日微语：{weiyu}")
        if image:
            lines.append(f"图片：{image}")
        return "\n".join(lines)
