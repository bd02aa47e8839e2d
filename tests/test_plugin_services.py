"""Service plugin tools against a local fixture server: rendering, requests sent, and every failure mode."""

from __future__ import annotations

import logging

import pytest
import requests

from chatgpt_tool_hub.errors import ConfigError, MissingKeyError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.runtime import http as _http
from chatgpt_tool_hub.tools.plugins.arxiv import ArxivTool
from chatgpt_tool_hub.tools.plugins.meteo import MeteoWeatherTool
from chatgpt_tool_hub.tools.plugins.search import BingSearchTool, GoogleSearchTool, SearxngSearchTool
from chatgpt_tool_hub.tools.plugins.wikipedia import WikipediaTool
from chatgpt_tool_hub.tools.plugins.wolfram import WolframAlphaTool
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from service_fixtures import Reply, chatbot_kwargs, closed_port_url, service_server  # noqa: F401

BING_KEY = "bing-SECRET-key-0123456789"
GOOGLE_KEY = "AIza-SECRET-google-key-987"
CSE_ID = "cse-SECRET-id-555"
APPID = "WOLF-SECRET-APPID"
SECRETS = (BING_KEY, GOOGLE_KEY, CSE_ID, APPID)

GEO_BERLIN = {"results": [{"name": "Berlin", "latitude": 52.52437, "longitude": 13.41053, "country": "Germany",
                           "admin1": "Land Berlin", "timezone": "Europe/Berlin", "country_code": "DE"}]}
FORECAST = {
    "timezone": "Europe/Berlin",
    "current_units": {"temperature_2m": "°C", "wind_speed_10m": "km/h"},
    "current": {"time": "2024-05-01T12:00", "temperature_2m": 18.3, "apparent_temperature": 17.0,
                "relative_humidity_2m": 50, "wind_speed_10m": 11.2, "weather_code": 2},
    "daily_units": {"temperature_2m_max": "°C", "precipitation_sum": "mm"},
    "daily": {"time": ["2024-05-01", "2024-05-02"], "weather_code": [2, 61], "temperature_2m_max": [20.3, 15.0],
              "temperature_2m_min": [12.1, 9.5], "precipitation_sum": [0.0, 4.2],
              "precipitation_probability_max": [10, 80]},
}


def atom(*entries: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom" '
            'xmlns:arxiv="http://arxiv.org/schemas/atom">\n<title>query</title>\n' + "".join(entries) + "</feed>")


def entry(n: int, title: str, summary: str, authors=("Ada Lovelace", "Alan Turing")) -> str:
    names = "".join(f"<author><name>{a}</name></author>" for a in authors)
    return (f"<entry><id>http://arxiv.org/abs/2401.0000{n}v1</id><updated>2024-01-0{n}T00:00:00Z</updated>"
            f"<published>2024-01-0{n}T00:00:00Z</published><title>{title}</title><summary>{summary}</summary>"
            f"{names}<arxiv:comment>10 pages</arxiv:comment>"
            f'<link href="http://arxiv.org/abs/2401.0000{n}v1" rel="alternate" type="text/html"/>'
            f'<link title="pdf" href="http://arxiv.org/pdf/2401.0000{n}v1" rel="related" type="application/pdf"/>'
            f'<category term="cs.CL" scheme="http://arxiv.org/schemas/atom"/></entry>')


def wiki_api(request: dict):
    query = request["query"]
    if query.get("list") == "search":
        if query["srsearch"] == "nothing here":
            return {"query": {"searchinfo": {"suggestion": "something here"}, "search": []}}
        return {"query": {"search": [{"title": "Alan Turing"}, {"title": "Turing machine"}]}}
    assert query["prop"] == "extracts|info"
    return {"query": {"pages": [
        {"title": "Turing machine", "extract": "A Turing machine is a model of computation.",
         "fullurl": "https://en.wikipedia.org/wiki/Turing_machine"},
        {"title": "Alan Turing", "extract": "Alan Mathison Turing was an English mathematician. " * 10},
    ]}}


