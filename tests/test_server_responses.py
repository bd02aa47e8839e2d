"""OpenAI's Responses API on ``tool-hub serve`` (``POST /v1/responses``), with the real ``openai`` client: text,
streams, images, the client's function tools (a ``function_call`` out, its ``function_call_output`` back in
resumes the run), ``text.format``, and what the server refuses (it keeps no responses)."""

from __future__ import annotations

import base64
import json
import re

import httpx
import openai
import pytest
from pydantic import BaseModel
from test_server_support import live, png_bytes  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import LLMConnectionError
from chatgpt_tool_hub.server.asgi import ApiError
from chatgpt_tool_hub.server.responses import chat_body
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}, "strict": True}
QUESTION = "What is 6 * 7, and the weather in Paris?"


def weather_call(city: str = "Paris") -> str:
    return f"Thought: Do I need to use a tool? Yes\nAction: get_weather\nAction Input: {json.dumps({'city': city})}"


# ---- the request, as the chat request it means ------------------------------------------------------

def test_a_string_input_and_instructions_are_a_system_and_a_user_message():
    chat = chat_body({"model": "m", "instructions": "Be brief.", "input": "Hi", "temperature": 0.5,
                      "max_output_tokens": 50, "user": "ann", "stream": True})
    assert chat == {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Hi"}],
                    "temperature": 0.5, "max_tokens": 50, "user": "ann", "stream": True}


def test_items_become_messages_calls_and_tool_results():
    chat = chat_body({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}]})
    assert chat["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}], "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]}]


def test_flat_function_tools_tool_choice_and_text_format_take_their_chat_names():
    chat = chat_body({"model": "m", "input": "x", "tools": [WEATHER],
                      "tool_choice": {"type": "function", "name": "get_weather"},
                      "text": {"format": {"type": "json_schema", "name": "Answer", "strict": True,
                                          "schema": {"type": "object"}}}})
    assert chat["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in
                                                               ("name", "description", "parameters", "strict")}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "Answer", "schema": {"type": "object"}, "strict": True}}
    assert chat_body({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})[
        "response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"text": {"format": {"type": "xml"}}}, "text"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_video", "video_url": "f"}]}]}, "input"),
])
def test_what_cannot_be_honoured_names_its_parameter(extra, param):
    with pytest.raises(ApiError) as caught:
        chat_body({"model": "m", "input": "x", **extra})
    assert caught.value.status == 400 and caught.value.param == param and caught.value.message


# ---- the live server, with the openai client -----------------------------------------------------

def test_text_in_text_out_with_the_monologue_as_a_reasoning_summary(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("It is 42.")])
    server = live(llm=llm, tools_list=["python"])
    response = server.client().responses.create(model="tool-hub", input="What is 6 * 7?",
                                                instructions="Answer in one sentence.", temperature=0.2,
                                                max_output_tokens=100, user="ann")
    assert response.object == "response" and response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text == "It is 42."
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert "Observation" in reasoning.summary[0].text and "42" in reasoning.summary[0].text
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens > 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.instructions == "Answer in one sentence." and response.model == "tool-hub"
    assert llm.requests[0][-1] == {"role": "user", "content": "What is 6 * 7?"}


def test_a_stream_is_openais_event_sequence(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("It is 42.")], chunk_size=3)
    server = live(llm=llm, tools_list=["python"])
    with server.client().responses.stream(model="tool-hub", input="What is 6 * 7?") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.reasoning_summary_part.added",
                 "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
                 "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                 "response.content_part.done", "response.output_item.done"):
        assert kind in kinds, kind
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text == "It is 42."
    assert [item.type for item in final.output] == ["reasoning", "message"]
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == final.output[0].summary[0].text and "Observation" in summary


def test_the_stream_has_event_lines_as_openai_sends_them(live):
    server = live(llm=ScriptedLLM([answer("hi")]))
    with httpx.stream("POST", server.url + "/responses", headers=server.auth, timeout=60,
                      json={"model": "tool-hub", "input": "hello", "stream": True}) as reply:
        raw = reply.read().decode()
    assert reply.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in raw.split("\n\n") if b.strip()]
    for block in blocks:
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]
    assert blocks[-1].startswith("event: response.completed") and "[DONE]" not in raw


