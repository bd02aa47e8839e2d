"""Registry support for chatgpt-tool-hub 0.5's names: aliases, the order of the names, pure mode's error text,
and subtrees building tools that have keys."""

from __future__ import annotations

import logging

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, ToolRegistry
from chatgpt_tool_hub.tools.context import pure_context
from chatgpt_tool_hub.tools.plugins.meteo import MeteoWeatherTool
from chatgpt_tool_hub.tools.registry import _longest_first
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import chatbot_kwargs, service_server  # noqa: F401

ZERO_FIVE_NAMES = ["python", "terminal", "url-get", "meteo", "meteo-weather", "news", "news-api", "morning-news",
                   "finance-news", "bing-search", "google-search", "searxng-search", "wolfram-alpha", "wikipedia",
                   "arxiv", "summary", "browser", "email", "sms", "stt", "tts", "visual", "wechat"]


# ---- aliases ---------------------------------------------------------------------------------------------


def test_every_name_chatgpt_tool_hub_0_5_registered_is_known():
    names = main_tool_register.get_registered_tool_names()
    assert set(ZERO_FIVE_NAMES) <= set(names), sorted(set(ZERO_FIVE_NAMES) - set(names))
    assert main_tool_register.aliases() == {"meteo": "meteo-weather"}
    assert main_tool_register.resolve_name("meteo") == "meteo-weather"
    assert main_tool_register.resolve_name("METEO") == "meteo-weather"
    assert "meteo" in main_tool_register and "meteo" not in [e.name for e in main_tool_register.entries()]


def test_meteo_is_the_weather_tool_under_a_second_name(caplog):
    with caplog.at_level(logging.WARNING, logger="chatgpt_tool_hub"):
        app = AppFactory().create_app(tools_list=["url-get", "meteo"], llm=ScriptedLLM([]), **chatbot_kwargs())
    assert app.tool_names.count("meteo-weather") == 1 and "meteo" not in app.tool_names
    assert "two tools are named" not in caplog.text  # the default meteo-weather and the listed meteo are one tool
    app = AppFactory().create_app(tools_list=["meteo"], llm=ScriptedLLM([]), no_default=True)
    assert app.tool_names == ["meteo-weather"]
    factory, keys = main_tool_register.get_registered_tool()["meteo"]
    assert isinstance(factory(**chatbot_kwargs()), MeteoWeatherTool) and keys == []


def test_aliases_of_a_registry_of_ones_own():
    reg = ToolRegistry()
    reg.register_tool("weather", MeteoWeatherTool.from_context, takes_context=True)
    reg.register_alias("wetter", "weather")
    assert reg.get_registered_tool_names() == ["weather", "wetter"] and reg.resolve_name("Wetter") == "weather"
    assert reg.build("wetter").name == "meteo-weather"
    copy = reg.copy()
    assert copy.aliases() == {"wetter": "weather"}
    with pytest.raises(ConfigError, match="there is no tool named 'nothing'"):
        reg.register_alias("x", "nothing")
    with pytest.raises(ConfigError, match="a tool of that name is registered"):
        reg.register_alias("weather", "weather")
    reg.register_tool("wetter", lambda **kw: MeteoWeatherTool())  # a tool of its own replaces the alias
    assert reg.aliases() == {} and reg.get_registered_tool_names() == ["weather", "wetter"]
    reg.register_alias("w", "weather")
    assert reg.unregister_tool("w") is True and reg.unregister_tool("w") is False
    reg.register_alias("w2", "weather")
    reg.unregister_tool("weather")  # an alias of a tool that is gone is gone too
    assert "w2" not in reg.get_registered_tool_names() and reg.resolve_name("w2") is None
    assert copy.aliases() == {"wetter": "weather"}  # copies are independent


# ---- the order of the names -------------------------------------------------------------------------------


def test_no_name_comes_before_a_longer_name_it_begins():
    names = main_tool_register.get_registered_tool_names()
    for i, name in enumerate(names):
        for later in names[i + 1:]:
            assert not later.startswith(name), f"{name!r} comes before {later!r}"
    assert _longest_first(["a", "b", "ab", "abc", "ba"]) == ["abc", "ab", "a", "ba", "b"]


def test_the_plugins_prefix_match_picks_the_tool_named_in_the_message():
    """chatgpt-on-wechat runs the first registered name the message starts with, in pure mode."""
    def picked(query: str) -> str:
        return next(n for n in main_tool_register.get_registered_tool_names() if query.startswith(n))

    assert picked("meteo-weather Berlin") == "meteo-weather"
    assert picked("meteo Berlin") == "meteo"
    assert picked("news-api OpenAI") == "news-api"
    assert picked("news 今天有什么新闻") == "news"
    assert picked("visual-question-answering image/a.png what?") == "visual-question-answering"
    assert picked("visual image/a.png") == "visual"


