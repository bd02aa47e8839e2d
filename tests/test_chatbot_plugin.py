"""The call sequence of chatgpt-on-wechat's ``tool`` plugin, against a local chat server.

The plugin imports three names, builds ~60 keyword arguments (most empty),
calls ``init_env`` then ``create_app``, filters its tool list through
``main_tool_register``, asks with the session's messages (whose last user
message is the query), runs single tools in "pure mode", and resets by
building a new app.
"""

from __future__ import annotations

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.apps.app import App
from chatgpt_tool_hub.tools.tool_register import main_tool_register
from helpers import act, answer
from service_fixtures import CHATBOT_KWARGS


def plugin_kwargs(server_url: str) -> dict:
    """The ~60 keyword arguments the plugin passes, most of them empty, pointed at ``server_url``."""
    return {**CHATBOT_KWARGS, "llm_api_key": "sk-plugin-test-key", "llm_api_base_url": server_url}


class FakePlugin:
    """Drives the library the way the chatbot plugin does."""

    def __init__(self, server_url: str, tools: list[str]):
        self.server_url = server_url
        self.tools = tools
        self.app = self.reset_app()

    def reset_app(self) -> App:
        self.app_kwargs = plugin_kwargs(self.server_url)
        factory = AppFactory()
        factory.init_env(**self.app_kwargs)
        names = main_tool_register.get_registered_tool_names()
        tool_list = [t for t in self.tools if t in names]
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
kwargs.update(bing_subscription_key="b", google_api_key="g", google_cse_id="c", searxng_search_host="http://127.0.0.1:9",
              wolfram_alpha_appid="w", workspace_dir={str(tmp_path)!r})
built = []
for name, (factory, keys) in main_tool_register.get_registered_tool().items():
    tool = factory(**kwargs)
    assert callable(tool.run), name
    built.append(tool.name)
print(json.dumps(built))
print("torch" in sys.modules, "transformers" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    names, heavy = out.stdout.strip().splitlines()
    assert "python" in names and "image-captioning" in names and "browser" in names
    assert heavy == "False False"  # building expert tools loads nothing
