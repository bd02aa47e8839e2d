"""How a chatbot embeds the engine: chatgpt-on-wechat's `tool` plugin call sequence.

Run it from the repository root (no key, no network):

    python examples/chatbot_plugin.py

The plugin
  1. builds a dict of keyword arguments from its own config (dozens of keys,
     most of them empty; empty values count as unset),
  2. calls AppFactory().init_env(**kwargs) and then
     create_app(tools_list=[...], **kwargs), keeping only the tool names that
     main_tool_register knows,
  3. answers each message with app.ask(query, session_messages), where the
     session already ends with the query (the engine does not send it twice),
  4. runs one tool without an LLM when a message starts with a tool name
     ("pure mode"): main_tool_register.get_registered_tool()[name][0](**kwargs).run(query),
  5. resets a conversation by building a new app.

The real plugin sets llm_api_key (or llm_api_base_url) instead of passing
llm=; here a ScriptedLLM plays the model so the example runs offline. The
python tool really runs.
"""

from __future__ import annotations

import tempfile

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.tool_register import main_tool_register


def plugin_kwargs(workspace: str) -> dict:
    """The kind of keyword arguments the plugin builds from its config.json."""
    empty = ["bing_subscription_key", "google_api_key", "google_cse_id", "news_api_key", "wolfram_alpha_appid",
             "searxng_search_host", "deployment_id", "proxy", "llm_api_base_url"]
    kwargs = {key: "" for key in empty}
    kwargs.update({
        "debug": False, "no_default": False, "think_depth": 2, "request_timeout": 60, "temperature": 0,
        "llm_api_key": "",            # the real plugin puts its OpenAI key here
        "model_name": "gpt-4o-mini",
        "terminal_timeout": 20, "url_get_use_summary": True, "wikipedia_top_k_results": 2,
        "python_timeout": 10, "workspace_dir": workspace,
    })
    return kwargs


def scripted_model() -> ScriptedLLM:
    def recall(messages: list[dict]) -> str:
        earlier = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
        if any("6 times 7" in text for text in earlier):
            return "Thought: Do I need to use a tool? No\nAI: You asked me to multiply 6 by 7."
        return "Thought: Do I need to use a tool? No\nAI: I don't remember."

    return ScriptedLLM([
        "Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: print(6 * 7)",
        lambda messages: "Thought: Do I need to use a tool? No\nAI: 6 x 7 = "
                         + messages[-1]["content"].removeprefix("Observation:").strip(),
        recall,
    ])


class ToolPlugin:
    """The parts of the plugin that talk to chatgpt_tool_hub."""

    # from the plugin's config; names this version does not know are filtered out below
    wanted_tools = ["python", "a-tool-from-an-old-config"]

    def __init__(self, workspace: str, llm: ScriptedLLM):
        self.workspace = workspace
        self.llm = llm
        self.app = self.reset_app()

    def reset_app(self):
        self.app_kwargs = plugin_kwargs(self.workspace)
        factory = AppFactory()
        factory.init_env(**self.app_kwargs)
        known = main_tool_register.get_registered_tool_names()
        tools_list = [name for name in self.wanted_tools if name in known]
        return factory.create_app(tools_list=tools_list, llm=self.llm, **self.app_kwargs)

    def handle(self, query: str, session: list[dict]) -> str:
        for name in main_tool_register.get_registered_tool_names():
            if query.startswith(name + " "):  # pure mode: one tool, no LLM
                factory = main_tool_register.get_registered_tool()[name][0]
                return factory(**self.app_kwargs).run(query[len(name):].strip())
        session.append({"role": "user", "content": query})
        reply = self.app.ask(query, session)
        session.append({"role": "assistant", "content": reply})
        return reply


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="chatbot-") as workspace:
        llm = scripted_model()
        plugin = ToolPlugin(workspace, llm)
        print("tools of the app:", plugin.app.tool_names)

        session = [{"role": "system", "content": "You are a helpful chatbot."}]
        for query in ["What is 6 times 7?", "What did I just ask you?"]:
            print(f"\nuser> {query}")
            print(f"bot> {plugin.handle(query, session)}")

        first_request = llm.requests[0]
        copies = [m for m in first_request if m["role"] == "user" and m["content"] == "What is 6 times 7?"]
        assert len(copies) == 1
        print("\nthe question was sent once; the chatbot's system message was replaced by the engine's:",
              first_request[0]["content"].startswith("You are LLM-OS"))

        query = "python print('pure mode works')"
        print(f"\nuser> {query}")
        print(f"pure mode> {plugin.handle(query, session)}")
        assert llm.calls == 3  # pure mode did not call the model

        old = plugin.app
        plugin.app = plugin.reset_app()
        print("\nreset: a new app", plugin.app is not old, "with empty memory", plugin.app.history() == [])
        plugin.app.close()
        old.close()


if __name__ == "__main__":
    main()
