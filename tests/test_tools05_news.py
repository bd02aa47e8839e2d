"""The news family against local fakes of their services: ``news-api``, ``morning-news``, ``finance-news`` and
the ``news`` subtree over them."""

from __future__ import annotations

import json
import logging

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, MissingKeyError, ToolExecutionError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.plugins.finance_news import FinanceNewsTool, filter_words, parse_feed
from chatgpt_tool_hub.tools.plugins.news import MorningNewsTool, NewsApiTool
from chatgpt_tool_hub.tools.subtree import NewsTool
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import chatbot_kwargs, service_server  # noqa: F401

NEWS_KEY = "news-SECRET-key-0001"
ZAOBAO_KEY = "zaobao-SECRET-token-02"

ARTICLES = {"status": "ok", "totalResults": 2, "articles": [
    {"source": {"id": None, "name": "Example Times"}, "author": "A", "title": "Rates stay put",
     "description": "The central bank held rates.", "url": "https://news.example.test/rates",
     "publishedAt": "2025-06-10T08:00:00Z"},
    {"source": {"name": "Daily"}, "title": "Chips rally", "description": None, "url": "https://daily.example.test/c",
     "publishedAt": "2025-06-10T07:00:00Z"},
]}
ZAOBAO = {"code": 200, "msg": "success", "data": {
    "date": "2025-06-10", "news": ["1、第一条新闻；", "2、第二条新闻；"], "weiyu": "【微语】早安。",
    "image": "https://img.example.test/zaobao.png", "head_image": "https://img.example.test/head.png"}}
FLASH = [  # the JSON shape 0.5's feed sends, newest first, inside a JavaScript assignment
    {"id": "20250610083000000001", "time": "2025-06-10T00:30:00.000Z",
     "data": {"content": "<b>Gold</b> rises above 2400<br/>dollars", "title": "", "pic": ""}},
    {"id": "20250610080000000002", "time": "2025-06-10T00:00:00.000Z",
     "data": {"content": "Oil falls 1%", "title": "Energy", "pic": "https://img.example.test/oil.png"}},
    {"id": "20250610075900000003", "time": "2025-06-09T23:59:00.000Z", "data": {"content": ""}},
]


def news_api(server, **extra):
    return NewsApiTool.from_config(**chatbot_kwargs(**{"news_api_key": NEWS_KEY, "news_api_url": server.url + "/v2",
                                                       **extra}))


# ---- news-api ------------------------------------------------------------------------------------------


def test_news_api_searches_with_keywords_and_sends_the_key_in_a_header(service_server):
    service_server.route("/v2/everything", ARTICLES)
    out = news_api(service_server, news_api_top_k_results=2).run("central bank")
    assert out == ("1. Rates stay put (Example Times, 2025-06-10)\n   The central bank held rates.\n"
                   "   https://news.example.test/rates\n\n2. Chips rally (Daily, 2025-06-10)\n"
                   "   https://daily.example.test/c")
    request = service_server.requests[0]
    assert request["headers"]["x-api-key"] == NEWS_KEY and "apiKey" not in request["query"]
    assert request["query"] == {"q": "central bank", "sortBy": "publishedAt", "pageSize": "2"}


def test_news_api_top_headlines_without_a_query_or_with_a_category(service_server):
    service_server.route("/v2/top-headlines", ARTICLES)
    tool = news_api(service_server, news_api_country="de")
    tool.run("")
    tool.run({"category": "Technology", "query": "AI"})
    assert service_server.requests[0]["query"] == {"country": "de", "pageSize": "5"}
    assert service_server.requests[1]["query"] == {"country": "de", "pageSize": "5", "category": "technology",
                                                   "q": "AI"}


def test_news_api_refusals_are_clear_and_keyless(service_server):
    service_server.route("/v2/everything", {"status": "error", "code": "apiKeyInvalid",
                                            "message": f"Your API key {NEWS_KEY} is invalid."}, status=401)
    with pytest.raises(ToolExecutionError) as info:
        news_api(service_server).run("x")
    assert "HTTP 401" in str(info.value) and "news_api_key" in str(info.value) and NEWS_KEY not in str(info.value)
    service_server.route("/v2/everything", {"status": "error", "code": "rateLimited", "message": "Too many"})
    with pytest.raises(ToolExecutionError, match=r"NewsAPI refused the request \(rateLimited\): Too many"):
        news_api(service_server).run("x")
    service_server.route("/v2/everything", {"status": "ok", "articles": []})
    assert news_api(service_server).run("nothing") == "No NewsAPI articles for 'nothing'."


