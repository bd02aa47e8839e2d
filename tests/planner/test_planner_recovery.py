"""A planner question always ends in an answer: prose replies, broken plans, demos built from the app's tools.

The replies below are what a small model (SmolLM2-135M behind llama.cpp) wrote:
prose instead of a plan, then the first prompt demo's JSON copied and cut off.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.events import AnswerEvent, ErrorEvent, TokenEvent
from chatgpt_tool_hub.planner.plan import parse_plan, validate_plan
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool

from planner_helpers import plan, task

PROSE = "The answer is 36."
BROKEN_DEMO = '[{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "/exp2.jpg" }}, {"task"'
JARVIS_ONLY = ("object-detection", "visual-question-answering", "/exp1.jpg", "/exp2.jpg", "image/e2.png")


@tool(name="calculator", description="Evaluate an arithmetic expression.")
def calculator(text: str) -> str:
    return str(eval(text, {"__builtins__": {}}))  # noqa: S307 - test arithmetic only


@tool(name="shout", description="Upper-case the text.")
def shout(text: str) -> str:
    return text.upper()


def _app(llm: ScriptedLLM, tools=(calculator,)) -> PlannerApp:
    return PlannerApp(llm, list(tools))


def _demos(messages: list[dict]) -> list[dict]:
    """The demonstration messages of a planning request (between the system prompt and the question)."""
    return messages[1:-1]


# ---- the two real replies, end to end --------------------------------------------------------------


def test_the_small_models_two_replies_end_in_an_answer_through_run():
    llm = ScriptedLLM([PROSE, BROKEN_DEMO])
    result = _app(llm).run("What is 6 * 6?")
    assert result.output == PROSE and result.stopped_by == "no_tools"
    assert result.tasks == {} and result.plan == []
    assert llm.calls <= 3 and result.llm_calls == llm.calls


def test_the_small_models_two_replies_end_in_an_answer_through_ask_stream_and_async():
    assert _app(ScriptedLLM([PROSE, BROKEN_DEMO])).ask("What is 6 * 6?") == PROSE
    events = list(_app(ScriptedLLM([PROSE, BROKEN_DEMO])).stream("What is 6 * 6?"))
    assert isinstance(events[-1], AnswerEvent) and events[-1].text == PROSE and events[-1].stopped_by == "no_tools"
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == PROSE
    assert asyncio.run(_app(ScriptedLLM([PROSE, BROKEN_DEMO])).aask("What is 6 * 6?")) == PROSE
    result = asyncio.run(_app(ScriptedLLM([PROSE, BROKEN_DEMO])).arun("What is 6 * 6?"))
    assert result.output == PROSE and result.stopped_by == "no_tools"

    async def consume():
        run = _app(ScriptedLLM([PROSE, BROKEN_DEMO])).astream("What is 6 * 6?")
        kinds = [event.kind async for event in run]
        return kinds, run.result

    kinds, streamed = asyncio.run(consume())
    assert kinds[-1] == "answer" and streamed.output == PROSE


def test_broken_demo_json_then_prose_answers_after_one_replan():
    llm = ScriptedLLM([BROKEN_DEMO, PROSE])
    result = _app(llm).run("What is 6 * 6?")
    assert (result.output, result.stopped_by, result.replans, llm.calls) == (PROSE, "no_tools", 1, 2)
    assert "cut off" in result.plan_problems[0]


def test_a_leading_answer_marker_is_not_part_of_a_prose_answer():
    result = _app(ScriptedLLM(["Answer: Paris is the capital of France."])).run("capital of France?")
    assert (result.output, result.stopped_by, result.llm_calls) == ("Paris is the capital of France.", "no_tools", 1)


# ---- a plan that cannot be repaired -------------------------------------------------------------------


def test_a_plan_broken_twice_is_answered_directly_with_a_stop_reason():
    events: list = []
    llm = ScriptedLLM([BROKEN_DEMO, BROKEN_DEMO, "6 * 6 is 36."])
    result = PlannerApp(llm, [calculator], callbacks=[events.append]).run("What is 6 * 6?")
    assert (result.output, result.stopped_by, result.replans, result.tasks) == ("6 * 6 is 36.", "plan_failed", 1, {})
    assert llm.calls == 3 and result.llm_calls == 3
    assert result.plan_problems and "cut off" in result.plan_problems[0]
    direct = llm.requests[2]
    assert direct[-1] == {"role": "user", "content": "What is 6 * 6?"}
    assert "planning failed" in direct[0]["content"].lower() and "cut off" in direct[0]["content"]
    assert all("object-detection" not in m["content"] for m in direct)  # the broken plans are not shown again
    assert any(isinstance(e, ErrorEvent) and "planning failed" in e.message for e in events)
    answer = events[-1]
    assert isinstance(answer, AnswerEvent) and answer.stopped_by == "plan_failed"


def test_an_empty_direct_answer_after_a_failed_plan_says_why():
    llm = ScriptedLLM([BROKEN_DEMO, BROKEN_DEMO, ""])
    result = _app(llm).run("What is 6 * 6?")
    assert result.stopped_by == "plan_failed" and llm.calls == 3
    assert "could not make a usable plan" in result.output and "cut off" in result.output


def test_a_failed_plan_streams_its_answer_as_tokens():
    llm = ScriptedLLM([BROKEN_DEMO, BROKEN_DEMO, "It is 36."], chunk_size=2)
    events = list(_app(llm).stream("What is 6 * 6?"))
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "It is 36."
    assert isinstance(events[-1], AnswerEvent) and events[-1].stopped_by == "plan_failed"
    fallback = list(_app(ScriptedLLM([BROKEN_DEMO, BROKEN_DEMO, ""])).stream("What is 6 * 6?"))
    assert "".join(e.text for e in fallback if isinstance(e, TokenEvent)) == fallback[-1].text != ""


def test_a_task_the_app_does_not_have_is_reported_and_answered():
    missing = plan(task(0, "object-detection", {"image": "/exp2.jpg"}))
    llm = ScriptedLLM([missing, missing, "I cannot detect objects here."])
    result = _app(llm).run("how many people are in /exp2.jpg?")
    assert (result.output, result.stopped_by) == ("I cannot detect objects here.", "plan_failed")
    assert "unknown task 'object-detection'" in llm.requests[1][-1]["content"]  # reported back to the LLM first
    assert any("object-detection" in p for p in result.plan_problems)


def test_too_many_tasks_twice_is_answered():
    many = plan(*[task(i, "calculator", {"text": str(i)}) for i in range(4)])
    result = PlannerApp(ScriptedLLM([many, many, "Too much."]), [calculator], max_tasks=3).run("go")
    assert result.stopped_by == "plan_failed" and "at most 3" in result.plan_problems[0]


# ---- demos from the app's own tools ---------------------------------------------------------------------


def test_demos_never_name_a_tool_the_app_lacks():
    llm = ScriptedLLM(["[]\nAnswer: 36"])
    _app(llm, [calculator]).run("What is 6 * 6?")
    planning = llm.requests[0]
    text = "\n".join(m["content"] for m in planning)
    for word in (*JARVIS_ONLY, "text-to-speech", "image-captioning"):
        assert word not in text
    demos = _demos(planning)
    plans = [m["content"] for m in demos if m["role"] == "assistant" and m["content"].startswith("[{")]
    assert plans and all('"task": "calculator"' in p for p in plans)


def test_two_tools_get_a_one_task_and_a_chained_demo_that_validate():
    llm = ScriptedLLM(["[]\nAnswer: ok"])
    tools = {t.name: t for t in (calculator, shout)}
    _app(llm, tools.values()).run("hi")
    demos = _demos(llm.requests[0])
    plans = [m["content"] for m in demos if m["role"] == "assistant" and m["content"].startswith("[{")]
    items = [json.loads(p) for p in plans]
    assert sorted(len(i) for i in items) == [1, 2]
    chained = next(i for i in items if len(i) == 2)
    assert chained[1]["dep"] == [0] and "<resource>-0" in json.dumps(chained[1]["args"])
    assert {t["task"] for i in items for t in i} == {"calculator", "shout"}
    for text in plans:  # every demo is a plan this app can run
        tasks, problems = validate_plan(parse_plan(text).items, tools, max_tasks=20)
        assert tasks and problems == []
    assert sum(len(m["content"]) for m in demos) < 800  # short: small models have small context windows


def test_a_file_tool_demo_chains_by_kind():

    @tool(name="draw", description="Draw the text.")
    def draw(text: str) -> str:
        return "image/x.png"

    draw.output_kind = "image"

    @tool(name="look", description="Describe an image.")
    def look(image: str) -> str:
        return "a picture"

    llm = ScriptedLLM(["[]\nAnswer: ok"])
    _app(llm, [look, draw]).run("hi")
    plans = [json.loads(m["content"]) for m in _demos(llm.requests[0])
             if m["role"] == "assistant" and m["content"].startswith("[{")]
    chained = next(p for p in plans if len(p) == 2)
    assert [t["task"] for t in chained] == ["draw", "look"] and chained[1]["args"] == {"image": "<resource>-0"}


def test_no_usable_tool_no_task_demo():
    llm = ScriptedLLM(["[]\nAnswer: hello"])
    PlannerApp(llm, []).run("hi")
    demos = _demos(llm.requests[0])
    assert not any(m["role"] == "assistant" and m["content"].startswith("[{") for m in demos)
    assert all(word not in m["content"] for m in llm.requests[0] for word in JARVIS_ONLY)


def test_the_jarvis_demos_stay_for_apps_with_those_tools(tools):
    llm = ScriptedLLM(["[]\nAnswer: ok"])
    PlannerApp(llm, list(tools.values())).run("hi")  # image-captioning and text-to-speech, no object-detection
    text = "\n".join(m["content"] for m in _demos(llm.requests[0]))
    assert '"task": "image-captioning"' in text and '"task": "text-to-speech"' in text
    assert "object-detection" not in text and "/exp1.jpg" not in text


@pytest.mark.parametrize("route", ["/hugginggpt", "/tasks", "/results"])
def test_the_jarvis_routes_answer_a_bad_plan_with_200(live, route):
    llm = ScriptedLLM([PROSE, BROKEN_DEMO, BROKEN_DEMO, "It is 36."])
    server = live(llm=llm, tools_list=["python"])
    body = {"messages": [{"role": "user", "content": "What is 6 * 6?"}]}
    first = httpx.post(server.root + route, json=body, timeout=60, headers=server.auth)
    second = httpx.post(server.root + route, json=body, timeout=60, headers=server.auth)
    assert (first.status_code, first.json()) == (200, {"message": PROSE})
    assert (second.status_code, second.json()) == (200, {"message": "It is 36."})


def test_the_planner_chat_model_answers_a_bad_plan(live):
    llm = ScriptedLLM([PROSE, BROKEN_DEMO, BROKEN_DEMO, "It is 36."])
    client = live(llm=llm, tools_list=["python"]).client()
    messages = [{"role": "user", "content": "What is 6 * 6?"}]
    first = client.chat.completions.create(model="tool-hub-planner", messages=messages)
    second = client.chat.completions.create(model="tool-hub-planner", messages=messages)
    assert first.choices[0].message.content == PROSE
    assert first.model_extra["tool_hub"]["stopped_by"] == "no_tools"
    assert second.choices[0].message.content == "It is 36." and second.choices[0].finish_reason == "stop"
    assert second.model_extra["tool_hub"]["stopped_by"] == "plan_failed"