def make(kind: str, url: str, **extra):
    """Each service tool built through its ``from_config`` with the chatbot's junk kwargs."""
    settings = {
        "meteo": dict(meteo_geocoding_url=url + "/geo", meteo_forecast_url=url + "/forecast"),
        "wikipedia": dict(wikipedia_api_url=url + "/w/api.php"),
        "arxiv": dict(arxiv_api_url=url + "/api/query"),
        "bing": dict(bing_subscription_key=BING_KEY, bing_search_url=url + "/v7.0/search"),
        "google": dict(google_api_key=GOOGLE_KEY, google_cse_id=CSE_ID, google_search_url=url + "/customsearch/v1"),
        "searxng": dict(searxng_search_host=url),
        "wolfram": dict(wolfram_alpha_appid=APPID, wolfram_alpha_url=url + "/api/v1/llm-api"),
    }[kind]
    cls = {"meteo": MeteoWeatherTool, "wikipedia": WikipediaTool, "arxiv": ArxivTool, "bing": BingSearchTool,
           "google": GoogleSearchTool, "searxng": SearxngSearchTool, "wolfram": WolframAlphaTool}[kind]
    return cls.from_config(**chatbot_kwargs(**{**settings, **extra}))


ALL_KINDS = ["meteo", "wikipedia", "arxiv", "bing", "google", "searxng", "wolfram"]


# ---- meteo-weather ---------------------------------------------------------------------


def test_meteo_happy_path(service_server):
    service_server.route("/geo", GEO_BERLIN).route("/forecast", FORECAST)
    out = make("meteo", service_server.url).run("Berlin, 2 days")
    assert "Weather for Berlin, Land Berlin, Germany (52.52, 13.41; time zone Europe/Berlin)" in out
    assert "Now (2024-05-01T12:00): 18.3 °C (feels like 17 °C), partly cloudy, wind 11.2 km/h" in out
    assert "- 2024-05-02: slight rain, 9.5 to 15 °C, precipitation 4.2 mm (80 % chance)" in out
    geo, forecast = service_server.requests
    assert geo["path"] == "/geo" and geo["query"] == {"name": "Berlin", "count": "1", "language": "en",
                                                      "format": "json"}
    assert forecast["query"]["latitude"] == "52.52437" and forecast["query"]["timezone"] == "auto"
    assert forecast["query"]["forecast_days"] == "2"
    assert "temperature_2m_max" in forecast["query"]["daily"] and "weather_code" in forecast["query"]["current"]
    assert geo["headers"]["user-agent"].startswith("chatgpt-tool-hub/")


@pytest.mark.parametrize("tool_input, name, days, language", [
    ({"place": "Berlin", "days": 1}, "Berlin", "1", "en"),
    ('{"city": "Berlin"}', "Berlin", "3", "en"),
    ("北京 5天", "北京", "5", "zh"),
    ("  Berlin  ", "Berlin", "3", "en"),
    ("Berlin 40", "Berlin", "16", "en"),
])
def test_meteo_input_forms(service_server, tool_input, name, days, language):
    service_server.route("/geo", GEO_BERLIN).route("/forecast", FORECAST)
    make("meteo", service_server.url).run(tool_input)
    geo, forecast = service_server.requests
    assert (geo["query"]["name"], geo["query"]["language"], forecast["query"]["forecast_days"]) == (name, language,
                                                                                                  days)


def test_meteo_qualifier_picks_the_matching_country(service_server):
    places = {"results": [{"name": "Paris", "latitude": 48.85, "longitude": 2.35, "country": "France"},
                          {"name": "Paris", "latitude": 33.66, "longitude": -95.55, "country": "United States",
                           "admin1": "Texas"}]}
    service_server.route("/geo", places).route("/forecast", FORECAST)
    out = make("meteo", service_server.url).run("Paris, Texas")
    assert "Paris, Texas, United States" in out
    assert service_server.requests[0]["query"]["count"] == "10"
    assert service_server.requests[1]["query"]["latitude"] == "33.66"


def test_meteo_unknown_place_and_empty_input(service_server):
    service_server.route("/geo", {"generationtime_ms": 0.4})
    out = make("meteo", service_server.url).run("Xyzzyville")
    assert out.startswith("No place called 'Xyzzyville' was found")
    assert service_server.paths() == ["/geo"]  # no forecast request
    with pytest.raises(ToolInputError, match="needs a place name"):
        make("meteo", service_server.url).run("   ")


# ---- wikipedia ---------------------------------------------------------------------------