# ---- morning-news --------------------------------------------------------------------------------------


def test_morning_news_reads_the_alapi_zaobao_shape(service_server):
    service_server.route("/api/zaobao", ZAOBAO)
    url = service_server.url + "/api/zaobao"
    tool = MorningNewsTool.from_config(**chatbot_kwargs(morning_news_api_key=ZAOBAO_KEY, morning_news_url=url))
    assert tool.run("早报") == "2025-06-10\n1、第一条新闻；\n2、第二条新闻；\n【微语】早安。"
    assert service_server.requests[0]["query"] == {"token": ZAOBAO_KEY, "format": "json"}
    full = MorningNewsTool.from_config(morning_news_api_key=ZAOBAO_KEY, morning_news_url=url,
                                       morning_news_simple=False).run("")
    assert full.startswith("今日日期：2025-06-10\n今日早报：\n1、") and full.endswith("图片：https://img.example.test/zaobao.png")
    image = MorningNewsTool.from_config(morning_news_api_key=ZAOBAO_KEY, morning_news_url=url,
                                        morning_news_output_type="image").run("")
    assert image.value == "https://img.example.test/zaobao.png"


def test_morning_news_errors_name_the_key_and_hide_it(service_server, caplog):
    service_server.route("/api/zaobao", {"code": 102, "msg": "token错误", "data": None})
    tool = MorningNewsTool.from_config(morning_news_api_key=ZAOBAO_KEY, morning_news_url=service_server.url + "/api/zaobao")
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ToolExecutionError, match=r"refused the request \(code 102\): token错误; check morning_news_api_key"):
            tool.run("")
    assert ZAOBAO_KEY not in caplog.text
    with pytest.raises(ConfigError, match="morning_news_output_type must be one of text, image"):
        MorningNewsTool.from_config(morning_news_api_key="k", morning_news_output_type="audio")


# ---- finance-news --------------------------------------------------------------------------------------


def finance(server, **extra):
    return FinanceNewsTool.from_config(**chatbot_kwargs(**{"finance_news_url": server.url + "/flash", **extra}))


def test_finance_news_parses_0_5s_feed_oldest_first_in_utc_plus_8(service_server):
    service_server.route("/flash", "var newest = " + json.dumps(FLASH) + ";",
                         content_type="application/javascript")
    lines = finance(service_server).run("").splitlines()
    assert lines[1:] == ["08:00:00 (Energy) Oil falls 1%", "08:30:00 Gold rises above 2400 dollars"]
    full = finance(service_server, finance_news_simple=False).run("")
    assert full.startswith("Financial news, ") and "(UTC+8), 2 item(s)" in full
    assert "08:00:00 (Energy) Oil falls 1% [https://img.example.test/oil.png]" in full


def test_finance_news_filter_and_repeat_options(service_server):
    service_server.route("/flash", FLASH)
    kept = finance(service_server, finance_news_filter=True, finance_news_filter_list=["Gold"]).run("")
    assert kept.splitlines()[1:] == ["08:30:00 Gold rises above 2400 dollars"]
    off = finance(service_server, finance_news_filter=False, finance_news_filter_list=["Gold"]).run("")
    assert len(off.splitlines()) == 3  # the list only counts with finance_news_filter on
    none = finance(service_server, finance_news_filter=True, finance_news_filter_list="silver，copper").run("")
    assert none.endswith("mentions any of: silver, copper.")
    tool = finance(service_server, finance_news_repeat_news=True)
    assert len(tool.run("").splitlines()) == 3
    assert tool.run("").startswith("No finance news at 127.0.0.1")  # nothing new since the last call
    tool.reset()
    assert len(tool.run("").splitlines()) == 3


