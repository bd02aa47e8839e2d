"""A client's own tools through ``tool-hub serve``, with the real ``openai`` client: the model's call of
one comes back as a standard ``tool_calls`` answer (stream and not), the client's ``role: "tool"`` results
resume the run with the server's tools still at hand; ``tool_choice``, ``response_format`` and ``n`` are
honoured or refused with an OpenAI-shaped 400."""

from __future__ import annotations

import json

import openai
import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUESTION = {"role": "user", "content": "What is 6 * 7, and the weather in Paris?"}


def weather_call(city: str = "Paris") -> str:
    return f"Thought: Do I need to use a tool? Yes\nAction: get_weather\nAction Input: {json.dumps({'city': city})}"


def resume(first, result: str = "sunny, 21 C") -> list[dict]:
    """The conversation as a client sends it back: its question, the assistant's calls, its results."""
    message = first.choices[0].message
    calls = [c.model_dump() for c in message.tool_calls]
    return [QUESTION, {"role": "assistant", "content": message.content, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "content": result} for c in calls)]


def test_a_call_of_the_clients_tool_is_a_tool_calls_answer_and_its_result_resumes_the_run(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), weather_call(), answer("42, and Paris is sunny.")])
    server = live(llm=llm, tools_list=["python"])
    client = server.client()
    first = client.chat.completions.create(model="tool-hub", messages=[QUESTION], tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    reasoning = choice.message.model_extra["reasoning_content"]
    assert "Observation" in reasoning and "42" in reasoning  # the server's own tool ran
    second = client.chat.completions.create(model="tool-hub", messages=resume(first), tools=[WEATHER])
    assert second.choices[0].message.content == "42, and Paris is sunny."
    assert second.choices[0].finish_reason == "stop"
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert "Observation: 42" in sent and "Observation: sunny, 21 C" in sent  # the pause was kept whole
    assert len(llm.requests) == 3  # python was not run again


def test_a_streamed_call_comes_as_tool_call_deltas(live):
    llm = ScriptedLLM([weather_call("Rome")], chunk_size=3)
    server = live(llm=llm)
    stream = server.client().chat.completions.create(model="tool-hub", messages=[QUESTION], tools=[WEATHER],
                                                     stream=True)
    calls: dict[int, dict] = {}
    finish, content = None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        content += delta.content or ""
        for piece in delta.tool_calls or ():
            entry = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += piece.id or ""
            entry["name"] += piece.function.name or ""
            entry["arguments"] += piece.function.arguments or ""
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [("get_weather", {"city": "Rome"})]
    assert calls[0]["id"].startswith("call_")


def test_a_native_mode_server_resumes_from_the_conversation_when_the_pause_is_gone(live):
    llm = ScriptedLLM([LLMResponse("", tool_calls=[ToolCall("c9", "get_weather", {"city": "Oslo"})]), "Snow."])
    server = live(llm=llm, tool_calling="native", tools_list=["python"])
    client = server.client()
    first = client.chat.completions.create(model="tool-hub", messages=[QUESTION], tools=[WEATHER])
    assert first.choices[0].message.tool_calls[0].id == "c9"
    server.state.pauses = type(server.state.pauses)()  # a restart: nothing kept
    second = client.chat.completions.create(model="tool-hub", messages=resume(first, "snow"), tools=[WEATHER])
    assert second.choices[0].message.content == "Snow."
    sent = llm.requests[-1]
    assert sent[-2]["tool_calls"][0]["id"] == "c9" and sent[-1] == {"role": "tool", "tool_call_id": "c9",
                                                                    "content": "snow"}


def test_tool_choice_required_asks_the_model_again_until_it_calls(live):
    llm = ScriptedLLM([answer("Probably sunny."), weather_call()])
    server = live(llm=llm)
    reply = server.client().chat.completions.create(model="tool-hub", messages=[QUESTION], tools=[WEATHER],
                                                    tool_choice="required")
    assert reply.choices[0].finish_reason == "tool_calls"
    assert "get_weather" in llm.requests[1][-1]["content"]


def test_tool_choice_none_offers_the_model_no_client_tool(live):
    llm = ScriptedLLM([answer("I cannot check.")])
    server = live(llm=llm)
    reply = server.client().chat.completions.create(model="tool-hub", messages=[QUESTION], tools=[WEATHER],
                                                    tool_choice="none")
    assert reply.choices[0].message.content == "I cannot check."
    assert "get_weather" not in llm.requests[0][0]["content"]


def test_structured_output_with_the_sdks_parse(live):
    from pydantic import BaseModel

    class Product(BaseModel):
        product: int

    llm = ScriptedLLM([answer("42"), answer('{"product": 42}')])
    server = live(llm=llm)
    parsed = server.client().chat.completions.parse(model="tool-hub", messages=[QUESTION], response_format=Product)
    assert parsed.choices[0].message.parsed == Product(product=42)
    assert "does not follow the schema" in llm.requests[1][-1]["content"]


def test_json_object_mode_returns_an_object(live):
    llm = ScriptedLLM([answer('```json\n{"a": 1}\n```')])
    server = live(llm=llm)
    reply = server.client().chat.completions.create(model="tool-hub", messages=[QUESTION],
                                                    response_format={"type": "json_object"})
    assert json.loads(reply.choices[0].message.content) == {"a": 1}


@pytest.mark.parametrize("extra, param", [
    ({"n": 2}, "n"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools"),
    ({"functions": [WEATHER["function"]]}, "functions"),
])
def test_what_cannot_be_honoured_is_an_openai_shaped_400(live, extra, param):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model="tool-hub", messages=[QUESTION], **extra)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == param and caught.value.body["message"]


def test_a_tool_result_for_a_call_nobody_made_is_a_400(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError, match="no assistant message made"):
        server.client().chat.completions.create(model="tool-hub", tools=[WEATHER], messages=[
            QUESTION, {"role": "tool", "tool_call_id": "call_nobody", "content": "x"}])


def test_the_planner_model_refuses_client_tools(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError, match="ReAct"):
        server.client().chat.completions.create(model="tool-hub-planner", messages=[QUESTION], tools=[WEATHER])


def test_a_streamed_answer_in_a_json_shape_is_the_checked_json_alone(live):
    llm = ScriptedLLM([answer('```json\n{"a": 1}\n```')], chunk_size=3)
    server = live(llm=llm)
    stream = server.client().chat.completions.create(model="tool-hub", messages=[QUESTION], stream=True,
                                                     response_format={"type": "json_object"})
    content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert json.loads(content) == {"a": 1}