def test_wikipedia_happy_path(service_server):
    service_server.route("/w/api.php", wiki_api)
    out = make("wikipedia", service_server.url).run("Alan Turing")
    first, second = out.split("\n\n")
    assert first.startswith("Page: Alan Turing\nSummary: Alan Mathison Turing was an English mathematician.")
    assert first.endswith(f"URL: {service_server.url}/wiki/Alan_Turing")  # derived from the API URL
    assert second == ("Page: Turing machine\nSummary: A Turing machine is a model of computation.\n"
                      "URL: https://en.wikipedia.org/wiki/Turing_machine")
    search, extracts = service_server.requests
    assert search["query"]["srsearch"] == "Alan Turing" and search["query"]["srlimit"] == "2"
    assert extracts["query"]["titles"] == "Alan Turing|Turing machine"
    assert extracts["query"]["exintro"] == "1" and extracts["query"]["explaintext"] == "1"


def test_wikipedia_no_results_max_chars_and_api_error(service_server):
    service_server.route("/w/api.php", wiki_api)
    out = make("wikipedia", service_server.url).run("nothing here")
    assert out == "No Wikipedia (en) page matches 'nothing here'. Did you mean 'something here'?"
    short = make("wikipedia", service_server.url, wikipedia_max_chars=200, wikipedia_top_k_results=1)
    text = short.run("Alan Turing")
    assert "…" in text and len(text.split("Summary: ")[1].split("\n")[0]) <= 200
    service_server.route("/w/api.php", {"error": {"code": "badvalue", "info": "Unrecognized value"}})
    with pytest.raises(ToolExecutionError, match="Wikipedia API refused the request: Unrecognized value"):
        make("wikipedia", service_server.url).run("x")


# ---- arxiv ---------------------------------------------------------------------------------


def test_arxiv_simple_rendering_and_params(service_server):
    long_summary = "word " * 200
    service_server.route("/api/query", atom(entry(1, "Attention Please", long_summary),
                                            entry(2, "Second Paper", "Short.", authors=[f"A{i}" for i in range(8)])),
                         content_type="application/atom+xml; charset=utf-8")
    out = make("arxiv", service_server.url).run("attention transformers")
    assert out.startswith("1. Attention Please\n   Authors: Ada Lovelace, Alan Turing\n   Published: 2024-01-01\n"
                          "   URL: http://arxiv.org/abs/2401.00001v1\n   Summary: word word")
    assert out.split("\n\n")[0].endswith(" …") and len(out.split("\n\n")[0]) < 500
    assert "Authors: A0, A1, A2, A3, A4 and 3 more" in out
    query = service_server.requests[0]["query"]
    assert query == {"search_query": "attention transformers", "start": "0", "max_results": "2",
                     "sortBy": "relevance", "sortOrder": "descending"}


def test_arxiv_full_rendering_id_lookup_and_sorting(service_server):
    service_server.route("/api/query", atom(entry(3, "A Paper", "All of the abstract.")))
    tool = make("arxiv", service_server.url, arxiv_simple=False, arxiv_sort_by="submittedDate",
                arxiv_sort_order="ascending")
    out = tool.run("arXiv:1706.03762v7")
    assert "PDF: http://arxiv.org/pdf/2401.00003v1" in out and "Categories: cs.CL" in out
    assert "Comment: 10 pages" in out and "Summary: All of the abstract." in out
    assert service_server.requests[0]["query"] == {"id_list": "1706.03762v7", "start": "0", "max_results": "2"}
    tool.run("ti:transformer")
    assert service_server.requests[1]["query"]["sortBy"] == "submittedDate"
    assert service_server.requests[1]["query"]["sortOrder"] == "ascending"
    with pytest.raises(ConfigError, match="arxiv_sort_by"):
        make("arxiv", service_server.url, arxiv_sort_by="popularity")


