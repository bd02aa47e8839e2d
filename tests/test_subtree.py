"""Tool-in-tool subtrees: nested engines, shared budget, nesting depth, live registration."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import UserError
from chatgpt_tool_hub.events import ObservationEvent
from chatgpt_tool_hub.run.budget import Budget
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.context import pure_context
from chatgpt_tool_hub.tools.subtree import SubtreeError, SubtreeTool, subtree_llm

from helpers import CountingTool, act, answer, echo


def make_app(replies, tools=(), **kw):
    llm = ScriptedLLM(replies)
    return AppFactory().create_app(tools_list=list(tools), llm=llm, no_default=True, **kw), llm


def test_parent_sees_one_tool_and_the_subtree_runs_its_own_engine():
    inner = ScriptedLLM([act("echo", "deep"), answer("inner result")])
    sub = SubtreeTool("helper", "Helps.", [echo], llm=inner)
    app, outer = make_app([act("helper", "do it"), answer("outer answer")], tools=[sub])
    events = list(app.stream("q"))
    assert events[-1].text == "outer answer"
    nested = [(e.kind, e.depth) for e in events if e.depth == 1]
    assert ("action", 1) in nested and ("observation", 1) in nested
    obs = [e for e in events if isinstance(e, ObservationEvent) and e.depth == 0][0]
    assert obs.tool == "helper" and obs.observation == "inner result"
    assert inner.requests[0][-1]["content"] == "do it"
    assert "echo" not in outer.requests[0][0]["content"].split("You can use these tools:")[1].split("To use")[0]


def test_subtree_shares_the_parent_llm_by_default():
    sub = SubtreeTool("helper", "Helps.", [echo])
    app, llm = make_app([act("helper", "task"), act("echo", "x"), answer("inner"), answer("outer")], tools=[sub])
    assert app.ask("q") == "outer"
    assert llm.calls == 4


def test_subtree_calls_count_against_the_shared_budget():
    sub = SubtreeTool("helper", "Helps.", [echo])
    app, llm = make_app([act("helper", "task"), act("echo", "x"), act("echo", "y"), answer("unused")],
                        tools=[sub], max_llm_calls=3)
    result = app.run("q")
    assert llm.calls == 3
    step = result.steps[0]
    assert step.status == "error" and "ran out of budget" in step.observation
    assert result.stopped_by == "budget"
    assert "budget of 3 LLM calls is used up" in result.output


def test_nesting_depth_is_bounded():
    def reply(messages):
        return answer("done") if "nesting depth limit" in messages[-1]["content"] else act("level", "go")

    level = SubtreeTool("level", "Recursive.", [], max_nesting_depth=2, think_depth=1)
    level.tools.append(level)  # a subtree that calls itself
    app, _ = make_app([reply] * 20, tools=[level], think_depth=1)
    events = list(app.stream("q"))
    limited = [e for e in events if isinstance(e, ObservationEvent) and "max_nesting_depth=2" in e.observation]
    assert len(limited) == 1 and limited[0].depth == 2
    assert max(e.depth for e in events) == 2
    assert events[-1].kind == "answer" and events[-1].text.strip()


def test_failure_becomes_a_typed_observation_never_empty():
    inner = ScriptedLLM(["", "", ""])
    sub = SubtreeTool("helper", "Helps.", [echo], llm=inner)
    out = sub.run("x", ToolContext())
    assert out == "[subtree 'helper' stopped by parse error] The model returned an empty reply."
    no_llm = SubtreeTool("lonely", "No LLM.", [echo])
    with pytest.raises(SubtreeError, match="has no LLM"):
        no_llm.run("x")


def test_subtree_stopped_by_depth_says_so():
    inner = ScriptedLLM([act("echo", "1"), act("echo", "2"), act("echo", "3")])
    sub = SubtreeTool("helper", "Helps.", [echo], llm=inner, think_depth=1)
    out = sub.run("x", ToolContext(budget=Budget()))
    assert out.startswith("[subtree 'helper' stopped by think depth]") and "echo: 1" in out


def test_register_and_unregister_on_a_live_app():
    app, llm = make_app([answer("first"), act("researcher", "look"), act("echo", "z"), answer("found"),
                         answer("with it"), answer("after removal")], tools=[echo])
    app.ask("before")
    assert "researcher" not in llm.requests[0][0]["content"]
    sub = app.register_subtree("researcher", [echo], "Researches things.")
    assert isinstance(sub, SubtreeTool) and "researcher" in app.tool_names
    assert app.ask("use it") == "with it"
    assert "researcher: Researches things." in llm.requests[1][0]["content"]
    app.unregister("researcher")
    app.ask("later")
    assert "researcher" not in llm.requests[-1][0]["content"]
    with pytest.raises(UserError, match="no tool named"):
        app.unregister("researcher")


def test_register_subtree_builds_tools_by_name():
    app, _ = make_app([])
    sub = app.register_subtree("coder", ["python"], "Writes and runs code.")
    assert [t.name for t in sub.tools] == ["python"]
    with pytest.raises(UserError):
        app.register_subtree("empty", [])


def test_subtree_llm_from_prefixed_keys(chat_server):
    assert subtree_llm("browser", pure_context({"model_name": "x", "browser_model_name": ""})) is None
    llm = subtree_llm("browser", pure_context({"browser_llm_api_base_url": chat_server.url,
                                               "browser_model_name": "small-model", "max_retries": 0}))
    assert llm.model_name == "small-model"
    chat_server.replies = [answer("from the browser model")]
    sub = SubtreeTool("browser", "b", [echo], llm=llm)
    assert sub.run("x") == "from the browser model"
    assert chat_server.bodies[0]["model"] == "small-model"


def test_dangerous_tools_inside_subtrees_still_ask_for_approval():
    danger = CountingTool(dangerous=True)
    sub = SubtreeTool("helper", "Helps.", [danger])
    asked = []
    app, _ = make_app([act("helper", "t"), act("counter", "rm"), answer("inner"), answer("outer")], tools=[sub],
                      approve=lambda name, inp: asked.append(name) or False)
    result = app.run("q")
    assert asked == ["counter"] and danger.calls == []
    assert result.output == "outer"


def test_builtin_browser_subtree_fetches_with_its_own_tools(tmp_path):
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    (tmp_path / "news.html").write_text("<html><title>News</title><body><p>Release date: 2026-12-01</p></body></html>")
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/news.html"
    try:
        app, llm = make_app([
            act("browser", f"find the release date on {url}"),
            act("url-get", url),                                   # inside the browser subtree
            answer("The release date is 2026-12-01."),             # the subtree's answer
            answer("It comes out on 2026-12-01."),                 # the parent's answer
        ], tools=["browser"], url_get_allow_private=True, workspace_dir=str(tmp_path / "ws"))
        result = app.run("when is the release?")
    finally:
        server.shutdown()
    browser = next(t for t in app.tools if t.name == "browser")
    assert [t.name for t in browser.tools] == ["url-get", "summary"]
    assert result.steps[0].observation == "The release date is 2026-12-01."
    assert "Release date: 2026-12-01" in llm.requests[2][-1]["content"]  # the page reached the subtree's LLM
    assert result.output == "It comes out on 2026-12-01."


def test_browser_in_pure_mode_builds_its_llm_from_the_chatbot_kwargs(chat_server, tmp_path):
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    factory, _ = main_tool_register.get_registered_tool()["browser"]
    tool = factory(llm_api_key="sk-pure", llm_api_base_url=chat_server.url, model_name="gpt-3.5-turbo",
                   max_retries=0, workspace_dir=str(tmp_path), bing_subscription_key="", proxy="")
    chat_server.replies = [answer("nothing to browse")]
    assert tool.run(" what is new?") == "nothing to browse"
    assert chat_server.requests[0]["headers"]["authorization"] == "Bearer sk-pure"
    assert "sk-pure" not in repr(tool)
    bare = factory(workspace_dir=str(tmp_path))
    assert bare.run("x").startswith("Error: subtree 'browser' has no LLM outside an app: No LLM is configured")


def test_run_usage_covers_the_whole_tree():
    from chatgpt_tool_hub.tools.plugins.summary import SummaryTool

    inner = SubtreeTool("helper", "Helps.", [echo])
    summary = SummaryTool.from_config()
    app, llm = make_app([act("helper", "task"), act("echo", "x"), answer("inner"),  # 3 calls: parent + subtree
                         act("summary", "some long text to summarise"), "a summary",  # 1 engine + 1 tool call
                         answer("done")], tools=[inner, summary])
    result = app.run("q")
    assert result.output == "done"
    assert llm.calls == 6 and result.usage.llm_calls == 6
    assert result.usage.total.total_tokens == sum(u.total_tokens for u in result.usage.calls) > 0
