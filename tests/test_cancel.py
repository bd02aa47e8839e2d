"""Cancelling a run (``app.cancel``, a cancelled asyncio task), sessions kept by an app, the memory's token cache.

A cancelled run returns ``stopped_by="cancelled"`` with its steps so far, the
python / terminal call in flight is killed with everything it started (a
grandchild that would write a file later never does), and no further LLM call
is made. Nothing here asserts on time: that a kill happened is shown by what
the killed processes did not do.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory, PlannerApp
from chatgpt_tool_hub.engine import memory as memory_module
from chatgpt_tool_hub.engine.loop import RunBudget, RunCancelled
from chatgpt_tool_hub.engine.memory import ConversationMemory
from chatgpt_tool_hub.events import ActionEvent
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.builtin.python_tool import PythonTool

from helpers import act, answer, wait_gone, wait_until

LATE_S = 30  # the grandchild writes late.txt this long after it starts, unless it was killed

PYTHON_CODE = (
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', 'import time, pathlib; time.sleep({LATE_S}); "
    "pathlib.Path(\"late.txt\").write_text(\"x\")'])\n"
    "open('child.pid', 'w').write(str(child.pid))\n"
    "time.sleep(60)\n"
)
SHELL_COMMAND = f"(sleep {LATE_S}; touch late.txt) & echo $! > child.pid; sleep 60"


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def _app(tmp_path, llm, tools=("python",), **kwargs):
    return AppFactory().create_app(tools_list=list(tools), llm=llm, no_default=True,
                                   workspace_dir=str(tmp_path / "ws"), python_timeout=60, terminal_timeout=60,
                                   **kwargs)


def _cancel_when_started(app, ws: Path, counts: list) -> threading.Thread:
    """Cancel ``app``'s runs once the tool's child is started; ``counts`` gets what ``cancel()`` returned
    (join the thread first: the run may return before ``cancel()`` does)."""
    def work():
        _wait_for(ws / "child.pid")
        counts.append(app.cancel())
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def _assert_tree_gone(ws: Path) -> None:
    child = int((ws / "child.pid").read_text())
    assert wait_gone(child), "the process the tool started still runs"
    # the child is the only writer of late.txt: gone without the file, it was killed before its time
    assert not (ws / "late.txt").exists(), "something the tool started kept running"


@pytest.mark.parametrize("tool, tool_input", [("python", PYTHON_CODE), ("terminal", SHELL_COMMAND)])
def test_cancel_kills_the_running_tool_and_returns_the_steps_so_far(tmp_path, tool, tool_input):
    llm = ScriptedLLM([act(tool, tool_input), answer("never sent")])
    app = _app(tmp_path, llm, tools=(tool,))
    ws = tmp_path / "ws"
    counts: list[int] = []
    threads: list[threading.Thread] = []
    starter = lambda event: isinstance(event, ActionEvent) and threads.append(  # noqa: E731
        _cancel_when_started(app, ws, counts))
    result = app.run("run it", callbacks=[starter])
    threads[0].join(60)
    assert counts == [1]
    assert result.stopped_by == "cancelled"
    assert [s.tool for s in result.steps] == [tool]
    assert "cancelled" in result.steps[0].observation and "ran longer than" not in result.steps[0].observation
    assert "cancelled" in result.output and result.steps[0].observation.splitlines()[-1] in result.output
    assert llm.calls == 1  # no LLM call after the cancel
    _assert_tree_gone(ws)
    assert app.cancel() == 0  # nothing in flight any more
    app.close()


def test_the_session_works_again_after_a_cancel(tmp_path):
    llm = ScriptedLLM([act("python", PYTHON_CODE), act("python", "print(6 * 7)"), answer("42")])
    app = _app(tmp_path, llm)
    counts: list[int] = []
    app.run("first", callbacks=[lambda e: isinstance(e, ActionEvent) and _cancel_when_started(app, tmp_path / "ws",
                                                                                              counts)])
    result = app.run("second")
    assert result.stopped_by == "answer" and result.steps[0].observation == "42"
    app.close()


def test_cancel_of_one_session_leaves_the_others_running(tmp_path):
    started = threading.Event()
    release = threading.Event()

    def slow(messages):
        if "slow" in messages[-1]["content"]:
            started.set()
            release.wait(30)
        return answer("done " + messages[-1]["content"])

    app = _app(tmp_path, ScriptedLLM([slow, slow]), tools=())
    results = {}
    thread = threading.Thread(target=lambda: results.update(b=app.run("slow b", session_id="b")))
    thread.start()
    assert started.wait(60)
    assert app.cancel("a") == 0  # another session: nothing of it runs
    assert app.run("fast a", session_id="a").output == "done fast a"
    assert app.cancel("b") == 1
    thread.join(25)  # the cancel ends the wait for the LLM (30 s): the run returns before the reply comes
    release.set()
    assert not thread.is_alive() and results["b"].stopped_by == "cancelled"
    app.close()


def test_a_cancelled_asyncio_task_kills_the_tool_and_leaves_nothing_running(tmp_path):
    llm = ScriptedLLM([act("python", PYTHON_CODE), answer("never sent")])
    app = _app(tmp_path, llm)
    ws = tmp_path / "ws"

    async def main():
        task = asyncio.create_task(app.arun("run it"))
        while not (ws / "child.pid").exists():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _assert_tree_gone(ws)
    assert llm.calls == 1 and app.cancel() == 0
    app.close()


def test_app_cancel_during_an_async_run_returns_the_cancelled_result(tmp_path):
    gate = threading.Event()

    def waits(messages):
        gate.wait(30)
        return answer("late")

    llm = ScriptedLLM([act("python", "print(1)"), waits])
    app = _app(tmp_path, llm)

    async def main():
        events = []
        run = app.astream("go")
        async for event in run:
            events.append(event)
            if event.kind == "observation":
                asyncio.get_running_loop().call_later(0.2, app.cancel)
        return run.result, events

    try:
        result, events = asyncio.run(main())
    finally:
        gate.set()
    assert result.stopped_by == "cancelled" and [s.observation for s in result.steps] == ["1"]
    assert events[-1].kind == "answer" and events[-1].stopped_by == "cancelled"
    app.close()


def test_planner_cancel_kills_a_running_python_task(tmp_path):
    plan = json.dumps([{"task": "python", "id": 0, "dep": [-1], "args": {"text": PYTHON_CODE}}])
    llm = ScriptedLLM([plan, "never sent"])
    app = AppFactory().create_app(app_type="planner", tools_list=["python"], llm=llm, no_default=True,
                                  workspace_dir=str(tmp_path / "ws"), python_timeout=60, planner_task_timeout=60)
    assert isinstance(app, PlannerApp)
    counts: list[int] = []
    canceller = _cancel_when_started(app, tmp_path / "ws", counts)
    result = app.run("run the code")
    canceller.join(60)
    assert counts == [1] and result.stopped_by == "cancelled"
    assert llm.calls == 1
    _assert_tree_gone(tmp_path / "ws")
    app.close()


def test_run_budget_cancel_runs_hooks_once_and_stops_charges():
    budget = RunBudget(max_llm_calls=5)
    seen = []
    remove = budget.on_cancel(lambda: seen.append("a"))
    budget.on_cancel(lambda: seen.append("b"))
    remove()
    budget.charge_llm()
    assert budget.cancel("test") is True and budget.cancel("again") is False
    assert seen == ["b"]
    with pytest.raises(RunCancelled):
        budget.charge_tool()
    late = []
    budget.on_cancel(lambda: late.append(1))  # registered after the cancel: runs at once
    assert late == [1]


class _Interrupt(BaseException):
    pass


def test_an_interrupt_while_python_code_runs_kills_the_worker(tmp_path):
    tool = PythonTool(workspace_dir=tmp_path, timeout=60)
    previous = signal.signal(signal.SIGUSR1, lambda *a: (_ for _ in ()).throw(_Interrupt()))
    try:
        def interrupt_when_started():
            wait_until((tmp_path / "started").exists)  # the code runs in the worker
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

        threading.Thread(target=interrupt_when_started, daemon=True).start()
        with pytest.raises(_Interrupt):
            tool.run("import time\nopen('started', 'w').close()\ntime.sleep(60)")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert tool.worker_pids() == {}  # the worker was killed, not left running the old code
    assert tool.run("print('fresh')") == "fresh"
    tool.close()


# ---- sessions kept by an app ---------------------------------------------------------------------


def test_sessions_past_max_sessions_are_evicted_with_their_python_workers(tmp_path):
    llm = ScriptedLLM([act("python", "x = 1"), answer("a"), act("python", "x = 2"), answer("b"),
                       act("python", "x = 3"), answer("c")])
    app = _app(tmp_path, llm, max_sessions=2)
    python = app.tools[0]
    app.ask("one", session_id="s1")
    app.ask("two", session_id="s2")
    pid = python.worker_pids()["s1"]
    app.ask("three", session_id="s3")
    assert app.session_ids == ["s2", "s3"]
    assert "s1" not in python.worker_pids() and wait_gone(pid)
    app.close()


def test_sessions_idle_past_the_ttl_are_evicted(tmp_path):
    now = [1000.0]
    llm = ScriptedLLM([answer("a"), answer("b"), answer("c")])
    app = _app(tmp_path, llm, tools=(), session_ttl_s=60)
    app._clock = lambda: now[0]
    app.ask("one", session_id="old")
    now[0] += 30
    app.ask("two", session_id="recent")
    now[0] += 45  # "old" idle 75 s, "recent" 45 s
    assert app.prune_sessions() == ["old"]
    assert app.session_ids == ["recent"] and app.history("recent")
    app.ask("three", chat_history=[], session_id="tools-only")  # a chatbot's user: tool state only
    assert "tools-only" in app.session_ids
    app.close()


def test_calls_with_their_own_history_and_no_session_id_keep_no_session(tmp_path):
    app = _app(tmp_path, ScriptedLLM([answer("a")] * 3), tools=())
    for _ in range(3):
        app.ask("hi", chat_history=[{"role": "user", "content": "earlier"}])
    assert app.session_ids == []
    app.close()


# ---- the memory's token cache ----------------------------------------------------------------------


def test_memory_counts_each_message_once(monkeypatch):
    counted = []
    real = memory_module.count_message_tokens

    def counting(messages, model=None):
        counted.append(len(messages))
        return real(messages, model)

    monkeypatch.setattr(memory_module, "count_message_tokens", counting)
    memory_module._cache.clear()
    roomy = ConversationMemory(max_tokens=100_000)  # the upper bounds fit: nothing is tokenised
    for turn in range(40):
        roomy.add_turn(f"question {turn} " * 20, f"answer {turn} " * 20)
        assert len(roomy.messages()) == 2 * (turn + 1)
    assert counted == []
    memory = ConversationMemory(max_tokens=10_000)  # the bounds pass the budget after a few turns: counted
    for turn in range(40):
        memory.add_turn(f"question {turn} " * 20, f"answer {turn} " * 20)
        assert len(memory.messages()) == 2 * (turn + 1)
    assert counted and set(counted) == {1}
    assert len(counted) <= 80  # at most one count per message added; reads and trims reuse the counts


def test_trim_to_budget_reuses_counts_of_a_history_sent_again(monkeypatch):
    counted = []
    real = memory_module.count_message_tokens
    monkeypatch.setattr(memory_module, "count_message_tokens",
                        lambda messages, model=None: counted.append(1) or real(messages, model))
    memory_module._cache.clear()
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 10} for i in range(30)]
    memory_module.trim_to_budget(history, 100_000)  # the upper bounds fit: nothing is tokenised
    assert counted == []
    assert len(memory_module.trim_to_budget(history, 2_000)) == 30  # over the bounds, within the exact counts
    memory_module.trim_to_budget(history + [{"role": "user", "content": "one more"}], 2_000)
    assert len(counted) == 31


def test_forget_last_turn_pops_only_a_question_and_its_answer():
    memory = ConversationMemory(1000)
    assert memory.pop_turn() == []
    memory.add_turn("q1", "a1")
    memory.add_turn("q2", "a2")
    assert memory.pop_turn() == [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    assert memory.messages() == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]
    memory.add_messages([{"role": "user", "content": "lonely"}])
    assert memory.pop_turn() == [] and len(memory) == 3
    app = AppFactory().create_app(tools_list=[], llm=ScriptedLLM([answer("hi")]), no_default=True)
    app.ask("hello", session_id="s")
    assert app.forget_last_turn("s") is True and app.history("s") == []
    assert app.forget_last_turn("s") is False
