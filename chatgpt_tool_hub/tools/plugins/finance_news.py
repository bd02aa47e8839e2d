"""``finance-news``: real-time financial flash news from a public feed (no key).

The default feed is the one chatgpt-tool-hub 0.5 read: a JSON list of flash
items (``{"id", "time", "data": {"title", "content", "pic"}}``), possibly
wrapped in JavaScript (the outermost ``[...]`` is taken). ``finance_news_url``
may point at any feed of that shape, at a plain JSON list of
``{"title", "content" | "summary", "time" | "published", "url"}`` items, or at
an RSS 2.0 / Atom feed.

Options (the keys chatgpt-on-wechat's plugin passes): ``finance_news_filter``
with ``finance_news_filter_list`` keeps only items that contain one of the
words; ``finance_news_simple`` gives bare lines; ``finance_news_repeat_news``
leaves out items this tool has already returned.
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Iterable, Mapping

from ...errors import ConfigError, ToolExecutionError
from ...runtime.http import HttpSettings, get_text, host_of
from ..base import Tool

__all__ = ["FinanceNewsTool", "FINANCE_NEWS_URL", "NewsItem", "parse_feed", "filter_words"]

FINANCE_NEWS_URL = "https://www.topworldbullion.com/data/homemarketnews"
MAX_SEEN = 5000  # ids remembered for finance_news_repeat_news
_TAGS = re.compile(r"<[^>]+>")
_DECLARATION = re.compile(r"<!\s*(DOCTYPE|ENTITY)", flags=re.I)
_ATOM = "{http://www.w3.org/2005/Atom}"


@dataclass(frozen=True)
class NewsItem:
    id: str
    time: datetime | None
    title: str
    text: str
    link: str = ""


def _plain(value: Any) -> str:
    text = _TAGS.sub(" ", str(value if value is not None else "").replace("<br/>", " ").replace("<br>", " "))
    return " ".join(text.split())


def _when(value: Any) -> datetime | None:
    text = str(value or "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)  # RSS: "Tue, 10 Jun 2025 04:00:00 GMT"
        except (TypeError, ValueError, IndexError):
            return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def filter_words(value: Any) -> list[str]:
    """``finance_news_filter_list`` as words: a list, a JSON list, or a comma-separated string."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ConfigError("finance_news_filter_list must be a list of words, a JSON list or words "
                                  "separated by commas", key="finance_news_filter_list") from None
        else:
            value = re.split(r"[,，;；]", text)
    if not isinstance(value, (list, tuple, set)):
        raise ConfigError("finance_news_filter_list must be a list of words", key="finance_news_filter_list")
    return [w for w in (str(v).strip() for v in value) if w]


def parse_feed(text: str, host: str = "the feed") -> list[NewsItem]:
    """The items of a finance feed (see the module docstring), oldest first."""
    stripped = text.lstrip("\ufeff").strip()
    if stripped.startswith("<"):
        return _parse_xml(stripped, host)
    try:
        data = json.loads(stripped)
    except ValueError:
        start, end = stripped.find("["), stripped.rfind("]")
        if start == -1 or end <= start:
            raise ToolExecutionError(f"{host} answered something that is not a news feed; "
                                     f"is finance_news_url right?") from None
        try:
            data = json.loads(stripped[start:end + 1])
        except ValueError:
            raise ToolExecutionError(f"{host} answered a list that is not JSON; is finance_news_url right?") from None
    if isinstance(data, Mapping):  # {"data": [...]} / {"items": [...]}
        data = next((data[k] for k in ("data", "items", "list", "news") if isinstance(data.get(k), list)), None)
    if not isinstance(data, list):
        raise ToolExecutionError(f"{host} answered JSON that is not a list of news; is finance_news_url right?")
    items = [item for item in (_json_item(raw, i) for i, raw in enumerate(data)) if item is not None]
    return _oldest_first(items)


def _json_item(raw: Any, index: int) -> NewsItem | None:
    if not isinstance(raw, Mapping):
        return None
    inner = raw.get("data")
    body = inner if isinstance(inner, Mapping) else raw
    text = _plain(body.get("content") or body.get("summary") or body.get("description") or "")
    title = _plain(body.get("title") or "")
    if not text and not title:
        return None
    link = _plain(body.get("url") or body.get("link") or body.get("pic") or "")
    moment = _when(raw.get("time") or raw.get("published") or raw.get("pubDate") or body.get("time"))
    return NewsItem(str(raw.get("id") or f"{moment}|{title}|{text[:60]}|{index}"), moment, title, text, link)


