"""Every way a tool runs -- ReAct text, native calls, planner tasks, subtrees -- goes through one dispatch
function, so every one of them hides configured secrets (in every spelling) and control characters in
every event, prompt and result."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.engine.prompts import load_prompts
from chatgpt_tool_hub.events import ActionEvent, ObservationEvent
from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool
from chatgpt_tool_hub.tools.base import ToolContext
from chatgpt_tool_hub.tools.subtree import SubtreeTool

from helpers import CountingTool, act, answer

SECRET = "sk-Ünïcode/Key+With=Chars&1234"
FORMS = {
    "raw": SECRET,
    "quote": quote(SECRET, safe=""),
    "quote_lower_hex": quote(SECRET, safe="").replace("%2F", "%2f").replace("%C3%9C", "%c3%9c"),
    "quote_plus": quote_plus(SECRET),
    "json": json.dumps(SECRET)[1:-1],
}
ESC = "\x1b[2K\x1b[1G"
INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\u061c\xad"  # zero-width, marks, BOM, soft hyphen


def leak_text() -> str:
    """What a careless tool returns: the key in every spelling, and terminal escapes."""
    split = " ".join(SECRET[:6] + mark + SECRET[6:] for mark in INVISIBLE)  # the key split by invisible marks
    return " | ".join(f"{name}={form}" for name, form in FORMS.items()) + f" {ESC}done\u202e {split}"


@tool(name="leaky", description="Returns what it saw.")
def leaky(text: str) -> str:
    return leak_text()


@tool(name="failing", description="Fails with its URL.")
def failing(text: str) -> str:
    raise RuntimeError(f"GET https://api.test/search?key={quote_plus(SECRET)} failed: {leak_text()}")


def assert_clean(text: str, where: str) -> None:
    low = text.lower()
    for name, form in FORMS.items():
        assert form not in text and form.lower() not in low, f"{where}: the {name} form of the key leaked"
    assert "\x1b" not in text and "\u202e" not in text, f"{where}: control characters passed"
    assert not set(INVISIBLE) & set(text), f"{where}: invisible characters passed (a key split by them leaks)"


def everything(events) -> str:
    return json.dumps([getattr(e, "__dict__", str(e)) for e in events], ensure_ascii=False, default=str)


def requests_text(llm: ScriptedLLM) -> str:
    return json.dumps(llm.requests, ensure_ascii=False)


@pytest.mark.parametrize("mode", ["text", "native"])
@pytest.mark.parametrize("bad_tool", ["leaky", "failing"])
def test_react_and_native_runs_hide_every_form_of_a_configured_key(mode, bad_tool):
    if mode == "text":
        replies = [act(bad_tool, "x"), answer("done")]
    else:
        replies = [LLMResponse("", tool_calls=[ToolCall("c1", bad_tool, '{"text": "x"}')]), "done"]
    llm = ScriptedLLM(replies)
    app = AppFactory().create_app(tools_list=[leaky, failing], llm=llm, no_default=True, tool_calling=mode,
                                  bing_subscription_key=SECRET)
    events: list = []
    result = app.run("go", callbacks=[events.append])
    assert result.output == "done" and len(result.steps) == 1
    assert_clean(everything(events), "events")
    assert_clean(requests_text(llm), "the LLM's second request")
    assert_clean(json.dumps([s.observation for s in result.steps], ensure_ascii=False), "RunResult.steps")
    assert "***" in result.steps[0].observation


def test_planner_tasks_hide_the_key_in_events_results_and_the_response_prompt():
    plan = json.dumps([{"task": "leaky", "id": 0, "dep": [-1], "args": {"text": "a"}},
                       {"task": "failing", "id": 1, "dep": [-1], "args": {"text": "b"}}])
    llm = ScriptedLLM([plan, "the answer"])
    app = AppFactory().create_app(app_type="planner", tools_list=[leaky, failing], llm=llm, no_default=True,
                                  bing_subscription_key=SECRET)
    events = []
    app.callbacks.append(events.append)
    result = app.run("do both")
    assert result.tasks[0].status == "ok" and result.tasks[1].status == "failed"
    assert "***" in result.tasks[0].output and "***" in result.tasks[1].error
    assert_clean(everything(events), "planner events")
    assert_clean(json.dumps([t.as_dict() for t in result.tasks.values()], ensure_ascii=False), "PlanResult")
    assert_clean(json.dumps([s.observation for s in result.steps], ensure_ascii=False), "PlanResult.steps")
    assert_clean(requests_text(llm), "the response prompt")


def test_a_subtree_hides_the_key_in_its_own_llm_requests_and_its_depth_one_events():
    inner = ScriptedLLM([act("leaky", "x"), act("failing", "y"), answer("inner done")])
    sub = SubtreeTool("helper", "Helps.", [leaky, failing], llm=inner)
    outer = ScriptedLLM([act("helper", "do it"), answer("outer done")])
    app = AppFactory().create_app(tools_list=[sub], llm=outer, no_default=True, llm_api_key=SECRET)
    events = list(app.stream("go"))
    nested = [e for e in events if e.depth == 1]
    assert {type(e) for e in nested} >= {ActionEvent, ObservationEvent}
    assert_clean(everything(nested), "depth-1 events")
    assert_clean(requests_text(inner), "the subtree's own LLM requests")
    assert_clean(everything(events), "every event")
    assert_clean(requests_text(outer), "the parent's LLM requests")


def test_dispatch_does_the_same_for_any_caller():
    from chatgpt_tool_hub.engine.dispatch import Outcome, dispatch, drive
    from chatgpt_tool_hub.redact import Redactor

    context = ToolContext(redactor=Redactor([SECRET]))
    gen = dispatch({"leaky": leaky}, "LEAKY", "x", context, prompts=load_prompts("en"), max_chars=50)
    events: list = []
    outcome = drive(gen, events.append)
    assert isinstance(outcome, Outcome) and outcome.tool == "leaky" and outcome.status == "ok"
    assert [type(e) for e in events] == [ActionEvent, ObservationEvent]
    assert_clean(outcome.text, "outcome text")
    assert outcome.observation.startswith(outcome.text[:33]) and outcome.observation.endswith(outcome.text[-17:])
    omitted = re.search(r"\.\.\. \[(\d+) characters omitted\] \.\.\.", outcome.observation)
    kept = outcome.observation.replace(omitted.group(0), "").replace("\n", "")
    assert int(omitted.group(1)) == len(outcome.text) - len(kept)
    assert events[1].observation == outcome.observation


def test_dispatch_maps_failures_approval_and_unknown_names():
    from chatgpt_tool_hub.engine.dispatch import dispatch, drive

    prompts = load_prompts("en")
    refused = CountingTool(dangerous=True)
    context = ToolContext(approve=lambda name, given: False)
    denied = drive(dispatch({"counter": refused}, "counter", "x", context, prompts=prompts, max_chars=0), None)
    assert denied.status == "denied" and refused.calls == [] and "did not approve" in denied.observation
    unknown = drive(dispatch({"counter": refused}, "nope", "x", ToolContext(), prompts=prompts, max_chars=0), None)
    assert unknown.status == "unknown_tool" and unknown.tool == "nope" and "counter" in unknown.observation
    broken = drive(dispatch({"counter": CountingTool(fail=True)}, "counter", "x", ToolContext(), prompts=prompts,
                               max_chars=0), None)
    assert broken.status == "error" and broken.error == "RuntimeError: boom"
    assert broken.observation == 'Error: the tool "counter" failed: RuntimeError: boom'


def test_the_callers_keep_no_copy_of_the_dispatch_steps():
    """Redaction, stripping and truncation live in dispatch.py only."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"
    callers = [package / "engine" / "loop.py", package / "engine" / "native.py", package / "planner" / "execute.py",
               package / "tools" / "subtree.py"]
    for path in callers:
        text = path.read_text(encoding="utf-8")
        for name in ("strip_control", ".redact(", "truncate_observation(", "charge_tool(", "_approved("):
            assert name not in text, f"{path.name} still does {name} itself"