def test_arxiv_no_results_error_feed_and_bad_xml(service_server):
    service_server.route("/api/query", atom())
    assert make("arxiv", service_server.url).run("qwertyuiop") == ("No arXiv paper matches 'qwertyuiop'. "
                                                                   "Try other keywords.")
    error = ("<entry><id>http://arxiv.org/api/errors#incorrect_id_format</id><title>Error</title>"
             "<summary>incorrect id format for 1234</summary></entry>")
    service_server.route("/api/query", atom(error))
    with pytest.raises(ToolExecutionError, match="arXiv rejected the query: incorrect id format"):
        make("arxiv", service_server.url).run("id:1234")
    service_server.route("/api/query", "<feed><unclosed></feed>", content_type="application/atom+xml")
    with pytest.raises(ToolExecutionError, match="invalid XML"):
        make("arxiv", service_server.url).run("x")


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>',
    '<!doctype feed SYSTEM "file:///etc/passwd">',
    '<!ENTITY x "y">',
])
def test_arxiv_refuses_entity_declarations(service_server, doctype):
    body = '<?xml version="1.0"?>\n' + doctype + '\n<feed xmlns="http://www.w3.org/2005/Atom"><entry>' \
           "<title>&lol2;</title></entry></feed>"
    service_server.route("/api/query", body, content_type="application/atom+xml")
    with pytest.raises(ToolExecutionError, match="DOCTYPE or ENTITY"):
        make("arxiv", service_server.url).run("lol")


# ---- web search ----------------------------------------------------------------------------


def test_bing_sends_the_key_in_a_header_only(service_server, caplog):
    caplog.set_level(logging.DEBUG)
    service_server.route("/v7.0/search", {"webPages": {"value": [
        {"name": "Python", "url": "https://python.org", "snippet": "The  official\nhome."},
        {"name": "PyPI", "url": "https://pypi.org", "snippet": "Packages."},
        {"name": "Third", "url": "https://example.org", "snippet": "Cut by top k."}]}})
    out = make("bing", service_server.url).run("python")
    assert out == ("1. Python\n   The official home.\n   https://python.org\n\n"
                   "2. PyPI\n   Packages.\n   https://pypi.org")
    request = service_server.requests[0]
    assert request["headers"]["ocp-apim-subscription-key"] == BING_KEY
    assert BING_KEY not in request["raw_query"]
    assert request["query"]["q"] == "python" and request["query"]["count"] == "2"
    assert BING_KEY not in out and BING_KEY not in caplog.text


def test_bing_no_results_and_refused_key(service_server):
    service_server.route("/v7.0/search", {"_type": "SearchResponse"})
    assert make("bing", service_server.url).run("zzzz") == "No Bing results for 'zzzz'."
    service_server.route("/v7.0/search", {"error": {"code": "401", "message": f"Access denied for key {BING_KEY}"}},
                         status=401)
    with pytest.raises(ToolExecutionError) as info:
        make("bing", service_server.url).run("zzzz")
    assert "HTTP 401" in str(info.value) and "bing_subscription_key" in str(info.value)
    assert BING_KEY not in str(info.value) and "***" in str(info.value)


def test_google_params_and_scrubbed_errors(service_server, caplog):
    caplog.set_level(logging.DEBUG)
    service_server.route("/customsearch/v1", {"items": [
        {"title": "Result", "link": "https://r.example", "snippet": "Snippet."}]})
    out = make("google", service_server.url, google_top_k_results=50).run("query words")
    assert out == "1. Result\n   Snippet.\n   https://r.example"
    request = service_server.requests[0]
    assert request["query"] == {"cx": CSE_ID, "q": "query words", "num": "10"}
    assert request["headers"]["x-goog-api-key"] == GOOGLE_KEY
    service_server.route("/customsearch/v1", {"error": {"code": 400, "message": f"API key {GOOGLE_KEY} not valid "
                                                                                 f"for cx={CSE_ID}"}}, status=400)
    with pytest.raises(ToolExecutionError) as info:
        make("google", service_server.url).run("q")
    assert "HTTP 400" in str(info.value) and "not valid" in str(info.value)
    for secret in (GOOGLE_KEY, CSE_ID):
        assert secret not in str(info.value) and secret not in caplog.text


def test_searxng_host_forms_answers_and_json_hint(service_server):
    service_server.route("/search", {"answers": ["42"], "results": [
        {"title": "Life", "url": "https://life.example", "content": "The answer."}]})
    out = make("searxng", service_server.url + "/").run("meaning of life")
    assert out == "Answer: 42\n\n1. Life\n   The answer.\n   https://life.example"
    assert service_server.requests[0]["query"] == {"q": "meaning of life", "format": "json", "pageno": "1"}
    tool = SearxngSearchTool.from_config(searxng_search_host=service_server.url.replace("http://", "") + "/search")
    assert tool.search_url == service_server.url + "/search"
    service_server.route("/search", {"results": []})
    assert make("searxng", service_server.url).run("nothing") == "No SearXNG results for 'nothing'."
    service_server.route("/search", "Forbidden", status=403)
    with pytest.raises(ToolExecutionError, match="format=json"):
        make("searxng", service_server.url).run("x")


