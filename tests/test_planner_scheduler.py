"""The planner's DAG scheduler: when and where a ready task starts, its order, its watchdog, and refusing an
oversized plan.

Behaviour only: which thread, which order, which message (benchmarks/planner.py measures efficiency and CPU
time beside a ThreadPoolExecutor).
"""

from __future__ import annotations

import json
import threading

import pytest

from chatgpt_tool_hub.planner.execute import DagRun
from chatgpt_tool_hub.planner.plan import PlanFeedback, Task, parse_plan, validate_plan
from chatgpt_tool_hub.planner.workers import DaemonPool
from chatgpt_tool_hub.tools import Tool


class Probe(Tool):
    """Records the thread each call ran on; a call whose text names a gate waits for it."""

    description = "records where it ran"

    def __init__(self, name: str = "probe", gates: dict[str, threading.Event] | None = None):
        self.name = name
        self.gates = gates or {}
        self.threads: dict[str, int] = {}
        self.order: list[str] = []
        self.lock = threading.Lock()

    def _run(self, text: str) -> str:
        with self.lock:
            self.threads[text] = threading.get_ident()
            self.order.append(text)
        gate = self.gates.get(text)
        if gate is not None:
            assert gate.wait(10), f"{text} was never released"
        return f"done {text}"


def chain(length: int, tool: str = "probe") -> list[Task]:
    return [Task(i, tool, (i - 1,) if i else (), {"text": f"t{i}"}) for i in range(length)]


def finish(dag: DagRun) -> None:
    assert dag.wait(10)
    assert [r.status for r in dag.results.values()] == ["ok"] * len(dag.results), \
        [r.error for r in dag.results.values()]


def test_a_ready_task_starts_on_the_thread_where_its_last_dependency_finished():
    # no pool hop: the worker that ends task 0 runs task 1 itself, and so on down the chain
    probe = Probe()
    pool = DaemonPool("chain-test")
    pool.warm(4)  # idle threads are there: a hop to one of them would show as another thread
    dag = DagRun(chain(6), {"probe": probe}, max_workers=4, pool=pool, timeout=30)
    finish(dag)
    assert len({probe.threads[f"t{i}"] for i in range(6)}) == 1
    assert dag.launched == [0, 1, 2, 3, 4, 5]
    pool.close()


def test_a_task_waits_for_its_last_dependency_and_starts_when_it_ends():
    gates = {"a": threading.Event(), "b": threading.Event()}
    probe = Probe(gates=gates)
    tasks = [Task(0, "probe", (), {"text": "a"}), Task(1, "probe", (), {"text": "b"}),
             Task(2, "probe", (0, 1), {"text": "c"})]
    dag = DagRun(tasks, {"probe": probe}, max_workers=4, timeout=30).start()
    gates["a"].set()
    # task 0 ended; task 2 still waits on task 1
    assert not dag.wait(0.2)
    assert dag.results[2].status == "pending" and "c" not in probe.order
    gates["b"].set()
    finish(dag)
    assert probe.order[-1] == "c" and probe.threads["c"] == probe.threads["b"]


def test_the_worker_that_ends_a_task_takes_the_best_ready_task_not_its_own_child():
    # one worker; 0 -> 1 and 2 -> 3 -> 4. Longest remaining path first (ties: lower id): 2, then 0 (tie with
    # 3), then 3 (path 2) before 1 (0's own child, path 1), then 1, then 4
    probe = Probe()
    tasks = [Task(0, "probe", (), {"text": "t0"}), Task(1, "probe", (0,), {"text": "t1"}),
             Task(2, "probe", (), {"text": "t2"}), Task(3, "probe", (2,), {"text": "t3"}),
             Task(4, "probe", (3,), {"text": "t4"})]
    dag = DagRun(tasks, {"probe": probe}, max_workers=1, timeout=30)
    finish(dag)
    assert dag.launched == [2, 0, 3, 1, 4]
    assert probe.order == ["t2", "t0", "t3", "t1", "t4"]
    fifo = DagRun(tasks, {"probe": Probe()}, max_workers=1, timeout=30, order="fifo")
    finish(fifo)
    assert fifo.launched == [0, 2, 1, 3, 4]


