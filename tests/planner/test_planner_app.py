"""PlannerApp end to end with ScriptedLLM: run/stream/ask, re-planning, empty plans, chat log, cancel."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.errors import ConfigError, UserError
from chatgpt_tool_hub.events import ActionEvent, AnswerEvent, ErrorEvent, ObservationEvent, ThoughtEvent, TokenEvent
from chatgpt_tool_hub.planner import PlanResult
from chatgpt_tool_hub.planner.events import PlanEvent, TaskEndEvent, TaskStartEvent
from chatgpt_tool_hub.testing import ScriptedLLM

from planner_helpers import SleepTool, WorkspaceDetector, plan, task

DRAW_AND_CAPTION = plan(task(0, "text-to-image", {"text": "a red fox"}),
                        task(1, "image-captioning", {"image": "<resource>-0"}, [0]),
                        task(2, "text-to-speech", {"text": "<resource>-1"}, [1]))


def test_run_returns_everything_structured(tools):
    llm = ScriptedLLM([DRAW_AND_CAPTION, "Here is your fox."])
    app = PlannerApp(llm, list(tools.values()))
    result = app.run("draw a red fox, describe it and read the description")
    assert isinstance(result, PlanResult)
    assert result.output == "Here is your fox." and result.stopped_by == "answer"
    assert result.plan == json.loads(DRAW_AND_CAPTION)
    assert set(result.tasks) == {0, 1, 2} and all(t.status == "ok" for t in result.tasks.values())
    for t in result.tasks.values():
        assert t.seconds is not None and t.ended >= t.started >= 0
    assert set(result.assignments) == {0, 1, 2}
    assert result.llm_calls == 2 and result.usage.llm_calls == 2 and result.usage.total.total_tokens > 0
    assert result.replans == 0 and result.plan_problems == []
    assert [s.tool for s in result.steps] == ["text-to-image", "image-captioning", "text-to-speech"]
    # the response prompt: user input as its own message, the plan and results with full file paths
    response = llm.requests[1]
    assert response[1] == {"role": "user", "content": "draw a red fox, describe it and read the description"}
    workflow = response[2]["content"]
    image = os.path.abspath(result.tasks[0].output)
    audio = os.path.abspath(result.tasks[2].resource)
    assert image in workflow and audio in workflow and '"status": "ok"' in workflow
    assert "complete path" in response[3]["content"]


def test_planning_prompt_lists_tasks_with_kinds_demos_and_chat_log(tools):
    llm = ScriptedLLM(["[]", "hi"])
    app = PlannerApp(llm, list(tools.values()))
    history = [{"role": "user", "content": "earlier question"}, {"role": "assistant", "content": "earlier answer"}]
    app.ask("hello", chat_history=history)
    messages = llm.requests[0]
    system = messages[0]["content"]
    assert "- text-to-image: Draw a picture of the text. (text -> image)" in system
    assert "- image-captioning: Describe an image. (image -> text)" in system
    assert "<resource>-dep_id" in system and "at most 20" in system
    assert any(m["role"] == "assistant" and m["content"].startswith("[{") for m in messages[1:-3])  # demos
    assert messages[-3:] == [*history, {"role": "user", "content": "hello"}]


def test_invalid_plan_goes_back_once_with_the_exact_problems(tools):
    bad = plan(task(0, "upper", {"text": "x"}, [0]))
    good = plan(task(0, "upper", {"text": "x"}))
    llm = ScriptedLLM([bad, good, "X it is"])
    events = []
    result = PlannerApp(llm, list(tools.values()), callbacks=[events.append]).run("shout x")
    assert result.output == "X it is" and result.replans == 1
    assert result.plan_problems == ["task 0 (upper) depends on itself"]
    feedback = llm.requests[1][-1]["content"]
    assert "- task 0 (upper) depends on itself" in feedback
    assert llm.requests[1][-2] == {"role": "assistant", "content": bad}
    assert any(isinstance(e, ErrorEvent) and "depends on itself" in e.message for e in events)
    assert result.llm_calls == 3


def test_second_invalid_plan_ends_with_an_answer_without_tools(tools):
    llm = ScriptedLLM([plan(task(0, "nope", {"text": "x"})), json.dumps([task(0, "upper", {"text": "x"})])[:-5],
                       "I could not shout it."])
    result = PlannerApp(llm, list(tools.values())).run("shout x")
    assert (result.output, result.stopped_by, result.replans, result.tasks) == (
        "I could not shout it.", "plan_failed", 1, {})
    assert "cut off" in result.plan_problems[0] and "cut off" in llm.requests[2][0]["content"]
    assert llm.calls == 3  # no third plan, nothing ran


def test_a_model_that_only_talks_has_answered(tools):
    llm = ScriptedLLM(["Hello! I am an AI assistant."])
    result = PlannerApp(llm, list(tools.values())).run("hello, who are you?")
    assert result.output == "Hello! I am an AI assistant." and result.tasks == {}
    assert result.llm_calls == 1 and result.replans == 0 and result.stopped_by == "no_tools"
    after_a_bad_plan = ScriptedLLM(['[{"task": "upper", "id": 0,', "Hi again: I am an assistant that can use tools."])
    result = PlannerApp(after_a_bad_plan, list(tools.values())).run("hello")
    assert (result.output, result.replans, result.stopped_by) == (
        "Hi again: I am an assistant that can use tools.", 1, "no_tools")


def test_empty_plan_with_answer_costs_one_call(tools):
    llm = ScriptedLLM(["[]\nAnswer: Paris."])
    result = PlannerApp(llm, list(tools.values())).run("capital of France?")
    assert (result.output, result.stopped_by, result.llm_calls, result.tasks) == ("Paris.", "no_tools", 1, {})


def test_empty_plan_alone_costs_two_calls(tools):
    llm = ScriptedLLM(["[]", "Paris."])
    result = PlannerApp(llm, list(tools.values())).run("capital of France?")
    assert (result.output, result.stopped_by, result.llm_calls) == ("Paris.", "no_tools", 2)
    assert llm.requests[1][-1] == {"role": "user", "content": "capital of France?"}


def test_stream_yields_typed_events_in_order(tools):
    llm = ScriptedLLM([DRAW_AND_CAPTION, "Here is your fox, read aloud."], chunk_size=2)
    events = list(PlannerApp(llm, list(tools.values())).stream("fox please"))
    kinds = [e.kind for e in events]
    assert isinstance(events[0], PlanEvent) and events[0].kind == "thought" and len(events[0].tasks) == 3
    starts = [e for e in events if isinstance(e, TaskStartEvent)]
    ends = [e for e in events if isinstance(e, TaskEndEvent)]
    assert [e.task_id for e in starts] == [0, 1, 2] and [e.status for e in ends] == ["ok"] * 3
    assert all(isinstance(e, ActionEvent) for e in starts) and all(isinstance(e, ObservationEvent) for e in ends)
    assert kinds.index("token") > max(i for i, k in enumerate(kinds) if k == "observation")
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "Here is your fox, read aloud."
    assert isinstance(events[-1], AnswerEvent) and events[-1].text == "Here is your fox, read aloud."
    assert isinstance(events[0], ThoughtEvent)


def test_failing_task_is_reported_and_the_answer_still_comes(tools):
    items = plan(task(0, "image-captioning", {"image": "missing.png"}),
                 task(1, "text-to-speech", {"text": "<resource>-0"}, [0]), task(2, "upper", {"text": "ok"}))
    llm = ScriptedLLM([items, "Partly done."])
    result = PlannerApp(llm, list(tools.values())).run("caption my picture and read it; shout ok")  # a path the request does not name: not checked
    statuses = {i: t.status for i, t in result.tasks.items()}
    assert statuses == {0: "failed", 1: "skipped", 2: "ok"}
    workflow = llm.requests[1][2]["content"]
    assert "FileNotFoundError" in workflow and "skipped" in workflow


def test_hanging_task_times_out_through_the_app(recorder, tools):
    release = threading.Event()
    hang = SleepTool("hang", recorder, 0.0, hang=release)
    llm = ScriptedLLM([plan(task(0, "hang", {"text": "x"}), task(1, "upper", {"text": "y"})), "done"])
    try:
        result = PlannerApp(llm, [hang, tools["upper"]], task_timeout=0.3).run("go")
        still_hung = ("end", "hang") not in recorder.order()
    finally:
        release.set()
    assert still_hung  # the app answered while the hung task still hung
    assert result.tasks[0].status == "timeout" and result.tasks[1].status == "ok" and result.output == "done"


def test_chat_log_resources_are_usable(tools, cat_png):
    history = [{"role": "user", "content": f"I uploaded {cat_png}"}, {"role": "assistant", "content": "Got it."}]

    def planner(messages):
        assert any(str(cat_png) in m["content"] for m in messages if m["role"] == "user")
        return plan(task(0, "image-captioning", {"image": str(cat_png)}))

    llm = ScriptedLLM([planner, "It shows a cat."])
    result = PlannerApp(llm, list(tools.values())).run("what is in the picture I sent?", chat_history=history)
    assert result.tasks[0].output == "a drawing of a cat"
    assert llm.requests[1][1:3] == history  # the response call sees the conversation too


def test_app_cancel_returns_at_once_without_a_response_call(recorder):
    release = threading.Event()
    slow = SleepTool("slow", recorder, 0.0, hang=release)
    later = SleepTool("later", recorder, 0.0)
    llm = ScriptedLLM([plan(task(0, "slow", {"text": "x"}), task(1, "later", {"text": "<resource>-0"}, [0]))])
    app = PlannerApp(llm, [slow, later])
    cancelled = []

    def cancel_when_started(event):  # callbacks run in the caller's thread, while the task hangs
        if isinstance(event, TaskStartEvent):
            cancelled.append(app.cancel())

    try:
        result = app.run("go", callbacks=[cancel_when_started])
    finally:
        release.set()
    assert cancelled == [1]
    assert result.stopped_by == "cancelled" and "cancelled" in result.output
    assert {t.status for t in result.tasks.values()} == {"cancelled"}
    assert later.calls == [] and llm.calls == 1
    assert app.cancel() == 0  # nothing in flight any more


def test_memory_sessions_reset_and_aask(tools):
    llm = ScriptedLLM(["[]\nAnswer: one", "[]\nAnswer: two", "[]\nAnswer: three"])
    app = PlannerApp(llm, list(tools.values()))
    assert app.ask("first") == "one"
    assert asyncio.run(app.aask("second")) == "two"
    assert [m["content"] for m in app.history()] == ["first", "one", "second", "two"]
    assert llm.requests[1][-3:] == [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"},
                                    {"role": "user", "content": "second"}]
    app.reset()
    assert app.history() == []
    app.ask("third", session_id="other")
    assert app.history("other")[-1]["content"] == "three" and app.history() == []


def test_from_config_reads_typed_keys(tools):
    config = {"planner_max_tasks": "3", "planner_max_workers": "2", "planner_model_selection": "Downloads",
              "planner_top_k": 7, "planner_task_timeout": "9.5", "memory_max_tokens": ""}
    app = PlannerApp.from_config(ScriptedLLM([]), list(tools.values()), config)
    assert app.app_type == "planner"
    assert (app.settings.max_tasks, app.settings.max_workers, app.settings.task_timeout) == (3, 2, 9.5)
    assert (app.selector.mode, app.selector.top_k, app.memory_max_tokens) == ("downloads", 7, 2000)
    assert app.tool_names == list(tools)
    with pytest.raises(ConfigError) as err:
        PlannerApp.from_config(ScriptedLLM([]), [], {"planner_max_workers": "many"})
    assert err.value.key == "planner_max_workers"
    with pytest.raises(ConfigError):
        PlannerApp.from_config(ScriptedLLM([]), [], {"planner_max_tasks": 0})


def test_too_many_tasks_uses_max_tasks(tools):
    many = plan(*[task(i, "upper", {"text": str(i)}) for i in range(4)])
    llm = ScriptedLLM([many, many, "Too many steps."])
    result = PlannerApp(llm, list(tools.values()), max_tasks=3).run("go")
    assert result.stopped_by == "plan_failed" and "at most 3" in result.plan_problems[0]


def test_user_errors(tools):
    app = PlannerApp(ScriptedLLM([]), list(tools.values()))
    with pytest.raises(UserError):
        app.ask("  ")
    with pytest.raises(UserError):
        PlannerApp(ScriptedLLM([]), ["python"])


def test_importing_the_planner_does_not_import_torch():
    code = ("import sys, chatgpt_tool_hub.planner\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_response_prompt_names_workspace_files_by_full_path(tools):
    workspace = Path("workspace")
    (workspace / "image").mkdir(parents=True)
    (workspace / "image" / "a.png").write_text("a dog")
    llm = ScriptedLLM([plan(task(0, "object-detection", {"image": "image/a.png"})), "One dog."])
    result = PlannerApp(llm, [WorkspaceDetector(workspace)]).run("how many dogs in image/a.png?")
    full = str((workspace / "image" / "b1_detect_a_a.png").resolve())
    assert result.tasks[0].file == full
    workflow = llm.requests[1][2]["content"]
    assert f"Annotated image: {full}" in workflow and str((workspace / "image" / "a.png").resolve()) in workflow


def test_one_app_serves_concurrent_requests(tools):
    def reply(messages):
        query = next(m["content"] for m in reversed(messages) if m["role"] == "user" and m["content"].startswith("q"))
        if messages[0]["content"].startswith("#1 Task Planning"):
            return plan(task(0, "upper", {"text": query}), task(1, "upper", {"text": "<resource>-0!"}, [0]))
        return f"answer to {query}"

    app = PlannerApp(ScriptedLLM([reply] * 16), list(tools.values()))
    results: dict[str, PlanResult] = {}

    def ask(query: str) -> None:
        results[query] = app.run(query, session_id=query)

    threads = [threading.Thread(target=ask, args=(f"q{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [f"q{i}" for i in range(8)]
    for query, result in results.items():
        assert result.output == f"answer to {query}"
        assert result.tasks[1].output == f"{query.upper()}!"


def test_a_factory_app_copies_the_files_a_request_names_into_its_workspace(isolated_env):
    """The real expert tool reads only its workspace: the user's /abs/exp1.jpg reaches it as the copy."""
    from PIL import Image

    from chatgpt_tool_hub.apps import AppFactory

    outside = isolated_env / "photos" / "exp1.jpg"
    outside.parent.mkdir()
    Image.new("RGB", (60, 40), (10, 200, 10)).save(outside, "JPEG")
    llm = ScriptedLLM([plan(task(0, "image-classification", {"image": str(outside)})), "A remote label."])
    app = AppFactory().create_app(app_type="planner", tools_list=["image-classification"], llm=llm,
                                  workspace_dir=str(isolated_env / "ws"), planner_model_selection="downloads",
                                  image_classification_endpoint="http://127.0.0.1:9/models/vit", no_default=True)
    classifier = next(t for t in app.tools if t.name == "image-classification")
    seen = []
    classifier.call_remote = lambda endpoint, **inputs: seen.append(inputs["image"]) or [{"label": "leaf",
                                                                                          "score": 1.0}]
    result = app.run(f"what is in {outside}?")
    assert result.tasks[0].status == "ok", result.tasks[0].error
    copy = result.plan[0]["args"]["image"]
    assert copy.startswith("image/") and (app.context.workspace / copy).is_file()
    assert seen == [str((app.context.workspace / copy).resolve())]  # the tool read the copy in its workspace


def test_tools_can_be_added_and_removed_between_requests(tools):
    """add_tool / unregister work on the planner as on the ReAct app: a removed tool is no longer planned
    with (its task fails as an unknown tool), one added back runs again."""
    upper = tools["upper"]
    llm = ScriptedLLM([plan(task(0, "upper", {"text": "hi"})), "done"])
    app = PlannerApp(llm, [t for t in tools.values() if t is not upper])
    assert "upper" not in app.tool_names
    app.add_tool(upper)
    assert "upper" in app.tool_names
    result = app.run("shout hi")
    assert result.tasks[0].status == "ok" and result.tasks[0].output == "HI"
    app.unregister(upper.name)
    assert upper.name not in app.tool_names
    with pytest.raises(UserError, match="no tool named"):
        app.unregister(upper.name)