def _parse_xml(text: str, host: str) -> list[NewsItem]:
    if _DECLARATION.search(text):
        raise ToolExecutionError(f"refused the answer from {host}: the XML declares a DOCTYPE or ENTITY")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ToolExecutionError(f"{host} answered invalid XML ({err}); is finance_news_url right?") from None
    items = []
    if root.tag == f"{_ATOM}feed":
        for entry in root.findall(f"{_ATOM}entry"):
            link = entry.find(f"{_ATOM}link")
            items.append(NewsItem(
                _plain(entry.findtext(f"{_ATOM}id")) or _plain(entry.findtext(f"{_ATOM}title")),
                _when(entry.findtext(f"{_ATOM}updated") or entry.findtext(f"{_ATOM}published")),
                _plain(entry.findtext(f"{_ATOM}title")),
                _plain(entry.findtext(f"{_ATOM}summary") or entry.findtext(f"{_ATOM}content")),
                (link.get("href") or "") if link is not None else ""))
    else:
        for node in root.iter("item"):
            items.append(NewsItem(
                _plain(node.findtext("guid")) or _plain(node.findtext("link")) or _plain(node.findtext("title")),
                _when(node.findtext("pubDate")), _plain(node.findtext("title")),
                _plain(node.findtext("description")), _plain(node.findtext("link"))))
    if not items and root.tag not in (f"{_ATOM}feed", "rss"):
        raise ToolExecutionError(f"{host} answered XML that is not an RSS or Atom feed; is finance_news_url right?")
    return _oldest_first([i for i in items if i.title or i.text])


def _oldest_first(items: list[NewsItem]) -> list[NewsItem]:
    if all(i.time is not None for i in items):
        return sorted(items, key=lambda i: i.time)  # type: ignore[arg-type, return-value]
    return list(reversed(items))  # feeds list the newest first


class FinanceNewsTool(Tool):
    name = "finance-news"
    reads_untrusted = True  # content from the internet
    description = ("Real-time global financial flash news (markets, central banks, commodities, companies). "
                   "No input is needed; it returns the latest items, oldest first.")

    def __init__(self, *, url: str = FINANCE_NEWS_URL, filter: bool = False, filter_list: Iterable[str] = (),
                 simple: bool = True, repeat_news: bool = False, max_items: int = 20, utc_offset: float = 8,
                 http: HttpSettings | None = None):
        self.url = url
        self.filter = bool(filter)
        self.filter_list = filter_words(list(filter_list))
        self.simple = bool(simple)
        self.repeat_news = bool(repeat_news)
        self.max_items = max(1, int(max_items))
        self.zone = timezone(timedelta(hours=float(utc_offset)))
        self.http = http or HttpSettings()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_context(cls, context: Any) -> "FinanceNewsTool":
        settings = context.settings
        return cls(
            url=settings.get("finance_news_url", FINANCE_NEWS_URL),
            filter=settings.get("finance_news_filter", False),
            filter_list=filter_words(settings.get("finance_news_filter_list")),
            simple=settings.get("finance_news_simple", True),
            repeat_news=settings.get("finance_news_repeat_news", False),
            max_items=settings.get("finance_news_max_items", 20),
            utc_offset=settings.get("finance_news_utc_offset", 8.0),
            http=context.http,
        )

    def _run(self, text: str = "") -> str:
        host = host_of(self.url)
        items = parse_feed(get_text(self.url, timeout=self.http.timeout, proxy=self.http.proxy), host)
        if self.filter and self.filter_list:
            items = [i for i in items if any(w in f"{i.title} {i.text}" for w in self.filter_list)]
            if not items:
                return f"No finance news at {host} mentions any of: {', '.join(self.filter_list)}."
        if self.repeat_news:
            items = self._unseen(items)
            if not items:
                return f"No finance news at {host} since the last call."
        if not items:
            return f"The finance feed at {host} has no news right now."
        items = items[-self.max_items:]
        lines = [self._line(i) for i in items]
        today = datetime.now(self.zone).strftime("%Y-%m-%d")
        if self.simple:
            return "\n".join([today, *lines])
        return f"Financial news, {today} (UTC{self._offset()}), {len(items)} item(s) from {host}:\n" + "\n".join(lines)

    def _unseen(self, items: list[NewsItem]) -> list[NewsItem]:
        with self._lock:
            fresh = [i for i in items if i.id not in self._seen]
            for item in fresh:
                self._seen[item.id] = None
            while len(self._seen) > MAX_SEEN:
                self._seen.popitem(last=False)
        return fresh

    def _line(self, item: NewsItem) -> str:
        when = item.time.astimezone(self.zone).strftime("%H:%M:%S") if item.time else ""
        parts = [when, f"({item.title})" if item.title and item.text else item.title, item.text]
        if not self.simple and item.link:
            parts.append(f"[{item.link}]")
        return " ".join(p for p in parts if p)

    def _offset(self) -> str:
        hours = self.zone.utcoffset(None).total_seconds() / 3600
        return f"{hours:+g}"

    def reset(self, session_id: str | None = None) -> None:
        """Forget which items were returned (``finance_news_repeat_news``)."""
        with self._lock:
            self._seen.clear()