# ---- pure mode: errors as the text the LLM would see ------------------------------------------------------


class Picky(Tool):
    name = "picky"
    description = "Refuses most things."
    secret = ""

    @classmethod
    def from_context(cls, context):
        tool = cls()
        tool.secret = context.settings.get("picky_api_key", "")
        return tool

    def _run(self, text: str) -> str:
        if text.strip() == "bug":
            raise RuntimeError("a bug")
        if text.strip() == "refuse":
            raise ToolExecutionError(f"the service refused the key {self.secret}")
        if text.strip() != "ok":
            raise ToolInputError("say ok")
        return "fine"


def test_pure_mode_returns_user_errors_as_text_and_keeps_raising_elsewhere():
    reg = ToolRegistry()
    reg.register_tool("picky", Picky.from_context, takes_context=True)
    factory, _ = reg.get_registered_tool()["picky"]
    tool = factory(picky_api_key="pk-SECRET-0123", junk="")
    assert tool.run("ok") == "fine"
    assert tool.run("nonsense") == "Error: say ok"  # what the engine's observation says
    assert tool.run("refuse") == "Error: the service refused the key ***"
    with pytest.raises(RuntimeError):  # a bug is not a user error: the host logs it
        tool.run("bug")
    built = reg.build("picky")  # built by Python code: raises as before
    with pytest.raises(ToolInputError):
        built.run("nonsense")
    with pytest.raises(ToolInputError):
        Picky.from_config().run("nonsense")


def test_a_pure_mode_tool_inside_an_engine_still_fails_as_a_step():
    reg = ToolRegistry()
    reg.register_tool("picky", Picky.from_context, takes_context=True)
    tool = reg.get_registered_tool()["picky"][0]()
    app = AppFactory().create_app(tools_list=[tool], llm=ScriptedLLM([act("picky", "nonsense"), answer("ok")]),
                                  no_default=True)
    step = app.run("q").steps[0]
    assert step.status == "error" and step.observation == "Error: say ok"


def test_pure_mode_covers_0_5_factories_but_not_shared_instances():
    reg = ToolRegistry()
    reg.register_tool("old-style", lambda **kwargs: Picky(), [])
    assert reg.get_registered_tool()["old-style"][0](anything="").run("x") == "Error: say ok"
    shared = Picky()
    reg.register_tool("shared", shared)
    assert reg.get_registered_tool()["shared"][0]() is shared
    with pytest.raises(ToolInputError):  # the registrant's own object is left as it is
        shared.run("x")


def test_pure_mode_says_why_a_tool_cannot_be_built():
    factory, keys = main_tool_register.get_registered_tool()["bing-search"]
    out = factory(**chatbot_kwargs()).run(" python release")
    assert out.startswith("Error: tool 'bing-search' needs bing_subscription_key: pass it to create_app")
    out = main_tool_register.get_registered_tool()["python"][0](python_timeout="soon").run("1")
    assert out.startswith("Error: setting 'python_timeout' must be float")


def test_pure_mode_of_a_service_tool_against_a_refusing_service(service_server):
    service_server.route("/v7.0/search", {"error": {"message": "Access denied"}}, status=401)
    factory, _ = main_tool_register.get_registered_tool()["bing-search"]
    out = factory(**chatbot_kwargs(bing_subscription_key="bing-SECRET-77",
                                   bing_search_url=service_server.url + "/v7.0/search")).run(" anything")
    assert out.startswith("Error: 127.0.0.1") and "HTTP 401" in out and "bing_subscription_key" in out
    assert "bing-SECRET-77" not in out


# ---- subtrees build tools with keys -------------------------------------------------------------------


def test_a_subtree_builds_a_keyed_tool_of_the_app():
    """A subtree's context hides the other tools' keys; the tool it builds gets its own (failed before: the
    required key was checked in the subtree's view, so a set key counted as missing)."""
    context = pure_context({"bing_subscription_key": "bing-key-1"}, registry=main_tool_register)
    scoped = context.for_tool("browser")
    assert scoped.settings.get("bing_subscription_key") is None  # hidden from the subtree itself
    assert scoped.build_tool("bing-search")._key == "bing-key-1"


def test_browser_use_summary_leaves_the_summary_tool_out():
    from chatgpt_tool_hub.tools.subtree import BrowserTool

    assert [t.name for t in BrowserTool.from_config().tools] == ["url-get", "summary"]
    assert [t.name for t in BrowserTool.from_config(browser_use_summary="false").tools] == ["url-get"]
    factory, _ = main_tool_register.get_registered_tool()["browser"]
    assert [t.name for t in factory(**chatbot_kwargs(browser_use_summary=False)).tools] == ["url-get"]
