"""``app.cancel()`` stops a planner request at once, also while the planner's own LLM call is in flight.

The planning call, a model-selection call and the response call wait on the LLM
in a way the cancel ends: the request returns with ``stopped_by="cancelled"``
while the LLM still blocks (it is released only when the test ends). The
deadlines are generous and only reached when a test fails.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from chatgpt_tool_hub.apps import AppFactory, PlannerApp
from chatgpt_tool_hub.planner.catalog import Catalog
from chatgpt_tool_hub.testing import ScriptedLLM

from planner_helpers import ExpertTool, plan, task

DEADLINE = 30.0
CATALOG = Catalog([
    {"id": "org/big", "task": "image-to-text", "downloads": 1000, "description": "large captioner"},
    {"id": "org/mid", "task": "image-to-text", "downloads": 500, "description": "medium captioner"},
])
PLAN = plan(task(0, "image-captioning", {"image": "cat.png"}))


class Blocking:
    """An LLM reply that blocks until the test ends; ``started`` is set once the call is in flight."""

    def __init__(self, text: str = "[]"):
        self.text = text
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, messages):
        self.started.set()
        self.release.wait(60)
        return self.text


@pytest.fixture
def blocking():
    reply = Blocking()
    yield reply
    reply.release.set()


@pytest.fixture(autouse=True)
def _cat_png(cat_png):
    return cat_png


def _run_in_thread(app, query: str, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=app.run(query, **kwargs)), daemon=True)
    thread.start()
    return thread, out


def _cancel_once_started(app, blocking: Blocking) -> None:
    assert blocking.started.wait(DEADLINE)
    assert app.cancel() == 1


def test_cancel_during_the_planning_call_returns_at_once(blocking):
    llm = ScriptedLLM([blocking, "never sent"])
    app = AppFactory().create_app(app_type="planner", tools_list=[], llm=llm, no_default=True)
    assert isinstance(app, PlannerApp)
    thread, out = _run_in_thread(app, "caption cat.png")
    _cancel_once_started(app, blocking)
    thread.join(DEADLINE)
    assert not thread.is_alive(), "run() still waits for the planning call"
    assert not blocking.release.is_set()  # the LLM still blocks: the cancel ended the wait
    result = out["result"]
    assert result.stopped_by == "cancelled" and result.plan == [] and result.tasks == {}
    assert llm.calls == 1  # no response call
    assert app.cancel() == 0  # nothing in flight any more
    app.close()


def test_cancel_during_the_planning_call_of_an_async_run(blocking):
    llm = ScriptedLLM([blocking, "never sent"])
    app = AppFactory().create_app(app_type="planner", tools_list=[], llm=llm, no_default=True)

    async def main():
        run = asyncio.ensure_future(app.arun("caption cat.png"))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _cancel_once_started, app, blocking)
        return await asyncio.wait_for(run, DEADLINE)

    result = asyncio.run(main())
    assert result.stopped_by == "cancelled" and llm.calls == 1
    assert not blocking.release.is_set()
    app.close()


def test_cancel_during_a_model_selection_call(blocking):
    llm = ScriptedLLM([PLAN, blocking, "never sent"])
    expert = ExpertTool()
    app = PlannerApp(llm, [expert], model_selection="llm", top_k=2, catalog=CATALOG)
    thread, out = _run_in_thread(app, "caption cat.png")
    _cancel_once_started(app, blocking)
    thread.join(DEADLINE)
    assert not thread.is_alive(), "run() still waits for the selection call"
    result = out["result"]
    assert result.stopped_by == "cancelled" and [t["task"] for t in result.plan] == ["image-captioning"]
    assert expert.switched == [] and llm.calls == 2  # the task never ran, no response call
    app.close()


def test_cancel_during_the_streamed_response_keeps_the_task_results(blocking):
    llm = ScriptedLLM([PLAN, blocking])
    app = PlannerApp(llm, [ExpertTool()], model_selection="downloads", catalog=CATALOG)
    events: list = []
    thread = threading.Thread(target=lambda: events.extend(app.stream("caption cat.png")), daemon=True)
    thread.start()
    _cancel_once_started(app, blocking)
    thread.join(DEADLINE)
    assert not thread.is_alive(), "stream() still waits for the response call"
    answer = events[-1]
    assert answer.kind == "answer" and answer.stopped_by == "cancelled"
    assert "1 of 1 tasks finished" in answer.text and "[org/big] caption of" in answer.text
    app.close()
