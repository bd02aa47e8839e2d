"""The call sequence of chatgpt-on-wechat's ``tool`` plugin, against a local chat server.

The plugin imports three names, builds ~60 keyword arguments (most empty),
calls ``init_env`` then ``create_app``, filters its tool list through
``main_tool_register``, asks with the session's messages (whose last user
message is the query), runs single tools in "pure mode", and resets by
building a new app.
"""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.apps.app import App
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from helpers import act, answer
from service_fixtures import CHATBOT_KWARGS, service_server  # noqa: F401

# chatgpt-on-wechat's plugins/tool/config.json.template, and every tool its README and the plugin's kwargs name
TEMPLATE_TOOLS = ["url-get", "meteo"]
README_TOOLS = ["python", "terminal", "url-get", "meteo", "meteo-weather", "news", "news-api", "morning-news",
                "finance-news", "bing-search", "google-search", "searxng-search", "wolfram-alpha", "wikipedia",
                "arxiv", "summary", "browser", "email", "sms", "stt", "tts", "visual", "wechat"]
# keys for the tools that need them (what a user adds to the plugin's config.json "kwargs")
TOOL_KEYS = {"bing_subscription_key": "b", "google_api_key": "g", "google_cse_id": "c",
             "searxng_search_host": "http://127.0.0.1:9", "wolfram_alpha_appid": "w", "news_api_key": "n",
             "morning_news_api_key": "m", "email_sender": "bot@example.test", "email_authorization_code": "e",
             "sms_username": "u", "sms_apikey": "s", "caption_api_key": "v"}


def plugin_kwargs(server_url: str) -> dict:
    """The ~60 keyword arguments the plugin passes, most of them empty, pointed at ``server_url``."""
    return {**CHATBOT_KWARGS, "llm_api_key": "sk-plugin-test-key", "llm_api_base_url": server_url}


class FakePlugin:
    """Drives the library the way the chatbot plugin does."""

    def __init__(self, server_url: str, tools: list[str], **kwargs):
        self.server_url = server_url
        self.tools = tools
        self.extra = kwargs  # the "kwargs" of the plugin's config.json
        self.dropped: list[str] = []  # the plugin logs "[tool] filter invalid tool: ..." for each
        self.app = self.reset_app()

    def reset_app(self) -> App:
        self.app_kwargs = {**plugin_kwargs(self.server_url), **self.extra}
        factory = AppFactory()
        factory.init_env(**self.app_kwargs)
        names = main_tool_register.get_registered_tool_names()
        tool_list = [t for t in self.tools if t in names]
        self.dropped = [t for t in self.tools if t not in names]
        return factory.create_app(tools_list=tool_list, **self.app_kwargs)

    def handle(self, content: str, session: list[dict]) -> str:
        query = content
        for tool_name in main_tool_register.get_registered_tool_names():
            if query.startswith(tool_name):
                func, _ = main_tool_register.get_registered_tool()[tool_name]
                tool = func(**self.app_kwargs)
                return tool.run(query[len(tool_name):])
        session.append({"role": "user", "content": query})
        reply = self.app.ask(query, session)
        session.append({"role": "assistant", "content": reply})
        return reply