def test_an_input_image_is_handed_to_the_app(live):
    name = re.compile(r"image/[0-9a-f]{8}\.png")
    llm = ScriptedLLM([lambda messages: answer("saw " + name.search(messages[-3]["content"]).group(0))])
    server = live(llm=llm)
    url = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    response = server.client().responses.create(model="tool-hub", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is in this picture?"}, {"type": "input_image", "image_url": url}]}])
    assert response.output_text.startswith("saw image/") and "](http://127.0.0.1:" in response.output_text
    assert llm.requests[0][-1] == {"role": "user", "content": "What is in this picture?"}


def test_a_function_call_comes_out_and_its_output_resumes_the_run(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), weather_call(), answer("42, and Paris is sunny.")])
    server = live(llm=llm, tools_list=["python"])
    client = server.client()
    first = client.responses.create(model="tool-hub", input=QUESTION, tools=[WEATHER])
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("fc_") and call.call_id and call.status == "completed"
    assert first.output_text == "" and first.tool_hub["stopped_by"] == "tool_calls"
    follow_up = [{"role": "user", "content": QUESTION}, *(item.model_dump(exclude_none=True) for item in first.output),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]
    second = client.responses.create(model="tool-hub", input=follow_up, tools=[WEATHER])
    assert second.output_text == "42, and Paris is sunny."
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert "Observation: 42" in sent and "Observation: sunny, 21 C" in sent  # the kept pause went on
    assert len(llm.requests) == 3


def test_a_streamed_function_call_has_its_argument_events(live):
    server = live(llm=ScriptedLLM([weather_call("Rome")], chunk_size=3))
    stream = server.client().responses.create(model="tool-hub", input=QUESTION, tools=[WEATHER],
                                              tool_choice="required", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and "response.output_text.delta" not in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Rome"}
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert [(i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"] == [
        ("get_weather", {"city": "Rome"})]


def test_json_schema_with_the_sdks_parse(live):
    class Product(BaseModel):
        product: int

    llm = ScriptedLLM([answer("42"), answer('{"product": 42}')])
    server = live(llm=llm)
    parsed = server.client().responses.parse(model="tool-hub", input=QUESTION, text_format=Product)
    assert parsed.output_parsed == Product(product=42)
    assert "does not follow the schema" in llm.requests[1][-1]["content"]


def test_a_streamed_schema_answer_comes_whole_at_the_end(live):
    class Product(BaseModel):
        product: int

    server = live(llm=ScriptedLLM([answer('```json\n{"product": 42}\n```')], chunk_size=2))
    with server.client().responses.stream(model="tool-hub", input=QUESTION, text_format=Product) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) == 1 and json.loads(deltas[0]) == {"product": 42}
    assert final.output_parsed == Product(product=42)


def test_json_object_format_returns_an_object(live):
    server = live(llm=ScriptedLLM([answer('```json\n{"a": 1}\n```')]))
    response = server.client().responses.create(model="tool-hub", input=QUESTION,
                                                text={"format": {"type": "json_object"}})
    assert json.loads(response.output_text) == {"a": 1}


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools"),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text"),
])
def test_refusals_are_openai_shaped_400s(live, extra, param):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model="tool-hub", input=QUESTION, **extra)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == param and caught.value.body["message"]


def test_the_previous_response_refusal_says_what_to_do(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError, match="send the whole input"):
        server.client().responses.create(model="tool-hub", input="again", previous_response_id="resp_1")


def test_a_chat_rule_is_told_in_the_responses_terms(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model="tool-hub", input=[{"role": "assistant", "content": "hi"}])
    assert caught.value.body["param"] == "input"
    with pytest.raises(openai.NotFoundError):
        server.client().responses.create(model="nope", input="hi")


def test_a_response_cannot_be_retrieved(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.NotFoundError, match="keeps no responses"):
        server.client().responses.retrieve("resp_123")


def llm_down(messages):
    raise LLMConnectionError("the LLM endpoint could not be reached")


def test_a_run_that_fails_in_a_stream_is_a_response_failed_event(live):
    server = live(llm=ScriptedLLM([llm_down]))
    events = list(server.client().responses.create(model="tool-hub", input="hello", stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert "could not be reached" in failed.error.message


def test_a_failed_run_not_streamed_is_an_openai_shaped_error(live):
    server = live(llm=ScriptedLLM([llm_down]))
    with pytest.raises(openai.APIStatusError) as caught:
        server.client().responses.create(model="tool-hub", input="hello")
    assert caught.value.status_code == 502 and caught.value.body["code"] == "llm_error"


def test_a_run_out_of_its_budget_is_an_incomplete_response(live):
    server = live(llm=ScriptedLLM([act("python", "print(1)")] * 2), tools_list=["python"], max_llm_calls=1)
    response = server.client().responses.create(model="tool-hub", input="Count.")
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text and response.tool_hub["stopped_by"] == "budget"
    events = list(server.client().responses.create(model="tool-hub", input="Count.", stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"