def test_extra_ready_tasks_go_to_other_workers():
    # 0 fans out to 1, 2, 3: its worker keeps one, the pool runs the others at the same time
    barrier = threading.Barrier(3, timeout=10)

    class Meet(Probe):
        def _run(self, text: str) -> str:
            out = super()._run(text)
            if text != "t0":
                barrier.wait()  # passes only when all three children run at once
            return out

    probe = Meet()
    tasks = [Task(0, "probe", (), {"text": "t0"})] + [Task(i, "probe", (0,), {"text": f"t{i}"}) for i in (1, 2, 3)]
    dag = DagRun(tasks, {"probe": probe}, max_workers=4, timeout=30)
    finish(dag)
    assert len({probe.threads[f"t{i}"] for i in (1, 2, 3)}) == 3
    assert probe.threads["t0"] in {probe.threads[f"t{i}"] for i in (1, 2, 3)}


def test_a_run_with_a_timeout_starts_no_thread_on_a_warm_pool():
    # the watchdog is a pool job too, and the chain stays on one worker
    gates = {"t1": threading.Event()}
    probe = Probe(gates=gates)
    pool = DaemonPool("warm-test")
    finish(DagRun(chain(3), {"probe": Probe()}, max_workers=2, pool=pool, timeout=30))
    pool.warm(3)
    before = set(threading.enumerate())
    dag = DagRun(chain(3), {"probe": probe}, max_workers=2, pool=pool, timeout=30).start()
    try:
        assert set(threading.enumerate()) - before == set()
    finally:
        gates["t1"].set()
    finish(dag)
    pool.close()


def test_a_task_started_after_the_watchdog_went_to_sleep_still_times_out():
    # the watchdog sleeps until task 0's deadline and is not woken for task 1 (due later); it must still
    # time task 1 out when it hangs
    gates = {"t1": threading.Event()}
    probe = Probe(gates=gates)
    dag = DagRun(chain(3), {"probe": probe}, max_workers=2, timeout=0.3)
    try:
        assert dag.wait(10)
        assert [dag.results[i].status for i in range(3)] == ["ok", "timeout", "skipped"]
    finally:
        gates["t1"].set()


def test_many_tasks_all_settle_and_the_run_ends_once():
    probe = Probe()
    tasks = [Task(i, "probe", tuple(range(max(0, i - 3), i)) if i % 5 else (), {"text": f"t{i}"})
             for i in range(300)]
    dag = DagRun(tasks, {"probe": probe}, max_workers=4, timeout=30)
    events = list(dag.events())
    assert sum(1 for e in events if type(e).__name__ == "TaskEndEvent") == 300
    assert all(r.status == "ok" for r in dag.results.values()) and sorted(dag.launched) == list(range(300))


# ---- refusing an oversized plan ------------------------------------------------------------------------


class Upper(Tool):
    name = "upper"
    description = "upper-case text"

    def _run(self, text: str) -> str:
        return text.upper()


def big_plan(count: int) -> list[dict]:
    return [{"task": "upper", "id": i, "dep": [i - 1] if i else [-1], "args": {"text": str(i)}}
            for i in range(count)]


def test_an_oversized_python_literal_is_refused_with_its_length():
    text = str(big_plan(5000))
    with pytest.raises(PlanFeedback) as err:
        parse_plan(text)
    assert err.value.problems == [
        f"the JSON list starting at character 0 could not be read: it is {len(text):,} characters long and not "
        f"strict JSON (double quotes, no trailing commas). Reply with only the corrected JSON list of tasks "
        f"(as few as needed)"]


def test_an_oversized_json_plan_is_refused_by_the_task_limit():
    parsed = parse_plan(json.dumps(big_plan(5000)))
    assert validate_plan(parsed.items, {"upper": Upper()}, max_tasks=20)[1] == [
        "the plan has 5000 tasks; at most 20 are allowed. Plan as few tasks as the request needs"]


@pytest.mark.parametrize("damage", ["trailing comma", "comment"])
def test_a_long_json_plan_that_needs_a_repair_is_still_read(damage):
    text = json.dumps(big_plan(5000))
    if damage == "trailing comma":
        text = text[:-1] + ",]"
    else:
        text = text[:1] + "// the plan\n" + text[1:]
    assert len(text) > 200_000
    assert len(parse_plan(text).items) == 5000
