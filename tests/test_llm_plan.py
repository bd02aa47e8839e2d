"""The OpenAI-compatible client's request plan (``llm/request_plan.py``) driven by hand, with no I/O: scripted
outcomes go in for each step, and the steps, the waits and the result (or the error) come out. Plus the
drivers' part that a plan cannot see: a stream that a caller stops reading is closed at once."""

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
import pytest
from test_openai_stream import chunk, event, raw  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import LLMAuthError, LLMConnectionError, LLMError
from chatgpt_tool_hub.llm import collect_stream, request_plan
from chatgpt_tool_hub.llm.base import LLMResponse, StreamChunk
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from chatgpt_tool_hub.llm.request_plan import CLOSE, READ, Send, Wait

MSGS = [{"role": "user", "content": "hi"}]
SECRET = "sk-plan-5ecr3t-0123456789"
URL = "http://127.0.0.1:9/v1"  # nothing is sent: the plan does no I/O
REQUEST = httpx2.Request("POST", URL + "/chat/completions")


def make(**kw) -> OpenAICompatibleLLM:
    kw.setdefault("max_retries", 2)
    return OpenAICompatibleLLM(kw.pop("model_name", "test-model"), api_key=kw.pop("api_key", SECRET),
                               base_url=kw.pop("base_url", URL), **kw)


def status(code: int, message: str = "no", headers: dict | None = None) -> openai.APIStatusError:
    body = {"error": {"message": message}}
    response = httpx2.Response(code, headers=headers or {}, json=body, request=REQUEST)
    return openai.APIStatusError(message, response=response, body=body["error"])


def completion(text: str, usage: dict | None = None) -> dict:
    body: dict = {"model": "test-model", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                      "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return body


def drive(plan, outcomes: list, steps: list | None = None) -> tuple[list, object]:
    """Run ``plan``: each ``Send`` and ``READ`` takes the next outcome (an exception is thrown in). Returns the
    steps (also kept in ``steps``) and the result; an error of the plan is raised."""
    steps = [] if steps is None else steps
    value, error = None, None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(value)
        except StopIteration as stop:
            return steps, stop.value
        steps.append(step)
        value, error = None, None
        if isinstance(step, Send) or step is READ:
            outcome = outcomes.pop(0)
            if isinstance(outcome, BaseException):
                error = outcome
            else:
                value = outcome


def kinds(steps: list) -> list[str]:
    return [type(s).__name__ if isinstance(s, (Send, Wait, StreamChunk)) else repr(s) for s in steps]


# --- a completion ----------------------------------------------------------------------------------


def test_429_with_retry_after_then_200():
    llm = make(backoff_max=5)
    outcomes = [status(429, "slow down", {"retry-after": "0.2"}),
                completion("after the wait", {"prompt_tokens": 7, "completion_tokens": 3})]
    steps, response = drive(llm._complete_plan(MSGS, ["\nObservation:"], None), outcomes)
    assert kinds(steps) == ["Send", "Wait", "Send"]
    assert steps[1] == Wait(0.2)
    assert isinstance(response, LLMResponse) and response.text == "after the wait" and response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.estimated) == (7, 3, False)
    assert steps[0].params == {"model": "test-model", "messages": MSGS, "temperature": 0.0,
                               "stop": ["\nObservation:"]} and steps[0].stream is False


def test_retry_after_is_capped_by_backoff_max():
    steps, _ = drive(make(backoff_max=1.5)._complete_plan(MSGS, None, None),
                     [status(503, headers={"retry-after": "3600"}), completion("ok")])
    assert steps[1] == Wait(1.5)


def test_401_raises_at_once_naming_llm_api_key_and_never_the_key():
    steps: list = []
    with pytest.raises(LLMAuthError) as info:
        drive(make()._complete_plan(MSGS, None, None), [status(401, f"Incorrect API key provided: {SECRET}")], steps)
    text = str(info.value)
    assert "llm_api_key / LLM_API_KEY" in text and "HTTP 401" in text and SECRET not in text and "***" in text
    assert info.value.__cause__ is None  # the server's error carried the key: the chain is dropped
    assert kinds(steps) == ["Send"]  # no wait, no second attempt


def test_404_names_the_model_and_the_base_url_and_on_azure_the_deployment():
    with pytest.raises(LLMAuthError, match="MODEL_NAME.*LLM_API_BASE_URL"):
        drive(make()._complete_plan(MSGS, None, None), [status(404, "no such model")])
    azure = make(deployment_id="my-dep", base_url="http://127.0.0.1:9")
    with pytest.raises(LLMAuthError, match="Azure deployment 'my-dep'.*deployment id"):
        drive(azure._complete_plan(MSGS, None, None), [status(404)])


def test_retries_exhausted_raise_a_connection_error_naming_attempts_last_problem_and_settings():
    llm = make(max_retries=2, backoff_base=1, backoff_max=3)
    with pytest.raises(LLMConnectionError) as info:
        drive(llm._complete_plan(MSGS, None, None),
              [openai.APITimeoutError(request=REQUEST), openai.APIConnectionError(request=REQUEST), status(502)])
    text = str(info.value)
    assert "failed after 3 attempts (last: HTTP 502: " in text and "LLM_API_BASE_URL" in text
    assert isinstance(info.value.__cause__, openai.APIStatusError)


