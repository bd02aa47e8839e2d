"""AppFactory end to end over the real ``openai`` client and a local chat-completions server."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import LLMAuthError, LLMConnectionError
from chatgpt_tool_hub.events import TokenEvent

from helpers import act, answer


def make_app(server, **kw):
    kw.setdefault("max_retries", 2)
    return AppFactory().create_app(tools_list=["python"], llm_api_base_url=server.url, llm_api_key="k",
                                   python_timeout=10, **kw)


def test_tool_loop_over_http_with_usage(chat_server):
    chat_server.replies = [act("python", "print(2 ** 10)"), answer("1024")]
    result = make_app(chat_server).run("2^10?")
    assert result.output == "1024" and result.steps[0].observation.strip() == "1024"
    assert result.usage.llm_calls == 2 and result.usage.total.prompt_tokens > 0
    body = chat_server.bodies[0]
    assert body["stop"][0] == "\nObservation:" and body["temperature"] == 0


def test_streaming_over_http(chat_server):
    chat_server.replies = [act("python", "print('hi')"), answer("a streamed answer of several words")]
    events = list(make_app(chat_server).stream("q"))
    tokens = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert "a streamed answer of several words" in tokens
    assert events[-1].kind == "answer" and events[-1].text == "a streamed answer of several words"
    assert all(b.get("stream") for b in chat_server.bodies)


def test_retry_after_429_then_success(chat_server):
    chat_server.faults.append(("status", 429, {"Retry-After": "0"}))
    chat_server.replies = [answer("after the wait")]
    assert make_app(chat_server).ask("q") == "after the wait"
    assert len(chat_server.requests) == 2


def test_500_then_success(chat_server):
    chat_server.faults.append(("status", 500))
    chat_server.replies = [answer("recovered")]
    assert make_app(chat_server).ask("q") == "recovered"
    assert len(chat_server.requests) == 2


def test_timeouts_exhaust_retries_with_a_clear_error(chat_server):
    chat_server.faults.extend([("sleep", 1.0)] * 2)
    app = make_app(chat_server, request_timeout=0.2, max_retries=1)
    with pytest.raises(LLMConnectionError) as info:
        app.ask("q")
    assert "2 attempts" in str(info.value) and "timeout" in str(info.value)  # max_retries=1: two tries
    assert len(chat_server.requests) == 2


def test_401_fails_at_once_naming_the_key(chat_server):
    chat_server.faults.append(("status", 401))
    with pytest.raises(LLMAuthError) as info:
        make_app(chat_server).ask("q")
    assert "LLM_API_KEY" in str(info.value)
    assert len(chat_server.requests) == 1


def test_no_choices_is_a_parse_failure_then_recovers(chat_server):
    chat_server.faults.append(("no_choices",))
    chat_server.replies = [answer("fine")]
    result = make_app(chat_server).run("q")
    assert result.output == "fine" and len(result.parse_failures) == 1