def test_finance_news_reads_rss_and_plain_lists_and_refuses_other_answers(service_server):
    rss = ("<?xml version='1.0'?><rss version='2.0'><channel><title>t</title>"
           "<item><title>Newer</title><description>B &amp; C</description><link>https://x.test/2</link>"
           "<pubDate>Tue, 10 Jun 2025 02:00:00 GMT</pubDate></item>"
           "<item><title>Older</title><description>A</description><pubDate>Tue, 10 Jun 2025 01:00:00 GMT</pubDate>"
           "</item></channel></rss>")
    items = parse_feed(rss)
    assert [i.title for i in items] == ["Older", "Newer"] and items[1].text == "B & C"
    assert [i.text for i in parse_feed('{"items": [{"title": "T", "summary": "S"}]}')] == ["S"]
    service_server.route("/flash", "<html>maintenance</html>", content_type="text/html")
    with pytest.raises(ToolExecutionError, match="not an RSS or Atom feed; is finance_news_url right"):
        finance(service_server).run("")
    with pytest.raises(ToolExecutionError, match="DOCTYPE"):
        parse_feed('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><rss/>')
    assert filter_words('["a", " b "]') == ["a", "b"]
    with pytest.raises(ConfigError, match="finance_news_filter_list"):
        filter_words("[oops")


# ---- the news subtree ----------------------------------------------------------------------------------


def test_news_subtree_runs_the_news_tools_of_the_app(service_server):
    service_server.route("/v2/everything", ARTICLES)
    service_server.route("/flash", FLASH)
    llm = ScriptedLLM([act("news", "what happened to rates?"),           # the app's engine
                       act("news-api", "central bank"),                 # the subtree's engine
                       answer("Rates stayed put."),
                       answer("The central bank held rates.")])
    app = AppFactory().create_app(tools_list=["news"], llm=llm, **chatbot_kwargs(
        no_default=True, news_api_key=NEWS_KEY, news_api_url=service_server.url + "/v2",
        finance_news_url=service_server.url + "/flash"))
    news = app.tools[0]
    assert isinstance(news, NewsTool) and [t.name for t in news.tools] == ["news-api", "finance-news"]
    result = app.run("rates?")
    assert result.output == "The central bank held rates."
    assert result.steps[0].observation == "Rates stayed put."
    assert service_server.requests[0]["headers"]["x-api-key"] == NEWS_KEY  # built with its own key
    assert "1. Rates stay put" in llm.requests[2][-1]["content"]


def test_news_needs_no_key_itself_and_keyed_tools_need_theirs_only_when_listed(caplog):
    kwargs = chatbot_kwargs(llm_api_key="sk-x", llm_api_base_url="http://127.0.0.1:9/v1")
    with caplog.at_level(logging.INFO, logger="chatgpt_tool_hub.tools"):
        app = AppFactory().create_app(tools_list=["news"], **kwargs)
    assert [t.name for t in app.tools[-1].tools] == ["finance-news"]
    assert "news-api (needs news_api_key), morning-news (needs morning_news_api_key)" in caplog.text
    with pytest.raises(MissingKeyError, match="tool 'news-api' needs news_api_key"):
        AppFactory().create_app(tools_list=["news-api"], **kwargs)
    with pytest.raises(MissingKeyError, match="tool 'morning-news' needs morning_news_api_key"):
        AppFactory().create_app(tools_list=["morning-news"], **kwargs)
    AppFactory().create_app(tools_list=["finance-news"], **kwargs)


def test_news_in_pure_mode_builds_its_llm_from_the_chatbot_kwargs(chat_server, service_server):
    service_server.route("/flash", FLASH)
    factory, keys = main_tool_register.get_registered_tool()["news"]
    assert keys == []
    tool = factory(**chatbot_kwargs(llm_api_key="sk-pure", llm_api_base_url=chat_server.url,
                                    finance_news_url=service_server.url + "/flash", news_think_depth=2))
    chat_server.replies = [act("finance-news", ""), answer("Gold is up.")]
    assert tool.run(" finance today") == "Gold is up."
    assert chat_server.requests[0]["headers"]["authorization"] == "Bearer sk-pure"
