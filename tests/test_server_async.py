"""The async path under the server: ``OpenAICompatibleLLM.acomplete`` / ``astream`` against a local
OpenAI-compatible server, ``aask`` / ``astream`` of the apps (with LLMs that have no async methods too),
and how a run's events become ``reasoning_content`` and ``content``."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import LLMAuthError, LLMConnectionError
from chatgpt_tool_hub.events import ActionEvent, AnswerEvent, ObservationEvent, ThoughtEvent, TokenEvent
from chatgpt_tool_hub.llm import openai_client as oc
from chatgpt_tool_hub.llm.base import LLMResponse, acall_llm, astream_llm, collect_stream
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from chatgpt_tool_hub.server.monologue import Monologue
from chatgpt_tool_hub.testing import ScriptedLLM
from tests.chat_server import chat_server  # noqa: F401 - the fixture

from helpers import act, answer

MSGS = [{"role": "user", "content": "hi"}]


def make(server, **kw) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("test-model", api_key="sk-test", base_url=server.url, max_retries=kw.pop("retries", 2),
                               backoff_base=0.0, **kw)


@pytest.fixture
def no_sleep(monkeypatch):
    slept = []

    async def fake(seconds):
        slept.append(seconds)

    monkeypatch.setattr(oc, "_asleep", fake)
    return slept


def test_acomplete_answers_with_usage_and_cuts_at_stop(chat_server):
    chat_server.replies = ["hello there\nObservation: made up"]
    response = asyncio.run(make(chat_server).acomplete(MSGS, stop=["\nObservation:"]))
    assert response.text == "hello there" and response.usage.total_tokens > 0 and not response.usage.estimated
    assert chat_server.bodies[0]["stop"] == ["\nObservation:"] and chat_server.bodies[0]["messages"] == MSGS


def test_astream_yields_pieces_and_a_last_chunk_with_usage_and_tool_calls(chat_server):
    chat_server.replies = [{"content": "let me see", "tool_calls": [{"name": "python", "arguments": {"input": "1"}}]}]

    async def main():
        return [chunk async for chunk in make(chat_server).astream(MSGS, tools=[{"type": "function"}])]

    chunks = asyncio.run(main())
    folded = collect_stream(iter(chunks))
    assert folded.text.strip() == "let me see" and len(chunks) > 2
    assert [c.name for c in folded.tool_calls] == ["python"] and folded.finish_reason == "tool_calls"
    assert chunks[-1].usage is not None and chat_server.bodies[0]["stream_options"] == {"include_usage": True}


def test_the_async_path_retries_429_and_maps_errors(chat_server, no_sleep):
    chat_server.faults.extend([("status", 429, {"Retry-After": "0.25"}), ("status", 503)])
    chat_server.replies = ["finally"]
    assert asyncio.run(make(chat_server).acomplete(MSGS)).text == "finally"
    assert no_sleep == [0.25] and len(chat_server.requests) == 3  # Retry-After honoured; the 503 retried too
    chat_server.faults.append(("status", 401))
    with pytest.raises(LLMAuthError) as err:
        asyncio.run(make(chat_server).acomplete(MSGS))
    assert "llm_api_key" in str(err.value) and "sk-test" not in str(err.value)
    chat_server.faults.extend([("status", 500)] * 3)
    with pytest.raises(LLMConnectionError):
        asyncio.run(make(chat_server).acomplete(MSGS))


def test_with_options_sends_them_and_shares_the_clients(chat_server):
    llm = make(chat_server)
    other = llm.with_options(temperature=0.9, max_tokens=12)
    chat_server.replies = ["a", "b"]
    other.complete(MSGS)
    llm.complete(MSGS)
    assert chat_server.bodies[0]["temperature"] == 0.9 and chat_server.bodies[0]["max_tokens"] == 12
    assert chat_server.bodies[1]["temperature"] == 0.0 and "max_tokens" not in chat_server.bodies[1]
    assert other._get_client() is llm._get_client() and "sk-test" not in repr(other)


def test_async_clients_are_closed_with_their_event_loop(chat_server):
    llm = make(chat_server)
    chat_server.replies = ["one", "two"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # two loops, one client each; neither outlives its loop
            asyncio.run(llm.acomplete(MSGS))
        gc.collect()
    assert not [w for w in caught if "Event loop is closed" in str(w.message)]
    assert all(entry[0].is_closed() for entry in list(llm._aclients.values()))


def test_acall_llm_and_astream_llm_run_sync_only_llms_in_a_thread():
    llm = ScriptedLLM(["first reply here", "second reply here"], chunk_size=1)
    assert asyncio.run(acall_llm(llm, MSGS)).text == "first reply here"

    async def main():
        return [c async for c in astream_llm(llm, MSGS)]

    assert collect_stream(iter(asyncio.run(main()))).text == "second reply here"


def test_aask_uses_acomplete_when_the_llm_has_it(tmp_path):
    class AsyncOnly(ScriptedLLM):
        def complete(self, *args, **kwargs):  # the sync path must not be used
            raise AssertionError("complete() was called")

        async def acomplete(self, messages, *, stop=None, tools=None):
            return ScriptedLLM.complete(self, messages, stop=stop, tools=tools)

    llm = AsyncOnly([act("python", "print(2 + 2)"), answer("4")])
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))
    assert asyncio.run(app.aask("2 + 2?")) == "4"
    assert llm.requests[1][-1]["content"].endswith("4")
    app.close()


def test_astream_yields_the_events_and_keeps_the_result(tmp_path):
    llm = ScriptedLLM([act("python", "print(3)"), answer("three")])
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))

    async def main():
        run = app.astream("go", session_id="s")
        kinds = [event.kind async for event in run]
        return kinds, run.result

    kinds, result = asyncio.run(main())
    assert kinds[-1] == "answer" and "token" in kinds and "observation" in kinds
    assert result.output == "three" and result.steps[0].observation == "3"
    assert app.history("s")[-1] == {"role": "assistant", "content": "three"}  # the app's memory, as with run()
    app.close()


def test_many_aasks_at_once_each_get_their_answer(tmp_path):
    echo = lambda messages: answer(messages[-1]["content"].upper())  # noqa: E731
    app = AppFactory().create_app(llm=ScriptedLLM([echo] * 50), no_default=True, workspace_dir=str(tmp_path))

    async def main():
        return await asyncio.gather(*(app.aask(f"q{i}", session_id=f"s{i}") for i in range(50)))

    assert asyncio.run(main()) == [f"Q{i}" for i in range(50)]
    app.close()


# ---- the monologue -----------------------------------------------------------------------------


def _tokens(text: str, size: int = 3) -> list[TokenEvent]:
    return [TokenEvent(text[i:i + size]) for i in range(0, len(text), size)]


def _feed(mono: Monologue, events) -> tuple[str, str]:
    reasoning, content = [], []
    for event in events:
        for where, text in mono.feed(event):
            (reasoning if where == "reasoning" else content).append(text)
    return "".join(reasoning), "".join(content)


def test_the_text_protocol_splits_at_the_answer_marker():
    events = [*_tokens("Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: print(1)"),
              ThoughtEvent("Do I need to use a tool? Yes"), ActionEvent("python", "print(1)"),
              ObservationEvent("python", "1"),
              *_tokens("Thought: Do I need to use a tool? No\nAI: It printed 1."),
              ThoughtEvent("Do I need to use a tool? No"), AnswerEvent("It printed 1.")]
    reasoning, content = _feed(Monologue("react"), events)
    assert content == "It printed 1."
    assert reasoning.count("Action: python") == 1 and "Observation:\n\n```\n1\n```\n" in reasoning
    assert reasoning.rstrip().endswith("Do I need to use a tool? No") and "AI:" not in reasoning


def test_an_answer_other_than_the_streamed_reply_is_sent_after_it():
    events = [*_tokens("Thought: hmm\nFinal Answer: maybe"), AnswerEvent("The limit was reached; last: 7")]
    reasoning, content = _feed(Monologue("react"), events)
    assert content == "maybe\n\nThe limit was reached; last: 7" and reasoning == "Thought: hmm\n"


def test_an_action_before_the_marker_keeps_the_reply_in_the_reasoning():
    events = [*_tokens("Action: python\nAction Input: x\nAI: not an answer"), ObservationEvent("python", "ok"),
              *_tokens("AI: done"), AnswerEvent("done")]
    reasoning, content = _feed(Monologue("react"), events)
    assert content == "done" and "AI: not an answer" in reasoning


def test_native_mode_holds_a_reply_until_it_is_known_to_be_a_thought():
    events = [*_tokens("I will compute it."), ThoughtEvent("I will compute it."), ActionEvent("python", {"code": "1"}),
              ObservationEvent("python", "1"), *_tokens("The result is 1."), AnswerEvent("The result is 1.")]
    reasoning, content = _feed(Monologue("native"), events)
    assert content == "The result is 1." and "The result" not in reasoning
    assert "I will compute it." in reasoning and 'Action Input:\n\n```json\n{\n  "code": "1"\n}\n```' in reasoning


def test_planner_mode_streams_the_response_as_the_answer_and_the_tasks_as_reasoning():
    events = [ThoughtEvent("plan: 1 task"), ActionEvent("python", "print(1)"), ObservationEvent("python", "1"),
              *_tokens("It printed 1."), AnswerEvent("It printed 1.")]
    reasoning, content = _feed(Monologue("planner"), events)
    assert content == "It printed 1." and "Thought: plan: 1 task" in reasoning
    assert "Observation:\n\n```\n1\n```" in reasoning


def test_nested_engines_steps_are_quoted():
    events = [ActionEvent("search", "x", depth=1), ObservationEvent("search", "found", depth=1)]
    reasoning, _ = _feed(Monologue("react"), events)
    assert "> Action: search" in reasoning and "> Observation:\n>\n> ```\n> found\n> ```" in reasoning


def test_an_llm_response_object_with_tool_calls_streams_from_scripted_llm():
    llm = ScriptedLLM([LLMResponse("calling")])

    async def main():
        return [c async for c in astream_llm(llm, MSGS)]

    assert collect_stream(iter(asyncio.run(main()))).text == "calling"