# ---- wolfram-alpha -----------------------------------------------------------------------


def test_wolfram_llm_api_short_api_and_uninterpretable(service_server, caplog):
    caplog.set_level(logging.DEBUG)
    service_server.route("/api/v1/llm-api", f"Query: \"2+2\"\nResult: 4\n(appid {APPID})")
    out = make("wolfram", service_server.url).run("2+2")
    assert out.startswith('Query: "2+2"\nResult: 4') and APPID not in out
    assert service_server.requests[0]["query"] == {"input": "2+2", "appid": APPID, "maxchars": "3000"}
    service_server.route("/v1/result", "4")
    short = make("wolfram", service_server.url, wolfram_alpha_url=service_server.url + "/v1/result")
    assert short.run("2+2") == "4"
    assert service_server.requests[1]["query"] == {"i": "2+2", "appid": APPID}
    service_server.route("/api/v1/llm-api", "No good interpretation. Try: 'population France'", status=501)
    out = make("wolfram", service_server.url).run("how many people in france")
    assert out.startswith("Wolfram|Alpha could not interpret 'how many people in france'")
    assert "population France" in out
    service_server.route("/api/v1/llm-api", "Error 1: Invalid appid", status=403)
    with pytest.raises(ToolExecutionError, match="wolfram_alpha_appid"):
        make("wolfram", service_server.url).run("2+2")
    assert "appid=***" in caplog.text and APPID not in caplog.text  # urllib3's request lines are redacted


# ---- failure modes, for every service tool ------------------------------------------------

QUERIES = {"meteo": "Berlin", "wikipedia": "x", "arxiv": "x", "bing": "x", "google": "x", "searxng": "x",
           "wolfram": "x"}


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_http_500_becomes_an_observation(service_server, kind):
    service_server.fallback = Reply({"error": {"message": "backend exploded"}}, status=500)
    with pytest.raises(ToolExecutionError) as info:
        make(kind, service_server.url).run(QUERIES[kind])
    assert "answered HTTP 500 (Internal Server Error): backend exploded" in str(info.value)
    assert_no_secret(str(info.value))


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k not in ("arxiv", "wolfram")])  # JSON services
def test_invalid_json_becomes_an_observation(service_server, kind):
    service_server.fallback = Reply("<html><body>captive portal</body></html>", content_type="text/html")
    with pytest.raises(ToolExecutionError, match=r"answered with invalid JSON \(text/html; starts with '<html>"):
        make(kind, service_server.url).run(QUERIES[kind])


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_timeout_becomes_an_observation(service_server, kind):
    service_server.fallback = Reply({}, sleep=1.0)
    with pytest.raises(ToolExecutionError) as info:
        make(kind, service_server.url, plugin_timeout=0.2).run(QUERIES[kind])
    assert str(info.value).startswith("could not reach 127.0.0.1:")
    assert "no answer within 0.2 s" in str(info.value)
    assert_no_secret(str(info.value))


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_unreachable_service_becomes_an_observation(kind):
    url = closed_port_url()
    with pytest.raises(ToolExecutionError) as info:
        make(kind, url).run(QUERIES[kind])
    assert str(info.value).startswith(f"could not reach {url[len('http://'):]}: connection refused")
    assert_no_secret(str(info.value))


def test_broken_proxy_and_oversized_answer(service_server):
    service_server.route("/v7.0/search", {"webPages": {"value": []}})
    with pytest.raises(ToolExecutionError, match="the proxy failed"):
        make("bing", service_server.url, proxy=closed_port_url()).run("x")
    service_server.route("/big", "x" * 5000)
    with pytest.raises(ToolExecutionError, match="more than 1000 bytes"):
        _http.get_text(service_server.url + "/big", max_bytes=1000)