def test_chatbot_plugin_call_sequence(chat_server, tmp_path):
    plugin = FakePlugin(chat_server.url, ["python", "url-get", "no-such-tool", "meteo-weather"])
    assert isinstance(plugin.app, App)
    assert plugin.app.tool_names == ["python", "read-file", "list-dir", "url-get", "meteo-weather"]

    session = [{"role": "system", "content": "你是一个聊天机器人。"}]
    chat_server.replies = [act("python", "print(6 * 7)"), answer("答案是 42")]
    assert plugin.handle("6 乘以 7 是多少？", session) == "答案是 42"
    first, second = chat_server.bodies[0], chat_server.bodies[1]
    users = [m for m in first["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["6 乘以 7 是多少？"]  # the query is not duplicated
    assert second["messages"][-1]["content"].startswith("Observation: 42")
    assert first["model"] == "gpt-3.5-turbo"
    auth = chat_server.requests[0]["headers"]["authorization"]
    assert auth == "Bearer sk-plugin-test-key"

    chat_server.replies = [answer("你刚才问的是乘法")]
    assert plugin.handle("我刚才问了什么？", session) == "你刚才问的是乘法"
    contents = [m["content"] for m in chat_server.bodies[2]["messages"][1:]]
    assert contents == ["6 乘以 7 是多少？", "答案是 42", "我刚才问了什么？"]

    # pure mode: one tool, no LLM
    before = len(chat_server.requests)
    assert plugin.handle("python print('pure')", session).strip() == "pure"
    assert len(chat_server.requests) == before

    # reset builds a fresh app
    old = plugin.app
    plugin.app = plugin.reset_app()
    assert plugin.app is not old and plugin.app.history() == []


def test_older_plugin_entry_points_still_work():
    from chatgpt_tool_hub.apps import load_app
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools.all_tool_list import get_all_tool_names

    assert "python" in get_all_tool_names()
    app = load_app(tools_list=[], llm=ScriptedLLM([answer("old api works")]))
    assert app.ask("hi") == "old api works"


def test_every_registered_tool_builds_in_pure_mode_from_the_plugin_kwargs(tmp_path):
    import subprocess
    import sys

    code = f"""
import sys, json
sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
from test_chatbot_plugin import plugin_kwargs
from chatgpt_tool_hub.tools.tool_register import main_tool_register
kwargs = plugin_kwargs("http://127.0.0.1:9/v1")
kwargs.update({TOOL_KEYS!r}, workspace_dir={str(tmp_path)!r})
built = []
for name, (factory, keys) in main_tool_register.get_registered_tool().items():
    tool = factory(**kwargs)
    assert callable(tool.run), name
    if name == "wechat":
        assert tool.run("hi").startswith("Error: the wechat tool is not offered"), name
        continue
    assert type(tool).__name__ != "_Unbuilt", (name, tool.run(""))
    built.append(tool.name)
print(json.dumps(built))
print("torch" in sys.modules, "transformers" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    names, heavy = out.stdout.strip().splitlines()
    assert "python" in names and "image-captioning" in names and "browser" in names
    assert {"news", "news-api", "morning-news", "finance-news", "email", "sms", "stt", "tts", "visual"} <= set(
        __import__("json").loads(names))
    assert heavy == "False False"  # building expert tools loads nothing


def test_the_plugins_template_config_loads_meteo(chat_server):
    plugin = FakePlugin(chat_server.url, TEMPLATE_TOOLS)
    assert plugin.dropped == []  # before, "meteo" was dropped with "[tool] filter invalid tool"
    assert plugin.app.tool_names == ["python", "read-file", "list-dir", "url-get", "meteo-weather"]


def test_every_tool_name_of_the_plugins_readme_resolves(chat_server):
    names = main_tool_register.get_registered_tool_names()
    assert [t for t in README_TOOLS if t not in names] == []
    offered = [t for t in README_TOOLS if t != "wechat"]
    plugin = FakePlugin(chat_server.url, offered, **TOOL_KEYS)
    assert plugin.dropped == []
    expected = {main_tool_register.resolve_name(t) for t in offered} | set(main_tool_register.default_tool_names())
    assert set(plugin.app.tool_names) == expected
    with pytest.raises(ConfigError, match="the wechat tool is not offered"):  # a clear reason, not silence
        FakePlugin(chat_server.url, README_TOOLS, **TOOL_KEYS)


def test_pure_mode_shows_the_chat_user_the_error_text(chat_server, service_server):
    service_server.route("/geo", {"results": []})
    plugin = FakePlugin(chat_server.url, TEMPLATE_TOOLS, meteo_geocoding_url=service_server.url + "/geo")
    session: list[dict] = []
    reply = plugin.handle("meteo Atlantis", session)  # the plugin strips the name, the tool gets " Atlantis"
    assert reply.startswith("No place called 'Atlantis' was found")
    assert plugin.handle("news-api OpenAI", session).startswith("Error: tool 'news-api' needs news_api_key")
    assert plugin.handle("stt audio/x.wav", session).startswith("Error: the stt tool has no Azure Speech key")
    assert plugin.handle("wechat 给 fish 发消息", session).startswith("Error: the wechat tool is not offered")
    assert plugin.handle("sms hello", session).startswith("Error: tool 'sms' needs sms_username")
    assert chat_server.requests == []  # pure mode: no LLM call
