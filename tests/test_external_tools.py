"""Tools the caller runs: a call of one pauses the run, a later run resumes it with the results;
a required tool call and a required answer shape."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, UserError
from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.run.external import ANY_TOOL, ExternalCall, ExternalTurn, Paused
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool
from chatgpt_tool_hub.tools.external import ExternalTool

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

ran: list[str] = []


@tool(name="add", description="Add two integers.")
def add(a: int, b: int) -> int:
    ran.append(f"add({a},{b})")
    return a + b


def app_with(llm: ScriptedLLM, mode: str = "text"):
    ran.clear()
    return AppFactory().create_app(llm=llm, tools_list=[add], no_default=True, tool_calling=mode)


def weather() -> ExternalTool:
    return ExternalTool.from_openai(WEATHER)


def action(name: str, arguments: dict, thought: str = "I need a tool.") -> str:
    return f"Thought: {thought}\nAction: {name}\nAction Input: {json.dumps(arguments)}"


def test_a_text_mode_call_of_an_external_tool_pauses_the_run_and_the_results_resume_it():
    llm = ScriptedLLM([action("add", {"a": 2, "b": 3}), action("get_weather", {"city": "Paris"}),
                       "Thought: Do I need to use a tool? No\nAI: 5, and Paris is sunny."])
    app = app_with(llm)
    first = app.run("Add 2 and 3, then the weather in Paris", external=ExternalTurn(tools=[weather()]))
    assert first.stopped_by == "tool_calls"
    assert ran == ["add(2,3)"]  # the app's own tool ran; the client's did not
    [call] = first.paused.calls
    assert (call.tool, call.arguments) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("call_")
    assert "get_weather" in llm.requests[0][0]["content"]  # offered beside the app's tools

    second = app.run("Add 2 and 3, then the weather in Paris",
                     external=ExternalTurn(tools=[weather()], resume=first.paused, results={call.id: "sunny, 21 C"}))
    assert second.stopped_by == "answer"
    assert second.output == "5, and Paris is sunny."
    assert [s.tool for s in second.steps] == ["add", "get_weather"]
    assert second.steps[1].observation == "sunny, 21 C"
    assert ran == ["add(2,3)"]  # nothing ran twice
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert "Observation: 5" in sent and "Observation: sunny, 21 C" in sent


def test_a_native_reply_runs_the_apps_calls_and_pauses_on_the_clients():
    llm = ScriptedLLM([
        LLMResponse("", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 1}),
                                    ToolCall("c2", "get_weather", {"city": "Rome"})]),
        "2, and Rome is rainy."])
    app = app_with(llm, "native")
    first = app.run("1+1 and Rome's weather", external=ExternalTurn(tools=[weather()]))
    assert first.stopped_by == "tool_calls" and ran == ["add(1,1)"]
    assert [(c.id, c.tool) for c in first.paused.calls] == [("c2", "get_weather")]
    second = app.run("1+1 and Rome's weather",
                     external=ExternalTurn(tools=[weather()], resume=first.paused, results={"c2": "rainy"}))
    assert second.output == "2, and Rome is rainy."
    last = llm.requests[-1]
    assert last[-3]["tool_calls"][0]["id"] == "c1" and last[-3]["tool_calls"][1]["id"] == "c2"
    assert [(m["tool_call_id"], m["content"]) for m in last[-2:]] == [("c1", "2"), ("c2", "rainy")]


def test_a_pause_rebuilt_from_the_conversation_resumes_in_both_modes():
    for mode, reply in (("text", "Thought: Do I need to use a tool? No\nAI: Sunny."), ("native", "Sunny.")):
        llm = ScriptedLLM([reply])
        app = app_with(llm, mode)
        paused = Paused.rebuilt([[ExternalCall("call_x", "get_weather", {"city": "Oslo"})]])
        result = app.run("Weather in Oslo?", external=ExternalTurn(tools=[weather()], resume=paused,
                                                                   results={"call_x": "snow"}))
        assert result.output == "Sunny." and result.steps[0].observation == "snow"
        sent = llm.requests[0]
        if mode == "native":
            assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
            assert sent[-1] == {"role": "tool", "tool_call_id": "call_x", "content": "snow"}
        else:
            assert "Action: get_weather" in sent[-2]["content"] and "snow" in sent[-1]["content"]


def test_arguments_that_break_the_tools_schema_go_back_to_the_model_not_to_the_caller():
    llm = ScriptedLLM([action("get_weather", {"town": "Paris"}), action("get_weather", {"city": "Paris"})])
    app = app_with(llm)
    result = app.run("Weather?", external=ExternalTurn(tools=[weather()]))
    assert result.stopped_by == "tool_calls"
    assert result.paused.calls[0].arguments == {"city": "Paris"}
    assert "city" in llm.requests[1][-1]["content"]  # the model was told what the schema wants


def test_a_required_tool_call_asks_again_instead_of_answering():
    llm = ScriptedLLM(["Thought: Do I need to use a tool? No\nAI: I think it is sunny.",
                       action("get_weather", {"city": "Paris"})])
    app = app_with(llm)
    result = app.run("Weather?", external=ExternalTurn(tools=[weather()], must_call=ANY_TOOL))
    assert result.stopped_by == "tool_calls"
    assert "get_weather" in llm.requests[1][-1]["content"]


def test_an_answer_shape_is_asked_for_checked_and_asked_again():
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    llm = ScriptedLLM(["Thought: Do I need to use a tool? No\nAI: It is 42.",
                       "Thought: Do I need to use a tool? No\nAI: ```json\n{\"answer\": 42}\n```"])
    app = app_with(llm)
    result = app.run("What is 6*7?", external=ExternalTurn(answer_schema=schema))
    assert result.stopped_by == "answer"
    assert json.loads(result.output) == {"answer": 42}
    assert '"answer"' in llm.requests[0][0]["content"]  # the schema is in the system prompt
    assert "not valid JSON" in llm.requests[1][-1]["content"]


def test_an_external_tool_takes_the_place_of_an_app_tool_with_its_name():
    llm = ScriptedLLM([action("add", {"a": 1, "b": 2})])
    app = app_with(llm)
    mine = ExternalTool("add", "The client's adder.", {"type": "object", "properties": {"a": {}, "b": {}}})
    result = app.run("1+2", external=ExternalTurn(tools=[mine]))
    assert result.stopped_by == "tool_calls" and ran == []


def test_the_planner_refuses_external_tools_clearly():
    app = AppFactory().create_app("planner", llm=ScriptedLLM([]), no_default=True)
    with pytest.raises(UserError, match="ReAct app"):
        app.run("hi", external=ExternalTurn(tools=[weather()]))


def test_a_bad_function_definition_is_a_config_error():
    with pytest.raises(ConfigError, match="name"):
        ExternalTool.from_openai({"type": "function", "function": {"description": "x"}})
    with pytest.raises(ConfigError, match="parameters"):
        ExternalTool.from_openai({"type": "function", "function": {"name": "x", "parameters": "nope"}})