def test_errors_surface_as_observations_inside_a_run(service_server):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    from helpers import act, answer

    service_server.fallback = Reply({"error": "down"}, status=503)
    llm = ScriptedLLM([act("bing-search", "weather"), answer("sorry")])
    app = AppFactory().create_app(tools_list=["bing-search"], llm=llm, no_default=True,
                                  bing_subscription_key=BING_KEY, bing_search_url=service_server.url + "/s")
    result = app.run("search the weather")
    assert result.output == "sorry"
    assert "answered HTTP 503" in result.steps[0].observation and BING_KEY not in result.steps[0].observation


# ---- the _http helper ----------------------------------------------------------------------


def test_connection_reasons_and_scrubbing():
    dns = requests.exceptions.ConnectionError("NameResolutionError: Failed to resolve 'api.example.com'")
    assert "could not be resolved" in _http._connection_reason(dns, [])
    other = requests.exceptions.ConnectionError(f"weird failure url: /search?q=x&key={BING_KEY}")
    reason = _http._connection_reason(other, [BING_KEY])
    assert BING_KEY not in reason and "?…" in reason
    secrets = _http._secret_values({"key": "a b/c+d", "q": "visible"}, {"X-Api-Key": "hdr-secret"}, ())
    text = _http.scrub("key=a+b%2Fc%2Bd and a b/c+d and hdr-secret and visible", secrets)
    assert "visible" in text and "a b/c+d" not in text and "a+b%2Fc%2Bd" not in text and "hdr-secret" not in text
    assert _http.scrub("via http://user:pw@proxy:3128") == "via http://***@proxy:3128"
    assert _http.host_of("https://user:pw@api.example.com:8443/x?key=1") == "api.example.com:8443"
    assert repr(_http.HttpSettings.from_config({"proxy": "http://u:p@h:1", "plugin_timeout": ""})) == \
        "HttpSettings(timeout=15, proxy=set)"


# ---- construction --------------------------------------------------------------------------


SERVICE_TOOLS = {
    "meteo-weather": {}, "wikipedia": {}, "arxiv": {}, "summary": {},
    "bing-search": {"bing_subscription_key": BING_KEY},
    "google-search": {"google_api_key": GOOGLE_KEY, "google_cse_id": CSE_ID},
    "searxng-search": {"searxng_search_host": "http://127.0.0.1:9"},
    "wolfram-alpha": {"wolfram_alpha_appid": APPID},
}


@pytest.mark.parametrize("name", sorted(SERVICE_TOOLS))
def test_registry_builds_each_tool_from_the_chatbots_kwargs(name):
    tool = main_tool_register.build(name, **chatbot_kwargs(**SERVICE_TOOLS[name]))
    assert tool.name == name and tool.description
    assert tool.openai_schema()["function"]["name"] == name
    assert_no_secret(repr(tool))
    if SERVICE_TOOLS[name]:  # the chatbot passes the keys as empty strings: the registry names the missing one
        with pytest.raises(MissingKeyError, match=next(iter(SERVICE_TOOLS[name]))):
            main_tool_register.build(name, **chatbot_kwargs())


def test_defaults_of_the_service_urls():
    assert make("meteo", "").geocoding_url == "/geo"
    assert MeteoWeatherTool.from_config(**chatbot_kwargs()).forecast_url == "https://api.open-meteo.com/v1/forecast"
    wiki = WikipediaTool.from_config(**chatbot_kwargs(wikipedia_lang="de"))
    assert wiki.api_url == "https://de.wikipedia.org/w/api.php" and wiki.top_k_results == 2
    assert ArxivTool.from_config(**chatbot_kwargs()).api_url == "http://export.arxiv.org/api/query"
    bing = BingSearchTool.from_config(**chatbot_kwargs(bing_subscription_key=BING_KEY, bing_search_url=""))
    assert bing.search_url == "https://api.bing.microsoft.com/v7.0/search"
    google = GoogleSearchTool.from_config(google_api_key=GOOGLE_KEY, google_cse_id=CSE_ID)
    assert google.search_url == "https://www.googleapis.com/customsearch/v1" and google.top_k_results == 2
    wolfram = WolframAlphaTool.from_config(wolfram_alpha_appid=APPID)
    assert wolfram.url == "https://www.wolframalpha.com/api/v1/llm-api" and wolfram.http.timeout == 15
