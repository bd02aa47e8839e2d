"""Keys never reach logs, exceptions, reprs or observations, even with DEBUG on."""

from __future__ import annotations

import logging

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import LLMError

from helpers import act, answer

SECRET = "sk-THIS-MUST-NEVER-LEAK-1234567890"


def test_no_secret_in_debug_logs_errors_or_reprs(chat_server, caplog, capsys, monkeypatch):
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "httpx2", "httpcore", "chatgpt_tool_hub"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    monkeypatch.setenv("LLM_API_KEY", SECRET)
    chat_server.replies = [act("python", "import os; print(sorted(os.environ))"), answer("done")]
    factory = AppFactory()
    factory.init_env(debug=True)
    app = factory.create_app(tools_list=["python"], debug=True, llm_api_base_url=chat_server.url,
                             max_retries=0, python_timeout=10)
    result = app.run("list env")
    assert result.output == "done"
    observation = result.steps[0].observation
    assert "LLM_API_KEY" not in observation and SECRET not in observation

    chat_server.faults.append(("status", 401))
    with pytest.raises(LLMError) as info:
        app.ask("again")
    texts = [caplog.text, str(info.value), repr(info.value), repr(app), repr(app.llm), str(app.config),
             *capsys.readouterr()]
    for text in texts:
        assert SECRET not in text
    assert chat_server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"


def test_configured_keys_are_redacted_from_observations(tmp_path):
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools import tool

    @tool(name="leaky", description="Fails with a URL that carries the key.")
    def leaky(text: str) -> str:
        raise RuntimeError(f"GET https://api.example/search?key={SECRET} failed")

    llm = ScriptedLLM([act("leaky", "x"), answer("done")])
    app = AppFactory().create_app(tools_list=[leaky], llm=llm, no_default=True, bing_subscription_key=SECRET)
    result = app.run("q")
    assert SECRET not in result.steps[0].observation and "key=***" in result.steps[0].observation
    assert all(SECRET not in m["content"] for m in llm.requests[1])
