"""The thread <-> event-loop bridges (``runtime/bridge.py``) and the run control they take (``run/control.py``).

Every wait here ends because something happened (an event set, a cancel), never after a fixed time;
the deadlines are generous and only reached when a test fails.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.engine import RunBudget as EngineRunBudget
from chatgpt_tool_hub.engine.loop import RunBudget as LoopRunBudget
from chatgpt_tool_hub.run.control import RunBudget, RunCancelled
from chatgpt_tool_hub.runtime.bridge import (
    aiter_in_thread,
    await_in_thread,
    cancellable,
    interruptible,
    interruptible_iter,
)
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, wait_until

DEADLINE = 30.0


def _cancel_when(event: threading.Event, budget: RunBudget) -> threading.Thread:
    def work():
        assert event.wait(DEADLINE)
        budget.cancel("test")
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_run_control_lives_in_run_and_the_engine_re_exports_it():
    assert EngineRunBudget is RunBudget and LoopRunBudget is RunBudget


# ---- waiting in a thread ----------------------------------------------------------------------------


def test_interruptible_returns_the_result_and_raises_the_error():
    budget = RunBudget()
    assert interruptible(lambda: 42, budget) == 42
    with pytest.raises(ZeroDivisionError):
        interruptible(lambda: 1 / 0, budget)


def test_interruptible_ends_the_wait_when_cancelled():
    budget = RunBudget()
    started, release = threading.Event(), threading.Event()

    def blocked():
        started.set()
        release.wait(DEADLINE)
        return "late"

    _cancel_when(started, budget)
    try:
        with pytest.raises(RunCancelled):  # while the work still blocks: only the cancel ended the wait
            interruptible(blocked, budget)
    finally:
        release.set()


def test_interruptible_does_not_start_work_of_a_cancelled_run():
    budget = RunBudget()
    budget.cancel("before")
    ran = []
    with pytest.raises(RunCancelled):
        interruptible(lambda: ran.append(1), budget)
    assert ran == []


def test_interruptible_iter_keeps_the_order_and_stops_at_cancel():
    budget = RunBudget()
    assert list(interruptible_iter(lambda: iter([1, 2, 3]), budget)) == [1, 2, 3]
    release = threading.Event()
    closed = threading.Event()

    def source():
        try:
            yield "first"
            release.wait(DEADLINE)
            yield "never read"
        finally:
            closed.set()

    seen = []
    try:
        with pytest.raises(RunCancelled):
            for item in interruptible_iter(source, budget):
                seen.append(item)
                budget.cancel("test")
    finally:
        release.set()
    assert seen == ["first"]
    assert closed.wait(DEADLINE)  # the abandoned source is closed in its thread


# ---- on an event loop ------------------------------------------------------------------------------


def test_cancellable_abandons_a_wait_from_another_thread():
    budget = RunBudget()

    async def forever():
        yield "one"
        await asyncio.Event().wait()
        yield "never"

    async def main():
        seen = []
        with pytest.raises(RunCancelled):
            async for item in cancellable(forever(), budget):
                seen.append(item)
                threading.Thread(target=budget.cancel, daemon=True).start()
        return seen

    assert asyncio.run(asyncio.wait_for(main(), DEADLINE)) == ["one"]


def test_aiter_in_thread_reads_ahead_in_order_and_raises_the_error():
    def source():
        yield from range(5)
        raise ValueError("broken stream")

    async def main():
        seen = []
        with pytest.raises(ValueError, match="broken stream"):
            async for item in aiter_in_thread(source):
                seen.append(item)
        return seen

    assert asyncio.run(asyncio.wait_for(main(), DEADLINE)) == [0, 1, 2, 3, 4]


def test_aiter_in_thread_in_lockstep_never_runs_ahead_of_the_reader():
    steps: list[str] = []

    def run():
        for i in range(3):
            steps.append(f"made {i}")
            yield i

    async def main():
        async for item in aiter_in_thread(run, lockstep=True):
            steps.append(f"read {item}")

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert steps == ["made 0", "read 0", "made 1", "read 1", "made 2", "read 2"]


def test_aiter_in_thread_in_lockstep_abandoned_cancels_closes_and_waits_for_the_thread():
    budget = RunBudget()
    closed_in = []
    working = threading.Event()

    def run():
        try:
            yield "first"
            working.set()
            budget_was_cancelled = wait_until(lambda: budget.cancelled, DEADLINE)  # a tool killed by the cancel
            yield f"second ({budget_was_cancelled})"
        finally:
            closed_in.append(threading.current_thread().name)

    async def main():
        source = aiter_in_thread(run, lockstep=True, on_abandon=lambda: budget.cancel("the caller went away"))
        assert await source.__anext__() == "first"
        reader = asyncio.ensure_future(source.__anext__())
        await asyncio.get_running_loop().run_in_executor(None, working.wait, DEADLINE)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        closed_when_the_reader_went_on = list(closed_in)
        await source.aclose()
        return threading.current_thread().name, closed_when_the_reader_went_on

    loop_thread, closed = asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert budget.reason == "the caller went away"
    assert len(closed) == 1 and closed[0] != loop_thread  # closed in its own thread, and waited for


def test_await_in_thread_cancelled_calls_on_abandon_and_waits_for_the_work():
    budget = RunBudget()
    started = threading.Event()
    finished = []

    def work():
        started.set()
        wait_until(lambda: budget.cancelled, DEADLINE)  # a tool call that the run's cancel kills
        finished.append("done")

    async def main():
        task = asyncio.ensure_future(await_in_thread(work, on_abandon=lambda: budget.cancel("gone")))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, DEADLINE)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(finished)

    assert asyncio.run(asyncio.wait_for(main(), DEADLINE)) == ["done"]  # the work ended before CancelledError


def test_async_run_past_the_tool_budget_returns_instead_of_hanging(tmp_path):
    """The run ends in a tool step (its budget refuses the call): the async driver returns the result."""
    llm = ScriptedLLM([act("python", f"print({n})") for n in (1, 2, 3)])  # different calls: none is a repeat
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path),
                                  think_depth=10, max_tool_calls=1)
    try:
        result = asyncio.run(asyncio.wait_for(app.arun("count"), DEADLINE))
    finally:
        app.close()
    assert result.stopped_by == "budget" and len(result.steps) == 1 and llm.calls == 2
