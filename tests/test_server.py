"""``tool-hub serve`` as clients use it: the real ``openai`` client against a live server on 127.0.0.1.

The LLM behind the server is ``ScriptedLLM`` (``create_server(llm=...)``) or
``tests/chat_server.py`` (an OpenAI-compatible server, so the server's own
async client is exercised end to end).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.testing import ScriptedLLM
from tests.chat_server import ChatServer, _prompt_tokens

from helpers import act, answer


def test_a_question_non_streamed_answer_reasoning_and_usage(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("It is 42.")])
    server = live(llm=llm, tools_list=["python"])
    reply = server.client().chat.completions.create(
        model="tool-hub", messages=[{"role": "user", "content": "What is 6 * 7?"}])
    message = reply.choices[0].message
    assert message.content == "It is 42." and reply.choices[0].finish_reason == "stop"
    reasoning = message.model_extra["reasoning_content"]
    assert "Action: python" in reasoning and "Action Input:\n\n```python\nprint(6 * 7)\n```" in reasoning
    assert "Observation:\n\n```\n42\n```" in reasoning and "It is 42." not in reasoning
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.model == "tool-hub" and reply.model_extra["tool_hub"]["stopped_by"] == "answer"
    assert llm.requests[0][-1] == {"role": "user", "content": "What is 6 * 7?"}


def test_a_streamed_question_reasoning_deltas_then_content_then_usage(live):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("The answer is 42, as computed.")], chunk_size=1)
    server = live(llm=llm, tools_list=["python"])
    stream = server.client().chat.completions.create(
        model="tool-hub", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "What is 6 * 7?"}])
    reasoning, content, order, usage, finish = [], [], [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        if delta.model_extra.get("reasoning_content"):
            reasoning.append(delta.model_extra["reasoning_content"])
            order.append("r")
        if delta.content:
            content.append(delta.content)
            order.append("c")
    assert "".join(content) == "The answer is 42, as computed."
    assert len(content) > 1  # the answer streams as the model writes it
    text = "".join(reasoning)
    assert "Action: python" in text and "Observation:\n\n```\n42\n```" in text
    assert "Do I need to use a tool? No" in text
    assert "AI:" not in text and "The answer" not in text
    assert order.index("c") > max(i for i, kind in enumerate(order) if kind == "r")
    assert finish == "stop" and usage is not None and usage.total_tokens > 0


def test_the_history_comes_with_the_request_and_system_messages_are_dropped(live):
    llm = ScriptedLLM([answer("Paris, still.")])
    server = live(llm=llm)
    server.client().chat.completions.create(model="tool-hub", messages=[
        {"role": "system", "content": "You are a bot."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And now?"}])
    sent = llm.requests[0]
    assert sent[0]["role"] == "system" and "You are a bot." not in sent[0]["content"]
    assert sent[1:] == [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."},
                        {"role": "user", "content": "And now?"}]


def test_temperature_and_max_tokens_reach_the_llm_through_the_async_client(live):
    with ChatServer([answer("cool")]) as upstream:
        server = live(llm_api_base_url=upstream.url, model_name="upstream-model", max_retries=0)
        reply = server.client().chat.completions.create(
            model="tool-hub", temperature=0.7, max_tokens=33, messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "cool"
        body = upstream.bodies[-1]
        assert body["temperature"] == 0.7 and body["max_tokens"] == 33 and body["model"] == "upstream-model"
        assert reply.usage.prompt_tokens == _prompt_tokens(body)  # the upstream's own count, passed on


def test_streaming_through_an_upstream_server(live):
    with ChatServer(["Thought: Do I need to use a tool? No\nAI: streamed from upstream"]) as upstream:
        server = live(llm_api_base_url=upstream.url, model_name="m", max_retries=0)
        stream = server.client().chat.completions.create(model="tool-hub", stream=True,
                                                         messages=[{"role": "user", "content": "hi"}])
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "streamed from upstream"
        assert upstream.bodies[-1]["stream"] is True


def test_models_and_healthz(live):
    server = live(llm=ScriptedLLM([]), serve_models="tool-hub=victorinox,my-planner=planner")
    names = [m.id for m in server.client().models.list().data]
    assert names == ["tool-hub", "my-planner", "tool-hub-direct"]  # and the direct model (serve_direct_model)
    health = httpx.get(server.root + "/healthz").json()
    assert health["status"] == "ok" and health["runs"] == 0


def test_an_unknown_model_is_a_404_naming_the_models(live):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.NotFoundError) as err:
        server.client().chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert "tool-hub" in str(err.value) and "serve_models" not in str(err.value)  # settings stay in the log


@pytest.mark.parametrize("messages, words", [
    ([], "non-empty"),
    ([{"role": "assistant", "content": "hi"}], "last message"),
    ([{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}], "not supported"),
    ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}], "must be WAV"),
])
def test_bad_requests_are_400_with_the_reason(live, messages, words):
    server = live(llm=ScriptedLLM([]))
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(model="tool-hub", messages=messages)
    assert words in str(err.value)


def test_the_planner_model_answers_through_the_chat_api(live):
    plan = json.dumps([{"task": "python", "id": 0, "dep": [-1], "args": {"text": "print(2 ** 5)"}}])
    llm = ScriptedLLM([plan, "The program printed 32."])
    server = live(llm=llm, tools_list=["python"])
    reply = server.client().chat.completions.create(
        model="tool-hub-planner", messages=[{"role": "user", "content": "run print(2 ** 5)"}])
    assert reply.choices[0].message.content == "The program printed 32."
    reasoning = reply.choices[0].message.model_extra["reasoning_content"]
    assert "Action: python (task 0" in reasoning and "Observation (task 0):\n\n```\n32\n```" in reasoning


def test_jarvis_endpoints_tasks_results_and_hugginggpt(live):
    plan = json.dumps([{"task": "python", "id": 0, "dep": [-1], "args": {"text": "print(7 * 6)"}}])
    llm = ScriptedLLM([plan, plan, plan, "It printed 42."])
    server = live(llm=llm, tools_list=["python"])
    body = {"messages": [{"role": "user", "content": "compute 7 * 6 with python"}]}
    tasks = httpx.post(server.root + "/tasks", json=body, timeout=60, headers=server.auth).json()
    assert tasks == [{"task": "python", "id": 0, "dep": [-1], "args": {"text": "print(7 * 6)"}}]
    results = httpx.post(server.root + "/results", json=body, timeout=60, headers=server.auth).json()
    assert results["0"]["inference result"] == {"generated text": "42"}  # JARVIS's key for a text result
    assert results["0"]["task"]["task"] == "python" and "choose model result" in results["0"]
    assert llm.calls == 2  # /tasks and /results made no response call
    answer_ = httpx.post(server.root + "/hugginggpt", json=body, timeout=60, headers=server.auth).json()
    assert answer_ == {"message": "It printed 42."}


def test_jarvis_endpoints_answer_a_failed_plan_with_200_never_a_500(live):
    bad = json.dumps([{"task": "nope", "id": 0, "dep": [-1], "args": {"text": "x"}}])
    server = live(llm=ScriptedLLM([bad, bad, "I cannot.", bad, bad, "I cannot."]), tools_list=["python"])
    body = {"messages": [{"role": "user", "content": "do the impossible"}]}
    for route in ("/tasks", "/results"):
        reply = httpx.post(server.root + route, json=body, timeout=60, headers=server.auth)
        assert (reply.status_code, reply.json()) == (200, {"message": "I cannot."}), reply.text


def test_the_serve_client_example_runs_offline(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "examples" / "serve_client.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(root),
                                                                            "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "mode: offline" in out and "answer: The sum of 1 to 100 is 5050." in out
    assert "Observation: |  | ``` | 5050 | ```" in out and "2 to the 64th is 18446744073709551616." in out
    assert "image: I was handed image/" in out