def test_the_waits_grow_are_capped_and_none_follows_the_last_attempt(monkeypatch):
    monkeypatch.setattr(request_plan.random, "uniform", lambda low, high: high)  # the jitter's upper bound
    steps: list = []
    with pytest.raises(LLMConnectionError, match="4 attempts"):
        drive(make(max_retries=3, backoff_base=1, backoff_max=2.5)._complete_plan(MSGS, None, None),
              [status(500)] * 4, steps)
    assert kinds(steps) == ["Send", "Wait", "Send", "Wait", "Send", "Wait", "Send"]
    assert [s.seconds for s in steps if isinstance(s, Wait)] == [1, 2, 2.5]


def test_a_jitter_of_zero_is_no_wait():
    steps, response = drive(make(backoff_base=0)._complete_plan(MSGS, None, None), [status(500), completion("x")])
    assert kinds(steps) == ["Send", "Send"] and response.text == "x"


def test_an_unsupported_parameter_is_dropped_and_sent_again_without_counting_as_a_retry():
    llm = make(max_retries=0)
    steps, response = drive(llm._complete_plan(MSGS, None, None),
                            [status(400, "Unsupported value: 'temperature' does not support 0"), completion("ok")])
    assert kinds(steps) == ["Send", "Send"] and response.text == "ok"
    assert "temperature" not in steps[1].params and "temperature" in llm._unsupported
    assert "temperature" not in llm._complete_plan(MSGS, None, None).send(None).params  # remembered


def test_another_400_is_an_llm_error_with_the_servers_message():
    with pytest.raises(LLMError, match="maximum context length") as info:
        drive(make()._complete_plan(MSGS, None, None), [status(400, "maximum context length is 8 tokens")])
    assert not isinstance(info.value, (LLMAuthError, LLMConnectionError))


def test_a_body_that_is_not_json_is_an_empty_answer_not_a_retry():
    steps, response = drive(make()._complete_plan(MSGS, None, None), [json.JSONDecodeError("bad", "<html>", 0)])
    assert kinds(steps) == ["Send"] and response.text == "" and response.finish_reason == "error"
    assert response.usage.estimated


def test_stops_beyond_four_are_cut_here_and_tools_are_sent_with_tool_choice():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    steps, response = drive(make()._complete_plan(MSGS, ["s1", "s2", "s3", "s4", "GAMMA"], tools),
                            [completion("alpha GAMMA beta")])
    assert steps[0].params["stop"] == ["s1", "s2", "s3", "s4"] and steps[0].params["tool_choice"] == "auto"
    assert response.text == "alpha " and response.finish_reason == "stop" and response.usage.estimated


# --- a stream --------------------------------------------------------------------------------------


def test_a_stream_reads_payloads_cuts_at_a_stop_then_closes_before_its_last_chunk():
    payloads = [chunk("Action: x\nObs"), chunk("ervation: made up"), chunk("never read")]
    steps, result = drive(make()._stream_plan(MSGS, ["\nObservation:"], None), [None, *payloads])
    assert result is None
    assert kinds(steps) == ["Send", "READ", "StreamChunk", "READ", "CLOSE", "StreamChunk"]
    assert steps[0].stream is True and steps[0].params["stream_options"] == {"include_usage": True}
    folded = collect_stream(iter(s for s in steps if isinstance(s, StreamChunk)))
    assert folded.text == "Action: x" and folded.finish_reason == "stop"


def test_a_stream_that_fails_before_its_first_payload_is_closed_then_retried():
    error_event = openai.APIError("overloaded", REQUEST, body={"message": "overloaded"})
    steps, _ = drive(make(backoff_base=0)._stream_plan(MSGS, None, None),
                     [None, error_event, None, chunk("fine", "stop"), None])
    assert kinds(steps) == ["Send", "READ", "CLOSE", "Send", "READ", "StreamChunk", "READ", "CLOSE", "StreamChunk"]
    assert steps[2] is CLOSE  # the failed attempt's connection is freed before the next one
    assert steps[-1].finish_reason == "stop"


def test_a_stream_that_breaks_after_its_first_payload_is_not_retried():
    plan = make()._stream_plan(MSGS, None, None)
    with pytest.raises(LLMConnectionError, match=r"broke after it started \(API error: the model crashed\)"):
        drive(plan, [None, chunk("partial "), openai.APIError("the model crashed", REQUEST, body=None)])


def test_a_stream_whose_first_payload_is_not_json_ends_with_one_empty_chunk():
    steps, _ = drive(make()._stream_plan(MSGS, None, None), [None, json.JSONDecodeError("bad", "<", 0)])
    assert kinds(steps) == ["Send", "READ", "CLOSE", "StreamChunk"]
    assert steps[-1].text == "" and steps[-1].finish_reason == "error"


# --- the drivers -----------------------------------------------------------------------------------


def test_an_async_stream_a_caller_stops_reading_gives_its_connection_back_at_once(raw):  # noqa: F811
    raw.hold = 30  # the response stays open after its first chunk
    raw.bodies = [[event(chunk("first ")), event(chunk("second "))]]
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=raw.url, timeout=20, max_retries=0)

    async def main():
        stream = llm.astream(MSGS)
        first = await stream.__anext__()
        transport = llm._aclients[asyncio.get_running_loop()][0]._client._transport
        busy = list(transport.busy)
        await stream.aclose()
        return first.text, busy, list(transport.busy)

    text, busy_reading, busy_after = asyncio.run(main())
    assert text == "first " and busy_reading == [1]
    assert busy_after == [0]  # closed by aclose itself, not later when the driver is collected
