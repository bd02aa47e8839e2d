"""AppFactory / App: the public API, sessions, concurrency, bad input."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chatgpt_tool_hub.apps import App, AppFactory
from chatgpt_tool_hub.errors import ConfigError, UserError
from chatgpt_tool_hub.events import AnswerEvent, TokenEvent
from chatgpt_tool_hub.testing import ScriptedLLM, ScriptExhaustedError

from helpers import CountingTool, act, answer, echo, last_user


def make_app(replies, tools=(), **kw):
    llm = ScriptedLLM(replies)
    app = AppFactory().create_app(tools_list=list(tools), llm=llm, no_default=True, **kw)
    return app, llm


def test_ask_returns_the_answer_and_run_returns_everything():
    app, llm = make_app([act("echo", "x"), answer("done"), answer("again")], tools=[echo])
    assert isinstance(app, App)
    assert app.ask("first") == "done"
    result = app.run("second")
    assert result.output == "again" and result.stopped_by == "answer" and result.steps == []
    assert result.usage.llm_calls == 1


def test_empty_question_is_a_user_error_before_any_llm_call():
    app, llm = make_app([answer("x")])
    for bad in ("", "   \n\t", None):
        with pytest.raises(UserError, match="question is empty"):
            app.ask(bad)
    assert llm.requests == []


def test_chat_history_must_be_a_list():
    app, _ = make_app([answer("x")])
    with pytest.raises(UserError, match="chat_history"):
        app.ask("q", chat_history="not a list")


def test_unknown_tool_names_list_the_known_ones():
    with pytest.raises(ConfigError) as info:
        AppFactory().create_app(tools_list=["no-such-tool", "__import__", "../x"], llm=ScriptedLLM([]))
    message = str(info.value)
    assert "'no-such-tool'" in message and "'__import__'" in message and "Known tools: " in message
    assert "python" in message


def test_unknown_app_type():
    with pytest.raises(ConfigError, match="app_type"):
        AppFactory().create_app(app_type="nope", llm=ScriptedLLM([]))


def test_default_tools_are_added_unless_no_default():
    app = AppFactory().create_app(llm=ScriptedLLM([]))
    assert "python" in app.tool_names
    app2 = AppFactory().create_app(llm=ScriptedLLM([]), no_default=True)
    assert app2.tool_names == []
    app3 = AppFactory().create_app(llm=ScriptedLLM([]), no_default="true", tools_list=[echo])
    assert app3.tool_names == ["echo"]


def test_session_memory_and_reset():
    app, llm = make_app([answer("I am A"), answer("you said hi"), answer("fresh")])
    app.ask("hi")
    app.ask("what did I say?")
    contents = [m["content"] for m in llm.requests[1][1:]]
    assert contents == ["hi", "I am A", "what did I say?"]
    app.reset()
    app.ask("new")
    assert [m["content"] for m in llm.requests[2][1:]] == ["new"]


def test_sessions_are_separate():
    app, llm = make_app([answer("a"), answer("b")])
    app.ask("one", session_id="s1")
    app.ask("two", session_id="s2")
    assert [m["content"] for m in llm.requests[1][1:]] == ["two"]


def test_two_apps_never_share_state():
    """State put into app A (history, python variables, tools, subtree, think depth) is invisible to app B."""
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    registered = main_tool_register.get_registered_tool_names()
    factory = AppFactory()
    llm_a = ScriptedLLM([act("python", "secret = 41"), answer("stored"),
                         act("python", "print(secret + 1)"), answer("42"), answer("still here")])
    llm_b = ScriptedLLM([act("python", "print(secret)"), answer("no secret here")])
    app_a = factory.create_app(tools_list=["python"], llm=llm_a, no_default=True, think_depth=5)
    app_b = factory.create_app(tools_list=["python"], llm=llm_b, no_default=True, think_depth=5)
    try:
        # A holds a session history and a python variable...
        app_a.ask("remember 41", session_id="s")
        seen_by_a = app_a.run("what is secret + 1?", session_id="s")
        assert seen_by_a.steps[0].observation.strip() == "42"
        # ...a new tool, a subtree and a smaller think depth
        app_a.add_tool(echo)
        app_a.register_subtree("helper", [CountingTool()], "A helper sub-agent.")
        app_a.set_think_depth(1)
        assert app_a.tool_names == ["python", "echo", "helper"] and app_a.settings.think_depth == 1
        assert app_a.ask("still there?", session_id="s") == "still here"
        assert "echo" in llm_a.requests[-1][0]["content"] and "helper" in llm_a.requests[-1][0]["content"]
        assert len(app_a.history("s")) == 6

        result = app_b.run("what is secret?", session_id="s")
        # no history of A in B's request, no variable of A in B's python, no tool of A in B's prompt
        sent = llm_b.requests[0]
        assert [m["content"] for m in sent[1:]] == ["what is secret?"]
        assert "NameError" in result.steps[0].observation and "41" not in result.steps[0].observation
        assert "echo" not in sent[0]["content"] and "helper" not in sent[0]["content"]
        assert app_b.tool_names == ["python"] and app_b.settings.think_depth == 5
        assert [m["content"] for m in app_b.history("s")] == ["what is secret?", "no secret here"]
        assert main_tool_register.get_registered_tool_names() == registered
    finally:
        app_a.close()
        app_b.close()


def test_chatbot_history_with_current_query_is_not_duplicated():
    app, llm = make_app([answer("sunny")])
    history = [
        {"role": "system", "content": "You are a chatbot persona."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi!"},
        {"role": "user", "content": "weather?"},
    ]
    assert app.ask("weather?", history) == "sunny"
    sent = llm.requests[0]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in sent[1:]] == ["hello", "hi!", "weather?"]
    assert "chatbot persona" not in sent[0]["content"]
    assert app.history() == []  # caller-owned history is not copied into app memory


def test_malformed_history_entries_are_skipped():
    app, llm = make_app([answer("ok")])
    app.ask("q", [None, {"role": "user"}, {"content": "x"}, "junk", {"role": "user", "content": 7},
                  {"role": "tool", "content": "t"}, {"role": "assistant", "content": 5}])
    assert [m["content"] for m in llm.requests[0][1:]] == ["7", "5", "q"]


def test_concurrent_asks_with_different_histories():
    def reply(messages):
        return answer(f"re: {last_user(messages)} after {len(messages)}")

    app, llm = make_app([reply] * 16)
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        history = [{"role": "user", "content": f"h{i}"}, {"role": "assistant", "content": f"a{i}"}] * (i % 3)
        results[i] = app.ask(f"question {i}", history)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(16):
        assert results[i] == f"re: question {i} after {2 + 2 * (i % 3)}"


def test_aask():
    app, _ = make_app([answer("async answer")])
    assert asyncio.run(app.aask("q")) == "async answer"


def test_stream_yields_tokens_and_answer():
    app, _ = make_app([answer("streamed words here")])
    events = list(app.stream("q"))
    assert any(isinstance(e, TokenEvent) for e in events)
    assert isinstance(events[-1], AnswerEvent) and events[-1].text == "streamed words here"


def test_callbacks_receive_events_and_a_broken_callback_is_harmless():
    seen = []

    def broken(event):
        raise RuntimeError("observer bug")

    app, _ = make_app([act("echo", "x"), answer("ok")], tools=[echo], callbacks=[broken, seen.append])
    assert app.ask("q") == "ok"
    assert [e.kind for e in seen] == ["thought", "action", "observation", "thought", "answer"]


def test_scripted_llm_running_out_is_clear():
    app, _ = make_app([act("echo", "x")], tools=[echo])
    with pytest.raises(ScriptExhaustedError, match="ran out of replies"):
        app.ask("q")


def test_set_think_depth_and_model():
    app, _ = make_app([])
    app.set_think_depth(5)
    assert app.settings.think_depth == 5
    with pytest.raises(UserError):
        app.set_think_depth(-1)
    with pytest.raises(UserError, match="ready LLM"):
        # a ScriptedLLM was handed in, but the builder is only for configured clients
        App(ScriptedLLM([])).set_model("x")


def test_no_llm_configured_says_how_to_configure_one():
    with pytest.raises(ConfigError) as info:
        AppFactory().create_app(no_default=True)
    text = str(info.value)
    assert "LLM_API_KEY" in text and "LLM_API_BASE_URL" in text and "local:" in text
    assert info.value.key == "llm_api_key"


def test_local_server_needs_no_key(chat_server):
    chat_server.replies = [answer("from the server")]
    app = AppFactory().create_app(no_default=True, llm_api_base_url=chat_server.url, max_retries=0)
    assert app.ask("q") == "from the server"
    assert chat_server.bodies[0]["messages"][-1] == {"role": "user", "content": "q"}


def test_garbage_and_empty_llm_responses_are_parse_failures_not_tracebacks(chat_server):
    chat_server.faults.extend([("no_choices",), ("garbage",), ("null_content",)])
    app = AppFactory().create_app(no_default=True, llm_api_base_url=chat_server.url, max_retries=0)
    result = app.run("q")
    assert result.stopped_by == "parse_error"
    assert result.output == "The model returned an empty reply."


def test_planner_app_type_builds_the_planner():
    import json as _json

    from chatgpt_tool_hub.apps import PlannerApp
    from chatgpt_tool_hub.tools import tool

    @tool(name="shout", description="Upper-case a text.")
    def shout(text: str) -> str:
        return text.upper()

    plan = _json.dumps([{"task": "shout", "id": 0, "dep": [-1], "args": {"text": "hello"}}])
    llm = ScriptedLLM([plan, "The tool said HELLO."])
    app = AppFactory().create_app(app_type="planner", tools_list=[shout], llm=llm, no_default=True,
                                  planner_max_workers="2")
    assert isinstance(app, PlannerApp) and app.app_type == "planner"
    result = app.run("shout hello")
    assert result.tasks[0].status == "ok" and result.tasks[0].output == "HELLO"
    assert result.output == "The tool said HELLO." and result.llm_calls == 2
    assert any("HELLO" in m["content"] for m in llm.requests[1])  # the response prompt carries the results
