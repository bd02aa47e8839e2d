"""DAG execution: parallelism, ordering, substitution, failures, timeouts, cancel."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from chatgpt_tool_hub.planner.binding import UnresolvedPlaceholder, substitute
from chatgpt_tool_hub.planner.events import TaskEndEvent, TaskStartEvent
from chatgpt_tool_hub.planner.execute import DagRun
from chatgpt_tool_hub.planner.plan import Task, validate_plan

from planner_helpers import Recorder, SleepTool, WorkspaceDetector, task


def run_dag(items, tools, **kwargs):
    tasks, problems = validate_plan(items, tools, max_tasks=50)
    assert problems == []
    dag = DagRun(tasks, tools, **kwargs)
    events = list(dag.events())
    return dag, events


def sleepers(recorder, *names, seconds=0.2, **kw):
    return {n: SleepTool(n, recorder, seconds, **kw) for n in names}


class Meeting(SleepTool):
    """Waits until every other task of the meeting is running too (a barrier), then ends."""

    def __init__(self, name: str, recorder: Recorder, barrier: threading.Barrier):
        super().__init__(name, recorder, 0.0)
        self.barrier = barrier

    def _run(self, text: str) -> str:
        self.recorder.add("start", self.name)
        self.barrier.wait()  # raises BrokenBarrierError after its timeout unless all tasks run at once
        self.recorder.add("end", self.name)
        return f"{self.name}({text})"


def test_independent_tasks_overlap(recorder):
    # no clock: four tasks can only pass a barrier of four if they all run at the same time
    # (the wall-time gain is a figure of benchmarks/planner.py)
    barrier = threading.Barrier(4, timeout=10)
    tools = {n: Meeting(n, recorder, barrier) for n in "abcd"}
    items = [task(i, name, {"text": name}) for i, name in enumerate(tools)]
    dag, _ = run_dag(items, tools, max_workers=4)
    assert [r.status for r in dag.results.values()] == ["ok"] * 4, [r.error for r in dag.results.values()]
    kinds = [kind for kind, _ in recorder.order()]
    assert kinds == ["start"] * 4 + ["end"] * 4


def test_max_workers_limits_concurrency(recorder):
    tools = sleepers(recorder, "a", "b", "c", "d", seconds=0.05)
    items = [task(i, name, {"text": name}) for i, name in enumerate(tools)]
    run_dag(items, tools, max_workers=2)
    running = peak = 0
    for kind, _ in recorder.order():
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 2


def test_dependents_start_after_their_dependencies_end(recorder):
    # a -> c, b -> d; c waits for a only, so c starts before b ends when a is quicker than b
    tools = {"a": SleepTool("a", recorder, 0.05), "b": SleepTool("b", recorder, 0.6),
             "c": SleepTool("c", recorder, 0.0), "d": SleepTool("d", recorder, 0.0)}
    items = [task(0, "a", {"text": "x"}), task(1, "b", {"text": "y"}),
             task(2, "c", {"text": "<resource>-0"}, [0]), task(3, "d", {"text": "<resource>-1"}, [1])]
    dag, events = run_dag(items, tools, max_workers=4)
    assert recorder.index("end", "a") < recorder.index("start", "c") < recorder.index("end", "b")
    assert recorder.index("end", "b") < recorder.index("start", "d")
    # the event stream says the same: each dependency's end comes before its dependent's start
    order = [(type(e).__name__, e.task_id) for e in events if isinstance(e, (TaskStartEvent, TaskEndEvent))]
    assert order.index(("TaskEndEvent", 0)) < order.index(("TaskStartEvent", 2))
    assert order.index(("TaskEndEvent", 1)) < order.index(("TaskStartEvent", 3))
    assert dag.results[2].started >= dag.results[0].ended


def test_placeholder_substitution_whole_and_in_string(tools, recorder):
    items = [task(0, "text-to-image", {"text": "a red fox"}),
             task(1, "upper", {"text": "file: <resource>-0, done"}, [0]),
             task(2, "image-captioning", {"image": "<resource>-0"}, [0]),
             task(3, "text-to-speech", {"text": "<resource>-2"}, [2])]
    dag, events = run_dag(items, tools)
    r = dag.results
    assert all(x.status == "ok" for x in r.values()), {k: (v.status, v.error) for k, v in r.items()}
    image = r[0].output
    assert r[1].args == {"text": f"file: {image}, done"} and r[1].output == f"FILE: {image.upper()}, DONE"
    assert r[2].args == {"image": image} and r[2].output == "a drawing of a red fox"
    assert r[3].args == {"text": "a drawing of a red fox"}
    # an audio tool that names its file inside a sentence: the resource is the path
    assert r[3].resource.startswith("audio/") and Path(r[3].resource).exists()
    starts = [e for e in events if isinstance(e, TaskStartEvent)]
    assert {e.task_id: e.tool_input for e in starts}[2] == {"image": image}


def test_substitute_never_leaves_a_placeholder():
    assert substitute({"text": "<resource>-1 and <GENERATED>-2"}, {1: "a", 2: "b"}) == {"text": "a and b"}
    with pytest.raises(UnresolvedPlaceholder):
        substitute("<resource>-3", {1: "a"})
    with pytest.raises(UnresolvedPlaceholder):
        substitute("x <resource>-1", {1: ""})


def test_task_with_an_unresolvable_placeholder_is_not_run(recorder):
    tool = SleepTool("a", recorder, 0.0)
    # validation would reject this plan; the executor refuses it on its own too
    dag = DagRun([Task(0, "a", (), {"text": "<resource>-5"})], {"a": tool})
    list(dag.events())
    assert dag.results[0].status == "failed" and "not run" in dag.results[0].error
    assert tool.calls == []


def test_failed_task_skips_dependents_but_not_independent_branches(recorder):
    tools = {"bad": SleepTool("bad", recorder, 0.0, fail=True), "child": SleepTool("child", recorder, 0.0),
             "grandchild": SleepTool("grandchild", recorder, 0.0), "other": SleepTool("other", recorder, 0.1)}
    items = [task(0, "bad", {"text": "x"}), task(1, "child", {"text": "<resource>-0"}, [0]),
             task(2, "grandchild", {"text": "<resource>-1"}, [1]), task(3, "other", {"text": "y"})]
    dag, _ = run_dag(items, tools)
    r = dag.results
    assert r[0].status == "failed" and r[0].error == "RuntimeError: bad broke"
    assert r[1].status == "skipped" and r[1].reason == "task 0 (bad) failed: RuntimeError: bad broke"
    assert r[2].status == "skipped" and "depends on task 1" in r[2].reason
    assert r[3].status == "ok"
    assert tools["child"].calls == [] and tools["grandchild"].calls == []


def test_hung_task_times_out_and_does_not_block(recorder):
    release = threading.Event()
    tools = {"hang": SleepTool("hang", recorder, 0.0, hang=release), "after": SleepTool("after", recorder, 0.0),
             "free": SleepTool("free", recorder, 0.05)}
    items = [task(0, "hang", {"text": "x"}), task(1, "after", {"text": "<resource>-0"}, [0]),
             task(2, "free", {"text": "y"})]
    try:
        dag, events = run_dag(items, tools, timeout=0.3)
        still_hung = ("end", "hang") not in recorder.order()
    finally:
        release.set()
    r = dag.results
    assert r[0].status == "timeout" and "0.3" in r[0].error
    assert r[1].status == "skipped" and "timed out" in r[1].reason
    assert r[2].status == "ok"
    assert still_hung  # the run ended while the hung thread still hung (it did not wait for it)
    assert [e.status for e in events if isinstance(e, TaskEndEvent) and e.task_id == 0] == ["timeout"]


def test_timed_out_task_frees_its_worker_slot(recorder):
    release = threading.Event()
    tools = {"hang": SleepTool("hang", recorder, 0.0, hang=release), "next": SleepTool("next", recorder, 0.0)}
    try:
        dag, _ = run_dag([task(0, "hang", {"text": "x"}), task(1, "next", {"text": "y"})], tools,
                         max_workers=1, timeout=0.2)
    finally:
        release.set()
    assert dag.results[0].status == "timeout" and dag.results[1].status == "ok"


def test_cancel_stops_waiting_tasks_at_once(recorder):
    release = threading.Event()
    tools = {"slow": SleepTool("slow", recorder, 0.0, hang=release), "later": SleepTool("later", recorder, 0.0)}
    tasks, _ = validate_plan([task(0, "slow", {"text": "x"}), task(1, "later", {"text": "<resource>-0"}, [0])],
                             tools, max_tasks=5)
    dag = DagRun(tasks, tools).start()
    threading.Timer(0.1, dag.cancel).start()
    try:
        events = list(dag.events())
        still_running = ("end", "slow") not in recorder.order()
    finally:
        release.set()
    assert still_running  # the events ended at the cancel, not when the running task ended
    assert {r.status for r in dag.results.values()} == {"cancelled"}
    assert tools["later"].calls == []
    assert sum(isinstance(e, TaskEndEvent) for e in events) == 2


def test_empty_dag_finishes_immediately():
    dag = DagRun([], {})
    assert list(dag.events()) == [] and dag.finished


def test_recorder_helper_is_ordered():
    rec = Recorder()
    rec.add("start", "x")
    rec.add("end", "x")
    assert rec.order() == [("start", "x"), ("end", "x")]


def test_file_output_named_in_a_sentence_inside_a_workspace(tools):
    workspace = Path("workspace")
    (workspace / "image").mkdir(parents=True)
    (workspace / "image" / "a.png").write_text("a dog")
    detector = WorkspaceDetector(workspace)
    all_tools = {**tools, detector.name: detector}
    items = [task(0, "object-detection", {"image": "image/a.png"}),
             task(1, "upper", {"text": "see <resource>-0"}, [0])]
    dag, _ = run_dag(items, all_tools)
    r = dag.results
    assert r[0].resource == "image/b1_detect_a_a.png"  # the output, not the input named first
    assert r[0].file == str((workspace / "image" / "b1_detect_a_a.png").resolve())
    assert r[1].args == {"text": "see image/b1_detect_a_a.png"}


def _events_within(dag, seconds=5.0):
    """The run's events, or a failure when it does not finish in time (instead of hanging the suite)."""
    events: list = []
    reader = threading.Thread(target=lambda: events.extend(dag.events()), daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        dag.cancel("test timeout")
        pytest.fail("the DAG run never finished")
    return events


class _OddTool(SleepTool):
    """A tool whose ``run`` breaks the contract: it returns a non-string or raises a BaseException."""

    def __init__(self, name, recorder, result=None, raises=None):
        super().__init__(name, recorder, 0.0)
        self.result, self.raises = result, raises

    def run(self, tool_input="", context=None):
        if self.raises is not None:
            raise self.raises
        return self.result


@pytest.mark.parametrize("returned", [{"label": "cat"}, None, 42])
def test_a_tool_returning_a_non_string_does_not_hang_the_run(recorder, returned):
    tools = {"odd": _OddTool("odd", recorder, result=returned), "next": SleepTool("next", recorder, 0.0)}
    tasks, _ = validate_plan([task(0, "odd", {"text": "x"}), task(1, "next", {"text": "<resource>-0"}, [0])],
                             tools, max_tasks=5)
    dag = DagRun(tasks, tools)
    _events_within(dag)
    assert dag.results[0].status == "ok" and isinstance(dag.results[0].output, str)
    assert dag.results[1].status == "ok"


def test_a_tool_raising_a_base_exception_fails_its_task(recorder):
    tools = {"exits": _OddTool("exits", recorder, raises=SystemExit(3)), "free": SleepTool("free", recorder, 0.0)}
    tasks, _ = validate_plan([task(0, "exits", {"text": "x"}), task(1, "free", {"text": "y"})], tools, max_tasks=5)
    dag = DagRun(tasks, tools)  # no timeout: only the task's own end can settle it
    _events_within(dag)
    assert dag.results[0].status == "failed" and "SystemExit" in dag.results[0].error
    assert dag.results[1].status == "ok"