def test_keys_inside_nested_settings_are_redacted_too():
    """mcp_servers / openapi_plugins entries carry tokens in env, headers and auth, also as JSON text."""
    from chatgpt_tool_hub.config import secret_values

    token, bearer = "ghp-nested-token-4242", "tok-in-a-header-7373"

    @tool(name="talker", description="Says what the server said.")
    def talker(text: str) -> str:
        return f"server env has {token}; header was Bearer {bearer}"

    servers = json.dumps([{"server": "python -m srv", "env": {"GITHUB_TOKEN": token}}])
    plugins = [{"source": "https://api.test/openapi.json", "headers": {"Authorization": f"Bearer {bearer}"}},
               {"source": "https://b.test/openapi.json", "auth": {"type": "header", "name": "X-Key", "value": "hv-99"}}]
    found = set(secret_values({"mcp_servers": servers, "openapi_plugins": plugins}))
    assert {token, bearer, "hv-99"} <= found and not found & {"header", "X-Key", "https://b.test/openapi.json"}
    llm = ScriptedLLM([act("talker", "x"), answer("ok")])
    app = AppFactory().create_app(tools_list=[talker], llm=llm, no_default=True, my_servers=servers,
                                  my_plugins=plugins)
    observation = app.run("q").steps[0].observation
    assert token not in observation and bearer not in observation and observation.count("***") == 2


def test_a_plan_hands_the_bare_result_to_the_next_task():
    """``<resource>-N`` of a text task is its bare result (the caption), not the sentence around it."""
    from chatgpt_tool_hub.tools.base import ToolResult

    seen: list[str] = []

    @tool(name="captioner", description="Describe an image.")
    def captioner(text: str) -> str:
        return ToolResult("image/a.png shows: a red cat", value="a red cat")

    @tool(name="shout", description="Upper-case a text.")
    def shout(text: str) -> str:
        seen.append(text)
        return text.upper()

    plan = json.dumps([{"task": "captioner", "id": 0, "dep": [-1], "args": {"text": "image/a.png"}},
                       {"task": "shout", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}}])
    llm = ScriptedLLM([plan, "done"])
    app = AppFactory().create_app(app_type="planner", tools_list=[captioner, shout], llm=llm, no_default=True)
    result = app.run("caption and shout")
    assert seen == ["a red cat"] and result.tasks[1].output == "A RED CAT"
    assert result.tasks[0].output == "image/a.png shows: a red cat" and result.tasks[0].resource == "a red cat"
    react = AppFactory().create_app(tools_list=[captioner], llm=ScriptedLLM([act("captioner", "x"), answer("ok")]),
                                    no_default=True)
    assert react.run("q").steps[0].observation == "image/a.png shows: a red cat"  # the model sees the sentence
