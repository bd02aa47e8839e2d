"""The ready queue: the task with the longest remaining path starts first (critical-path priority).

Start orders are checked, not timings (benchmarks/planner.py measures the
efficiency of FIFO against critical-path on random DAGs).
"""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.planner.execute import DagRun, remaining_paths
from chatgpt_tool_hub.planner.plan import Task

from planner_helpers import SleepTool


@pytest.fixture
def tool(recorder):
    return {"sleep": SleepTool("sleep", recorder, 0.0)}


def tasks_of(deps: dict[int, tuple[int, ...]]) -> list[Task]:
    return [Task(i, "sleep", tuple(d), {"text": " ".join(f"<resource>-{x}" for x in d) or f"seed {i}"})
            for i, d in deps.items()]


# three independent leaves (0, 1, 2) and a chain 3 -> 4 -> 5, every task as long as the others
LEAVES_AND_CHAIN = {0: (), 1: (), 2: (), 3: (), 4: (3,), 5: (4,)}


def run(tasks, tools, **kwargs) -> DagRun:
    dag = DagRun(tasks, tools, timeout=30, **kwargs)
    assert dag.wait(30)
    assert [r.status for r in dag.results.values()] == ["ok"] * len(tasks), [r.error for r in dag.results.values()]
    return dag


def test_remaining_paths_count_tasks_without_estimates():
    paths = remaining_paths(tasks_of(LEAVES_AND_CHAIN))
    assert paths == {0: 1, 1: 1, 2: 1, 3: 3, 4: 2, 5: 1}


def test_remaining_paths_follow_the_longest_chain_of_dependents():
    # 0 -> 1 -> 3 and 0 -> 2 -> 3: durations pick the longer branch
    tasks = tasks_of({0: (), 1: (0,), 2: (0,), 3: (1, 2)})
    assert remaining_paths(tasks, {0: 1.0, 1: 5.0, 2: 2.0, 3: 1.0}) == {0: 7.0, 1: 6.0, 2: 3.0, 3: 1.0}
    # a task without an estimate counts as the mean of the known ones; a function of the task works too
    assert remaining_paths(tasks, {0: 2.0, 3: 4.0})[0] == 2.0 + 3.0 + 4.0
    assert remaining_paths(tasks, lambda t: 0.5)[0] == 1.5


def test_a_deep_chain_needs_no_recursion():
    chain = tasks_of({i: ((i - 1,) if i else ()) for i in range(3000)})
    assert remaining_paths(chain)[0] == 3000


def test_the_chain_starts_before_the_leaves_when_fifo_would_finish_later(tool):
    """2 workers, unit tasks: FIFO runs 0,1 | 2,3 | 4 | 5 (4 rounds); the chain head first runs
    3,0 | 4,1 | 5,2 (3 rounds, the lower bound). The first wave is started synchronously, so it is exact."""
    tasks = tasks_of(LEAVES_AND_CHAIN)
    fifo = run(tasks, tool, max_workers=2, order="fifo")
    critical = run(tasks, tool, max_workers=2)
    assert sorted(fifo.launched[:2]) == [0, 1]
    assert sorted(critical.launched[:2]) == [0, 3]


def test_one_worker_follows_the_priorities_exactly(tool):
    tasks = tasks_of(LEAVES_AND_CHAIN)
    # 3 (path 3), then 4 (path 2) before the leaves; 5 then ties with the leaves (path 1) and waits its id's turn
    assert run(tasks, tool, max_workers=1).launched == [3, 4, 0, 1, 2, 5]
    assert run(tasks, tool, max_workers=1, order="fifo").launched == [0, 1, 2, 3, 4, 5]


def test_durations_decide_over_task_counts(tool):
    # a long leaf (0) against a chain of two short tasks (1 -> 2)
    tasks = tasks_of({0: (), 1: (), 2: (1,)})
    assert run(tasks, tool, max_workers=1).launched == [1, 0, 2]  # counting: the chain of 2 first
    assert run(tasks, tool, max_workers=1, durations={0: 5.0, 1: 1.0, 2: 1.0}).launched == [0, 1, 2]


def test_ties_go_to_the_lower_id(tool):
    tasks = tasks_of({0: (), 1: (), 2: (), 3: ()})
    assert run(tasks, tool, max_workers=1).launched == [0, 1, 2, 3]


def test_an_unknown_order_is_refused(tool):
    with pytest.raises(ValueError, match="critical-path, fifo"):
        DagRun(tasks_of({0: ()}), tool, order="lifo")
